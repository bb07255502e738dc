"""Paired statistics of a comparison: two arms scored on the same tasks under the same seeds.

An arm's outcomes are an array [seeds, tasks] (success of each held-out task after each seed's run;
greedy 0/1, or a mean over k samples). Arms are paired by seed (the same SFT start, the same task
stream) and by task (the same held-out tasks, the same sampling random numbers per task), so the
difference is estimated from per-(seed, task) differences and its uncertainty by a crossed
bootstrap: one draw of seeds and one draw of tasks, the task draw shared by every seed (every seed
scores the same tasks, so a task's difficulty for the difference is common to all seeds; resampling
tasks independently within each seed, as the grids before 2026-12-05 did, averages that shared
component away and gives intervals too narrow when it is large).

`minimal_detectable_difference` is the smallest true difference the design detects with the given
power at a two-sided alpha, from the paired estimator's standard error: what a null result rules out.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import stats as scipy_stats


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """Attributes:
      diff: mean of arm a minus mean of arm b (over seeds and tasks).
      ci95: [low, high], the paired crossed bootstrap's percentile interval.
      standard_error: the bootstrap standard deviation of `diff`.
      mdd: minimal detectable difference at 80% power, two-sided alpha 0.05.
      seeds, tasks: the design's size.
    """

    diff: float
    ci95: tuple[float, float]
    standard_error: float
    mdd: float
    seeds: int
    tasks: int

    def decision(self, margin: float | None = None) -> str:
        """"gain" (interval above 0), "loss" (below 0), "equivalent" (interval inside +/- `margin`, by
        default this design's MDD: any true difference is smaller than what the design detects) or
        "inconclusive"."""
        margin = self.mdd if margin is None else margin
        low, high = self.ci95
        if low > 0:
            return "gain"
        if high < 0:
            return "loss"
        return "equivalent" if -margin < low and high < margin else "inconclusive"

    def to_json(self) -> dict:
        return {"diff": self.diff, "ci95": list(self.ci95), "standard_error": self.standard_error, "mdd": self.mdd,
                "seeds": self.seeds, "eval_tasks": self.tasks, "decision": self.decision()}


def _check(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.ndim != 2 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired outcomes must be two non-empty [seeds, tasks] arrays of one shape, got "
                         f"{a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired outcomes must be finite")
    return a, b


def minimal_detectable_difference(standard_error: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """(z_{1 - alpha/2} + z_{power}) x SE: the true difference a two-sided test at `alpha` detects with
    probability `power`."""
    return float((scipy_stats.norm.ppf(1 - alpha / 2) + scipy_stats.norm.ppf(power)) * standard_error)


def paired_bootstrap(a, b, *, samples: int = 2000, seed: int = 0) -> PairedDifference:
    """Mean(a) - mean(b) with its paired crossed bootstrap interval (one draw of seeds, one of tasks shared
    by all of them)."""
    a, b = _check(a, b)
    d = a - b  # [seeds, tasks]
    seeds, tasks = d.shape
    rng = np.random.default_rng(seed)
    boot = np.empty(samples)
    for s in range(samples):
        rows = rng.integers(0, seeds, seeds)
        cols = rng.integers(0, tasks, tasks)
        boot[s] = d[np.ix_(rows, cols)].mean()
    low, high = np.percentile(boot, [2.5, 97.5])
    se = float(boot.std(ddof=1))
    return PairedDifference(diff=float(d.mean()), ci95=(float(low), float(high)), standard_error=se,
                            mdd=minimal_detectable_difference(se), seeds=seeds, tasks=tasks)


def mean_over_arms(differences: list[PairedDifference]) -> PairedDifference:
    """The mean of several independent paired differences (e.g. the 3-task mean of TRACE - GRPO):
    variances add; the interval is normal-approximate from the combined standard error."""
    if not differences:
        raise ValueError("no paired differences to average")
    n = len(differences)
    diff = float(np.mean([x.diff for x in differences]))
    se = float(np.sqrt(sum(x.standard_error ** 2 for x in differences)) / n)
    z = scipy_stats.norm.ppf(0.975)
    return PairedDifference(diff=diff, ci95=(diff - z * se, diff + z * se), standard_error=se,
                            mdd=minimal_detectable_difference(se), seeds=min(x.seeds for x in differences),
                            tasks=sum(x.tasks for x in differences))
