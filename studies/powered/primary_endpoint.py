"""A comparison's primary endpoint from its `results_tokens.json` (written by `compare.py`).

  python studies/powered/primary_endpoint.py --decisive
  python studies/powered/primary_endpoint.py
  python studies/powered/primary_endpoint.py --results studies/powered/results/math,studies/powered/results/funcall

`--decisive`: the decisive comparison (studies/decisive/PLAN.md): TRACE - GRPO final mean-of-8
from `studies/decisive/results/confirm_math/results_tokens.json`, with TRACE - PCL, the per-seed variance of the difference
(PLAN: 12 seeds if it reaches 3 points^2), the decision, and each arm's final success and measured cost per
step (from the runs' ledgers); writes `studies/decisive/results/primary_endpoint.json` {diff, ci95, mdd, seeds, eval_tasks,
endpoint, arms_settings, decision, arms, ...}, its last line the same object.

Without it, the powered comparison's: the 3-task mean of TRACE - GRPO held-out success at equal
generated tokens, from each task's `results_tokens.json` (`compare.py --config studies/powered/config.py:task=...`).

Prints each task's paired difference, their mean (independent experiments: variances add) with its
95% interval and minimal detectable difference, and says which tasks are missing or unfinished; the
last line is one JSON object {"tasks": {...}, "mean": {...} | null, "missing": [...]}, also written to
`--output` (default studies/powered/results/primary_endpoint.json; empty: not written).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repo root

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from trace_jax.compare.paired import PairedDifference, mean_over_arms  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO, RESULTS = os.path.dirname(os.path.dirname(HERE)), os.path.join(HERE, "results")
TASKS = ("multihop", "math", "funcall")
flags.DEFINE_list("results", [os.path.join(RESULTS, t) for t in TASKS],
                  "Results directories of the powered comparison, one per task.")
flags.DEFINE_string("output", None, "Where the JSON object goes (default studies/powered/results/primary_endpoint.json, "
                    "with --decisive studies/decisive/results/primary_endpoint.json; empty: printed only).")
flags.DEFINE_bool("decisive", False, "The decisive comparison's endpoint (PLAN.md) instead of the powered one's.")
DECISIVE = os.path.join(REPO, "studies", "decisive", "results")
SEED_VARIANCE_FOR_12_SEEDS = 3.0  # points^2 (PLAN.md, phase 2)


def endpoint(directories: list[str]) -> dict:
    tasks, missing = {}, []
    for directory in directories:
        path = os.path.join(directory, "results_tokens.json")
        if not os.path.exists(path):
            missing.append(f"{directory}: no results_tokens.json")
            continue
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        primary = result.get("primary_endpoint")
        if primary is None:
            missing.append(f"{directory}: no paired TRACE - GRPO outcomes yet")
            continue
        tasks[primary["task"]] = primary
    # the powered comparison fixed no equivalence margin before its runs: gain, loss or inconclusive only
    mean = mean_over_arms([PairedDifference.from_json(d) for d in tasks.values()]).to_json(0.0) if tasks else None
    return {"tasks": tasks, "mean": mean, "missing": missing}


COST_PER_STEP = ("tokens_generated", "tokens_prefilled", "tool_calls")


def arm_summaries(runs: list[dict]) -> dict:
    """Per arm: mean final greedy and mean-of-k success over its seeds, and the [min, max] over its runs of each
    run's measured cost per RL step (its ledger's totals over its steps)."""
    by_arm: dict[str, list[dict]] = {}
    for record in runs:
        by_arm.setdefault(record["variant"], []).append(record)
    out = {}
    for arm, records in by_arm.items():
        per_step = {k: [r["ledger"][k] / len(r["per_step"]["reward"]) for r in records] for k in COST_PER_STEP}
        out[arm] = {"seeds": sorted(r["seed"] for r in records),
                    "greedy": float(np.mean([r["final_accuracy"] for r in records])),
                    "mean_of_k": float(np.mean([r["final_sampled"] for r in records])),
                    "per_step": {k: [min(v), max(v)] for k, v in per_step.items()}}
    return out


def decisive(directory: str) -> dict:
    """The decisive comparison's primary endpoint from its grid's report (ValueError naming what is missing)."""
    path = os.path.join(directory, "results_tokens.json")
    if not os.path.exists(path):
        raise ValueError(f"{path} not found: run (or --report_only) `compare.py --config "
                         "studies/decisive/config.py:confirm` first")
    with open(path, encoding="utf-8") as f:
        result = json.load(f)
    primary = result.get("primary_endpoint")
    if primary is None or primary.get("endpoint") != "sampled":
        raise ValueError(f"{path} has no mean-of-k TRACE - GRPO endpoint (the runs share no finished seed, or the "
                         "report is not the decisive comparison's)")
    final = {}
    for record in result["runs"]:
        final.setdefault(record["variant"], {})[record["seed"]] = record.get("final_sampled")
    seeds = sorted(set(final.get("trace", {})) & set(final.get("grpo", {})))
    per_seed = [100 * (final["trace"][s] - final["grpo"][s]) for s in seeds]
    return {**{k: primary[k] for k in ("diff", "ci95", "standard_error", "mdd", "seeds", "eval_tasks", "endpoint",
                                       "arms_settings", "margin", "decision", "two_way")},
            "hypothesis": "TRACE - GRPO > 0 (H1); TRACE - PCL > 0 (H2)", "task": primary["task"],
            "framing": primary["framing"], "trace_vs_pcl": primary.get("trace_vs_pcl"),
            "per_seed_diff_points": per_seed,
            "per_seed_variance_points2": float(np.var(per_seed, ddof=1)) if len(per_seed) > 1 else None,
            "arms": arm_summaries(result["runs"]),
            "report": os.path.relpath(path, REPO)}


def _line(name: str, d: dict) -> str:
    """The bootstrap's interval and decision, then the analytic two-way one's, under the plan's fixed margin."""
    line = (f"{name}: {100 * d['diff']:+.2f} points [{100 * d['ci95'][0]:+.2f}, {100 * d['ci95'][1]:+.2f}] "
            f"(crossed bootstrap), MDD {100 * d['mdd']:.2f}, {d['seeds']} seeds x {d['eval_tasks']} tasks, "
            f"margin +/-{100 * d.get('margin', 0.0):.2f}: {d['decision']}")
    two_way = d.get("two_way")
    if two_way:
        line += (f"; two-way [{100 * two_way['ci95'][0]:+.2f}, {100 * two_way['ci95'][1]:+.2f}] "
                 f"(SE {100 * two_way['standard_error']:.2f}, t with {two_way['df']} df): {two_way['decision']}")
    return line


def main(argv):
    del argv
    if flags.FLAGS.decisive:
        out = decisive(os.path.join(DECISIVE, "confirm_math"))
        print(_line(f"TRACE - GRPO ({out['endpoint']})", out))
        if out["trace_vs_pcl"]:
            print(_line("TRACE - PCL", out["trace_vs_pcl"]))
        for arm, a in out["arms"].items():
            cost = ", ".join(f"{k} {lo:.1f}-{hi:.1f}" for k, (lo, hi) in a["per_step"].items())
            print(f"{arm}: mean-of-k {a['mean_of_k']:.3f}, greedy {a['greedy']:.3f} over seeds {a['seeds']}; "
                  f"per step {cost}")
        variance = out["per_seed_variance_points2"]
        if variance is not None and variance >= SEED_VARIANCE_FOR_12_SEEDS:
            print(f"per-seed variance {variance:.2f} points^2 >= {SEED_VARIANCE_FOR_12_SEEDS}: PLAN.md calls for 12 seeds")
        output = os.path.join(DECISIVE, "primary_endpoint.json") if flags.FLAGS.output is None else flags.FLAGS.output
        if output:
            with open(output, "w", encoding="utf-8") as f:
                json.dump(out, f, indent=1)
        print(json.dumps(out))
        return
    out = endpoint(flags.FLAGS.results)
    for task, d in out["tasks"].items():
        print(f"{task:>9}: TRACE - GRPO {100 * d['diff']:+.1f} points [{100 * d['ci95'][0]:+.1f}, "
              f"{100 * d['ci95'][1]:+.1f}], MDD {100 * d['mdd']:.1f}, {d['seeds']} seeds x {d['eval_tasks']} tasks")
    if out["mean"]:
        m = out["mean"]
        label = "3-task mean" if len(out["tasks"]) == 3 else f"mean over {len(out['tasks'])} task(s) (not the endpoint)"
        print(f"{label}: {100 * m['diff']:+.1f} points [{100 * m['ci95'][0]:+.1f}, {100 * m['ci95'][1]:+.1f}], "
              f"MDD {100 * m['mdd']:.1f}")
    for line in out["missing"]:
        print(f"missing: {line}")
    print(json.dumps(out))
    output = os.path.join(RESULTS, "primary_endpoint.json") if flags.FLAGS.output is None else flags.FLAGS.output
    if output:
        with open(output, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    app.run(main)
