"""The staleness study's secondary figures (PLAN.md) from the committed runs, whichever have landed: per arm, held-out
greedy success after SFT and after the last step (means over seeds), the predictor's AUC (mean over steps and seeds
of `allocation.calibration.auc`, scored on the outcomes its own allocation caused, and of `holdout_calibration.auc`,
on random anchors held out of the choice: the same run length at s = 0 and s = 1), and per step the policy
lag, the mean behaviour weight and the share of capped weights; per seed, trace - grpo at s = 0 and at s = 1 and
s1 - s0 per allocator. The primary endpoint and its interval are the comparison report's (`experiments/compare.py
... --report_only`, once every run is in). Ends with one JSON line.

  python studies/staleness/readout.py
"""

from __future__ import annotations

import glob
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from trace_jax.run.records import read_steps  # noqa: E402

RUNS = os.path.join(HERE, "results", "multihop", "runs")


def _mean(values):
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return round(statistics.mean(values), 6) if values else None


def arm_figures(arm: str) -> dict:
    """Per-seed finals and the arm's step figures, from every finished run of `arm`."""
    by_seed = {}
    for summary_path in sorted(glob.glob(os.path.join(RUNS, arm, "seed*", "summary.json"))):
        directory = os.path.dirname(summary_path)
        with open(summary_path, encoding="utf-8") as f:
            summary = json.load(f)
        steps = read_steps(directory)
        seed = int(os.path.basename(directory).split("-")[0][4:])
        by_seed[seed] = {
            "after_sft": summary["acc_after_sft"], "after_rl": summary["acc_after_rl"],
            "auc": _mean(s.allocation.calibration.auc for s in steps if s.allocation.calibration),
            "holdout_auc": _mean(s.allocation.holdout_calibration.auc for s in steps
                                 if s.allocation.holdout_calibration),
            "policy_lag": _mean(s.policy_lag for s in steps),
            "is_weight_mean": _mean(s.learner.is_weight_mean for s in steps if s.learner),
            "is_truncated_share": _mean(s.learner.is_truncated_share for s in steps if s.learner),
            "step_s": _mean(s.timings.step_s for s in steps)}
    return {"seeds": sorted(by_seed), "per_seed": by_seed,
            **{key: _mean(v[key] for v in by_seed.values())
               for key in ("after_sft", "after_rl", "auc", "holdout_auc", "policy_lag", "is_weight_mean", "is_truncated_share",
                           "step_s")}}


def paired(a: dict, b: dict) -> dict | None:
    """a - b in held-out success after RL, over the seeds both have."""
    seeds = sorted(set(a["per_seed"]) & set(b["per_seed"]))
    if not seeds:
        return None
    diffs = [a["per_seed"][s]["after_rl"] - b["per_seed"][s]["after_rl"] for s in seeds]
    return {"seeds": seeds, "mean": round(statistics.mean(diffs), 4), "per_seed": [round(d, 4) for d in diffs]}


def main() -> None:
    arms = {arm: arm_figures(arm) for arm in ("trace_s0", "trace_s1", "grpo_s0", "grpo_s1")}
    for arm, f in arms.items():
        print(f"{arm}: seeds {f['seeds']}, success {f['after_sft']} -> {f['after_rl']}, predictor AUC {f['auc']} (held-out anchors {f['holdout_auc']}), "
              f"policy lag {f['policy_lag']}, weight {f['is_weight_mean']} (capped {f['is_truncated_share']}), "
              f"step {f['step_s']} s")
    contrasts = {"trace_s1 - trace_s0": paired(arms["trace_s1"], arms["trace_s0"]),
                 "grpo_s1 - grpo_s0": paired(arms["grpo_s1"], arms["grpo_s0"]),
                 "trace_s0 - grpo_s0": paired(arms["trace_s0"], arms["grpo_s0"]),
                 "trace_s1 - grpo_s1": paired(arms["trace_s1"], arms["grpo_s1"])}
    for name, c in contrasts.items():
        print(f"{name}: {c}")
    print(json.dumps({"study": "staleness", "arms": {a: {k: v for k, v in f.items() if k != "per_seed"}
                                                     for a, f in arms.items()}, "contrasts": contrasts}))


if __name__ == "__main__":
    main()
