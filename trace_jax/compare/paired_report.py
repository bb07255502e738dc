"""The report's paired differences: every variant minus a reference on per-task outcomes paired by seed and task
(`compare/paired.py`'s statistics, their decisions under the plan's fixed equivalence margin), overall and per
difficulty level, and their markdown tables."""

from __future__ import annotations

import numpy as np

from trace_jax.compare.paired import paired_bootstrap


def paired_vs(reference: str, outcomes: dict[str, dict[int, np.ndarray]], *, margin: float = 0.0,
              seed: int = 0) -> dict[str, dict]:
    """Every variant minus `reference` on per-task outcomes paired by seed and task, over the seeds both
    have (the primary arms may have run more seeds than the others): {variant: PairedDifference JSON, its
    decisions under the equivalence `margin` fixed in advance (0: none claimed)} (`outcomes`: variant -> seed
    -> per-task success). Variants sharing no seed are left out."""
    if reference not in outcomes:
        return {}
    out = {}
    for variant, by_seed in outcomes.items():
        seeds = sorted(set(by_seed) & set(outcomes[reference]))
        if variant == reference or not seeds:
            continue
        a = np.stack([by_seed[s] for s in seeds])
        b = np.stack([outcomes[reference][s] for s in seeds])
        out[variant] = paired_bootstrap(a, b, seed=seed).to_json(margin)
    return out


def paired_by_level(reference: str, outcomes: dict[str, dict[int, np.ndarray]], levels: np.ndarray, *,
                    margin: float = 0.0, seed: int = 0) -> dict[str, dict[str, dict]]:
    """`paired_vs` on each difficulty level's tasks alone: {level: {variant: PairedDifference JSON}} (`levels`:
    the per-task difficulty, in the outcomes' task order). Where the gain is made, not only whether."""
    levels = np.asarray(levels)
    return {str(int(level)): paired_vs(reference, {v: {s: o[levels == level] for s, o in by_seed.items()}
                                                   for v, by_seed in outcomes.items()}, margin=margin, seed=seed)
            for level in np.unique(levels)}


def paired_level_markdown(by_level: dict[str, dict[str, dict[str, dict]]], reference: str = "grpo") -> str:
    """Each variant minus the reference per difficulty level (`paired_by_level` per outcome kind)."""
    def cell(d):
        return "n/a" if d is None else f"{100 * d['diff']:+.1f} [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}]"
    levels = sorted({level for kind in by_level.values() for level in kind}, key=int)
    variants = list(dict.fromkeys(v for kind in by_level.values() for lv in kind.values() for v in lv))
    lines = [f"## Paired differences to {reference} by difficulty level (points)", "",
             "| allocator | level | tasks (greedy / mean-of-k) | greedy: diff [95% CI] | mean-of-k: diff [95% CI] |",
             "|---|---|---|---|---|"]
    for v in variants:
        for level in levels:
            g, m = (by_level.get(k, {}).get(level, {}).get(v) for k in ("greedy", "sampled"))
            tasks = " / ".join(str(d["eval_tasks"]) if d else "0" for d in (g, m))
            lines.append(f"| {v} | {level} | {tasks} | {cell(g)} | {cell(m)} |")
    return "\n".join(lines) + "\n"


def paired_markdown(paired: dict[str, dict[str, dict]], reference: str = "grpo") -> str:
    """Each variant minus the reference on the same seeds and tasks (`paired_vs` per outcome kind), with the
    decision under the crossed bootstrap and under the analytic two-way interval."""
    def cell(d):
        if d is None:
            return "n/a | | | "
        two_way = d.get("two_way")
        decided = d.get("decision", "") + (f" / {two_way['decision']}" if two_way else "")
        return (f"{100 * d['diff']:+.1f} [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}] | "
                f"{100 * d['mdd']:.1f} | {d['seeds']} x {d['eval_tasks']} | {decided}")
    variants = list(dict.fromkeys(v for kind in paired.values() for v in kind))
    margins = {d.get("margin", 0.0) for kind in paired.values() for d in kind.values()}
    lines = [f"## Paired differences to {reference} (points; same seeds and tasks)", "",
             "| allocator | greedy: diff [95% CI] | MDD (80% power) | seeds x tasks | decision (bootstrap / two-way) "
             "| mean-of-k: diff [95% CI] | MDD | seeds x tasks | decision |", "|---|---|---|---|---|---|---|---|---|"]
    for v in variants:
        lines.append(f"| {v} | {cell(paired.get('greedy', {}).get(v))} | {cell(paired.get('sampled', {}).get(v))} |")
    margin = ", ".join(f"+/-{100 * m:.2f} points" for m in sorted(margins)) if any(margins) else "none fixed"
    lines += ["", "Crossed seed x task bootstrap (`compare/paired.py`); two-way: the analytic seed x task "
              "random-effects interval, t with the seeds' degrees of freedom. MDD: the smallest true difference "
              "this design detects with 80% power at two-sided alpha 0.05, a description, never the decision's "
              f"margin. Equivalence margin fixed in the plan: {margin} (none: a decision is gain, loss or "
              "inconclusive)."]
    return "\n".join(lines) + "\n"
