"""Our BFCL multi-turn checker (`trace_jax/envs/bfcl/multi_turn.py`) against the official one
(`bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker`) on every task of the four multi-turn subsets:
the ground-truth path (must be valid), the same calls one per step (valid too), and three alterations of
the last turn with calls (its last call dropped, that call's first argument changed or, without arguments,
its name; that call repeated), which mostly fail. Agreement = same validity and same error type.

  pip install --no-deps bfcl-eval==2026.3.23
  python studies/environments/bfcl_multi_turn_agreement.py            # the installed package's data
  python studies/environments/bfcl_multi_turn_agreement.py --data /path/to/bfcl_eval/data --limit 20

The last line is one JSON object {"subsets": {subset: {"tasks", "ground_truth_valid", "altered_failed",
"agreement", ...}}, "agreement": overall, "judgements": n}.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags  # noqa: E402

from trace_jax.envs.bfcl import multi_turn as mt  # noqa: E402

flags.DEFINE_string("data", "", "The BFCL data directory ('' = the installed bfcl_eval package's).")
flags.DEFINE_integer("limit", 0, "Tasks per subset (0 = all).")
FLAGS = flags.FLAGS


def _changed_argument(call: str) -> str:
    """The call with its first argument's value changed (strings suffixed, numbers + 1, others negated)."""
    node = ast.parse(call, mode="eval").body
    values = list(node.args) + [k.value for k in node.keywords]
    if not values:
        node.func.id += "_x"  # no argument: an undocumented name, whose result is an error
        return ast.unparse(node)
    value = ast.literal_eval(values[0])
    if isinstance(value, bool):
        new = not value
    elif isinstance(value, (int, float)):
        new = value + 1
    elif isinstance(value, str):
        new = value + "_x"
    else:
        new = None
    target = values[0]
    replacement = ast.Constant(new)
    if node.args and node.args[0] is target:
        node.args[0] = replacement
    else:
        node.keywords[0].value = replacement
    return ast.unparse(node)


def variants(gt: list[list[str]]) -> dict[str, list[list[list[str]]]]:
    """The model results to judge: {name: [turn][step][call]}."""
    non_empty = [t for t, calls in enumerate(gt) if calls]
    out = {"ground_truth": [[list(calls)] for calls in gt],
           "one_call_per_step": [[[c] for c in calls] for calls in gt]}
    if non_empty:
        t = non_empty[-1]
        dropped = [[list(calls)] for calls in gt]
        dropped[t] = [gt[t][:-1]]
        out["dropped_last_call"] = dropped
        changed = [[list(calls)] for calls in gt]
        changed[t] = [gt[t][:-1] + [_changed_argument(gt[t][-1])]]
        out["changed_argument"] = changed
        repeated = [[list(calls)] for calls in gt]
        repeated[t] = [gt[t] + gt[t][-1:]]
        out["repeated_last_call"] = repeated
    return out


def main(argv):
    del argv
    checker = mt.bfcl_eval_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
    data = FLAGS.data or os.path.join(os.path.dirname(mt.bfcl_eval_module().__file__), "data")
    t0 = time.time()
    table, judgements, agreed_total = {}, 0, 0
    for subset in mt.SUBSETS:
        entries = mt.load_multi_turn(data, subset)[: FLAGS.limit or None]
        counts = {"tasks": len(entries), "ground_truth_valid": 0, "official_ground_truth_valid": 0,
                  "altered": 0, "altered_failed": 0, "official_altered_failed": 0, "agreed": 0, "judged": 0,
                  "disagreements": []}
        by_variant: dict[str, list[bool]] = {}
        for entry in entries:
            for name, result in variants(entry["ground_truth"]).items():
                ours = mt.check(entry, result, entry["ground_truth"])
                official = checker.multi_turn_checker(result, entry["ground_truth"], dict(entry),
                                                      entry["id"].rsplit("_", 1)[0], f"agree_{judgements}")
                judgements += 1
                same = ours.valid == official["valid"] and (ours.valid or ours.error_type == official["error_type"])
                counts["judged"] += 1
                counts["agreed"] += same
                if not same and len(counts["disagreements"]) < 5:
                    counts["disagreements"].append({"id": entry["id"], "variant": name, "ours": ours.error_type or
                                                    "valid", "official": official.get("error_type", "valid")})
                if name in ("ground_truth", "one_call_per_step"):
                    counts["ground_truth_valid"] += ours.valid
                    counts["official_ground_truth_valid"] += official["valid"]
                else:
                    by_variant.setdefault(name, []).append(not ours.valid)
                    counts["altered"] += 1
                    counts["altered_failed"] += not ours.valid
                    counts["official_altered_failed"] += not official["valid"]
        agreed_total += counts["agreed"]
        paths = 2 * len(entries)
        table[subset] = {"tasks": len(entries), "ground_truth_valid": counts["ground_truth_valid"] / paths,
                         "official_ground_truth_valid": counts["official_ground_truth_valid"] / paths,
                         "altered_failed": counts["altered_failed"] / max(1, counts["altered"]),
                         "official_altered_failed": counts["official_altered_failed"] / max(1, counts["altered"]),
                         "failed_by_alteration": {k: sum(v) / len(v) for k, v in by_variant.items()},
                         "agreement": counts["agreed"] / counts["judged"], "judgements": counts["judged"],
                         "disagreements": counts["disagreements"]}
        r = table[subset]
        print(f"{subset:>24}: {r['tasks']} tasks; ground-truth paths valid {r['ground_truth_valid']:.3f} (official "
              f"{r['official_ground_truth_valid']:.3f}); altered paths failed {r['altered_failed']:.3f} (official "
              f"{r['official_altered_failed']:.3f}; {', '.join(f'{k} {v:.3f}' for k, v in r['failed_by_alteration'].items())}); agreement {r['agreement']:.4f} on {r['judgements']}")
        for d in r["disagreements"]:
            print("   disagreement:", d)
    overall = agreed_total / max(1, judgements)
    print(f"agreement {overall:.4f} on {judgements} judgements in {time.time() - t0:.0f} s")
    print(json.dumps({"subsets": table, "agreement": overall, "judgements": judgements}))


if __name__ == "__main__":
    app.run(main)
