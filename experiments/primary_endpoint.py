"""The powered comparison's primary endpoint: the 3-task mean of TRACE - GRPO held-out success at equal
generated tokens, from each task's `results_tokens.json` (written by `compare.py --config ...:powered`).

  python experiments/primary_endpoint.py
  python experiments/primary_endpoint.py --results experiments/results/powered_math,experiments/results/powered_funcall

Prints each task's paired difference, their mean (independent experiments: variances add) with its
95% interval and minimal detectable difference, and says which tasks are missing or unfinished; the
last line is one JSON object {"tasks": {...}, "mean": {...} | null, "missing": [...]}, also written to
`--output` (default experiments/results/primary_endpoint.json; empty: not written).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from trace_jax.compare.paired import PairedDifference, mean_over_arms  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TASKS = ("multihop", "math", "funcall")
flags.DEFINE_list("results", [os.path.join(RESULTS, f"powered_{t}") for t in TASKS],
                  "Results directories of the powered comparison, one per task.")
flags.DEFINE_string("output", os.path.join(RESULTS, "primary_endpoint.json"),
                    "Where the JSON object goes (empty: printed only).")


def _difference(d: dict) -> PairedDifference:
    return PairedDifference(diff=d["diff"], ci95=tuple(d["ci95"]), standard_error=d["standard_error"], mdd=d["mdd"],
                            seeds=d["seeds"], tasks=d["eval_tasks"])


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
    mean = mean_over_arms([_difference(d) for d in tasks.values()]).to_json() if tasks else None
    return {"tasks": tasks, "mean": mean, "missing": missing}


def main(argv):
    del argv
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
    if flags.FLAGS.output:
        with open(flags.FLAGS.output, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    app.run(main)
