"""Paired statistics of a comparison: two arms scored on the same tasks under the same seeds.

An arm's outcomes are an array [seeds, tasks] (success of each held-out task after each seed's run;
greedy 0/1, or a mean over k samples). Arms are paired by seed (the same SFT start, the same task
stream) and by task (the same held-out tasks, the same sampling random numbers per task), so the
difference is estimated from per-(seed, task) differences d[s, t]. Its uncertainty comes two ways, and
a decision is stated under both:

- the crossed bootstrap: one draw of seeds and one draw of tasks, the task draw shared by every seed
  (every seed scores the same tasks, so a task's difficulty for the difference is common to all seeds);
- the analytic two-way random-effects standard error, d[s, t] = mu + seed_s + task_t + residual_st:
  Var(mean) = (MS_seed + MS_task - MS_residual) / (S T) from the table's mean squares (each variance
  component clamped at 0), its interval from Student's t with the seeds' S - 1 degrees of freedom (the
  seeds are the scarce replicate; the bootstrap's percentile interval treats 8 seeds as if they were many).

`decide` names "gain", "loss", "equivalent" or "inconclusive". The equivalence margin is an argument
fixed before the data (a plan's design MDD, say), never the realized MDD: a margin that grows with the
noise makes a noisier experiment reach "equivalent" as easily as a precise one
(`tests/compare/test_paired.py` simulates exactly that). A margin of 0 never declares equivalence.

`minimal_detectable_difference` is the smallest true difference the design detects with the given
power at a two-sided alpha, from the paired estimator's standard error: what a null result rules out.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import stats as scipy_stats

DECISIONS = ("gain", "loss", "equivalent", "inconclusive")


def decide(ci95: tuple[float, float], margin: float) -> str:
    """"gain" (interval above 0), "loss" (below 0), "equivalent" (interval inside +/- `margin`, a margin
    fixed in advance; 0 never claims it) or "inconclusive"."""
    if not (np.isfinite(margin) and margin >= 0):
        raise ValueError(f"the equivalence margin must be a finite number >= 0 fixed in advance, got {margin!r}")
    low, high = ci95
    if low > 0:
        return "gain"
    if high < 0:
        return "loss"
    return "equivalent" if margin > 0 and -margin < low and high < margin else "inconclusive"


@dataclasses.dataclass(frozen=True)
class TwoWay:
    """The analytic two-way (seed x task) random-effects view of a paired difference.

    Attributes:
      standard_error: sqrt(seed_var / S + task_var / T + residual_var / (S T)).
      df: the seeds' degrees of freedom, S - 1, of the t interval.
      ci95: diff -/+ t_{df, 0.975} x standard_error.
      mdd: (t_{df, 0.975} + t_{df, 0.8}) x standard_error.
      seed_var, task_var, residual_var: the variance components (method of moments, clamped at 0).
    """

    standard_error: float
    df: int
    ci95: tuple[float, float]
    mdd: float
    seed_var: float
    task_var: float
    residual_var: float

    def to_json(self, margin: float) -> dict:
        return {**dataclasses.asdict(self), "ci95": list(self.ci95), "decision": decide(self.ci95, margin)}


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """Attributes:
      diff: mean of arm a minus mean of arm b (over seeds and tasks).
      ci95: [low, high], the paired crossed bootstrap's percentile interval.
      standard_error: the bootstrap standard deviation of `diff`.
      mdd: minimal detectable difference at 80% power, two-sided alpha 0.05 (from the bootstrap SE): what the
        design detects, reported beside the decision, never used as its margin.
      seeds, tasks: the design's size.
      two_way: the analytic two-way view (None where it is undefined: one seed or one task, or a difference
        read from a report written before it existed).
    """

    diff: float
    ci95: tuple[float, float]
    standard_error: float
    mdd: float
    seeds: int
    tasks: int
    two_way: TwoWay | None = None

    def decision(self, margin: float) -> str:
        """The bootstrap interval's decision under an equivalence `margin` fixed in advance (`decide`)."""
        return decide(self.ci95, margin)

    def to_json(self, margin: float) -> dict:
        return {"diff": self.diff, "ci95": list(self.ci95), "standard_error": self.standard_error, "mdd": self.mdd,
                "seeds": self.seeds, "eval_tasks": self.tasks, "margin": margin, "decision": self.decision(margin),
                "two_way": None if self.two_way is None else self.two_way.to_json(margin)}

    @classmethod
    def from_json(cls, d: dict) -> "PairedDifference":
        two_way = d.get("two_way")
        if two_way is not None:
            two_way = TwoWay(**{k: tuple(v) if k == "ci95" else v for k, v in two_way.items() if k != "decision"})
        return cls(diff=d["diff"], ci95=tuple(d["ci95"]), standard_error=d["standard_error"], mdd=d["mdd"],
                   seeds=d["seeds"], tasks=d["eval_tasks"], two_way=two_way)


def _check(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.ndim != 2 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired outcomes must be two non-empty [seeds, tasks] arrays of one shape, got "
                         f"{a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired outcomes must be finite")
    return a, b


def minimal_detectable_difference(standard_error: float, *, alpha: float = 0.05, power: float = 0.8,
                                  df: float | None = None) -> float:
    """(q_{1 - alpha/2} + q_{power}) x SE, q the normal quantile (or Student's t with `df` degrees of freedom):
    the true difference a two-sided test at `alpha` detects with probability `power`."""
    q = scipy_stats.norm if df is None else scipy_stats.t(df)
    return float((q.ppf(1 - alpha / 2) + q.ppf(power)) * standard_error)


def two_way(d: np.ndarray) -> TwoWay | None:
    """The analytic two-way random-effects standard error and t interval of d.mean() (d: [seeds, tasks])."""
    seeds, tasks = d.shape
    if seeds < 2 or tasks < 2:
        return None
    grand, seed_means, task_means = d.mean(), d.mean(axis=1), d.mean(axis=0)
    ms_seed = tasks * np.sum((seed_means - grand) ** 2) / (seeds - 1)
    ms_task = seeds * np.sum((task_means - grand) ** 2) / (tasks - 1)
    residual = d - seed_means[:, None] - task_means[None, :] + grand
    ms_residual = np.sum(residual ** 2) / ((seeds - 1) * (tasks - 1))
    seed_var = max(0.0, (ms_seed - ms_residual) / tasks)
    task_var = max(0.0, (ms_task - ms_residual) / seeds)
    se = float(np.sqrt(seed_var / seeds + task_var / tasks + ms_residual / (seeds * tasks)))
    df = seeds - 1
    half = float(scipy_stats.t(df).ppf(0.975) * se)
    return TwoWay(standard_error=se, df=df, ci95=(float(grand) - half, float(grand) + half),
                  mdd=minimal_detectable_difference(se, df=df), seed_var=float(seed_var), task_var=float(task_var),
                  residual_var=float(ms_residual))


def paired_bootstrap(a, b, *, samples: int = 2000, seed: int = 0) -> PairedDifference:
    """Mean(a) - mean(b) with its paired crossed bootstrap interval (one draw of seeds, one of tasks shared
    by all of them) and the analytic two-way view beside it."""
    a, b = _check(a, b)
    d = a - b  # [seeds, tasks]
    seeds, tasks = d.shape
    rng = np.random.default_rng(seed)
    seed_counts, task_counts = np.empty((samples, seeds)), np.empty((samples, tasks))
    for s in range(samples):  # the draws in the order the per-draw loop before 2026-12-07 made them
        seed_counts[s] = np.bincount(rng.integers(0, seeds, seeds), minlength=seeds)
        task_counts[s] = np.bincount(rng.integers(0, tasks, tasks), minlength=tasks)
    boot = np.einsum("bs,st,bt->b", seed_counts, d, task_counts) / (seeds * tasks)
    low, high = np.percentile(boot, [2.5, 97.5])
    se = float(boot.std(ddof=1))
    return PairedDifference(diff=float(d.mean()), ci95=(float(low), float(high)), standard_error=se,
                            mdd=minimal_detectable_difference(se), seeds=seeds, tasks=tasks, two_way=two_way(d))


def mean_over_arms(differences: list[PairedDifference]) -> PairedDifference:
    """The mean of several independent paired differences (e.g. the 3-task mean of TRACE - GRPO):
    variances add; the interval is normal-approximate from the combined standard error (the two-way view
    with the smallest seed degrees of freedom among them, where every difference has one)."""
    if not differences:
        raise ValueError("no paired differences to average")
    n = len(differences)
    diff = float(np.mean([x.diff for x in differences]))
    se = float(np.sqrt(sum(x.standard_error ** 2 for x in differences)) / n)
    z = scipy_stats.norm.ppf(0.975)
    combined = None
    if all(x.two_way is not None for x in differences):
        ways = [x.two_way for x in differences]
        se2 = float(np.sqrt(sum(w.standard_error ** 2 for w in ways)) / n)
        df = min(w.df for w in ways)
        half = float(scipy_stats.t(df).ppf(0.975) * se2)
        combined = TwoWay(standard_error=se2, df=df, ci95=(diff - half, diff + half),
                          mdd=minimal_detectable_difference(se2, df=df),
                          **{k: float(np.mean([getattr(w, k) for w in ways]))
                             for k in ("seed_var", "task_var", "residual_var")})
    return PairedDifference(diff=diff, ci95=(diff - z * se, diff + z * se), standard_error=se,
                            mdd=minimal_detectable_difference(se), seeds=min(x.seeds for x in differences),
                            tasks=sum(x.tasks for x in differences), two_way=combined)
