"""Learning curves against cost: held-out accuracy per allocator as a function of what was spent.

Cost axes, each the running total at an evaluation step from the audited step ledgers: `rollouts`,
`tokens` (generated), `tokens_processed` (generated + prefilled: what a prefill-heavy allocator pays
when prefill is not free) and `tool_calls`. Per allocator: the mean curve over seeds with its 95%
band (seeds evaluate at the same steps, so points align by step), the normalised area under the
curve (the mean accuracy over the cost spent, per seed, then mean and CI) and the cost at which the
mean curve first reaches the reference's (GRPO's) final accuracy (linearly interpolated; None when
it never does). Pure functions of the run records `report.run_record` writes.
"""

from __future__ import annotations

import numpy as np

from trace_jax.compare.report import mean_ci95

AXES = {"rollouts": "rollouts spent", "tokens": "tokens generated", "tokens_processed": "tokens generated + prefilled", "tool_calls": "tool calls"}


def normalised_area(x, accuracy) -> float:
    """Trapezoid area under accuracy(x) divided by the x range: the mean accuracy over the cost spent."""
    x, y = np.asarray(x, np.float64), np.asarray(accuracy, np.float64)
    if len(x) < 2 or x[-1] <= x[0]:
        return float(y[-1]) if len(y) else float("nan")
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def cost_to_reach(x, accuracy, target: float) -> float | None:
    """The first cost at which the curve reaches `target` (interpolated between evaluations)."""
    x, y = np.asarray(x, np.float64), np.asarray(accuracy, np.float64)
    for i in range(len(y)):
        if y[i] >= target - 1e-12:
            if i == 0:
                return float(x[0])
            return float(x[i - 1] + (target - y[i - 1]) / (y[i] - y[i - 1]) * (x[i] - x[i - 1]))
    return None


def curves(runs: list[dict], reference: str = "grpo", key: str = "eval") -> dict[str, dict]:
    """axis -> variant -> {x, mean, band (95% half-width per point), area {mean, ci95}, to_reference_final,
    to_reference_final_ratio}; runs of a variant must evaluate at the same steps. `key`: "eval" (greedy) or
    "eval_sampled" (the mean-of-k, where runs measured it at intermediate steps)."""
    out: dict[str, dict] = {}
    variants = list(dict.fromkeys(r["variant"] for r in runs if key in r))
    for axis in AXES:
        table = {}
        for v in variants:
            evals = [r[key] for r in runs if r["variant"] == v and key in r]
            if any(axis not in e for e in evals) or len({tuple(e["step"]) for e in evals}) != 1:
                continue  # records from before this axis was kept, or misaligned evaluations
            x = np.mean([e[axis] for e in evals], axis=0)
            acc = np.array([e["accuracy"] for e in evals], np.float64)
            table[v] = {"steps": evals[0]["step"], "x": x.tolist(), "mean": acc.mean(0).tolist(),
                        "band": [mean_ci95(col)["ci95"] or 0.0 for col in acc.T],
                        "area": mean_ci95([normalised_area(e[axis], e["accuracy"]) for e in evals])}
        if reference in table:
            target, final_x = table[reference]["mean"][-1], table[reference]["x"][-1]
            for v, c in table.items():
                reach = cost_to_reach(c["x"], c["mean"], target)
                c["to_reference_final"] = reach
                c["to_reference_final_ratio"] = None if reach is None or not final_x else reach / final_x
        out[axis] = table
    return out


def markdown(table: dict[str, dict], reference: str = "grpo") -> str:
    """Per allocator and axis: area under the curve and the cost to reach the reference's final accuracy."""
    lines = ["| allocator | " + " | ".join(f"AUC vs {label}" for label in AXES.values()) +
             f" | {AXES['tokens']} to reach {reference}'s final accuracy (x {reference}'s total) |",
             "|---|" + "---|" * (len(AXES) + 1)]
    variants = list(dict.fromkeys(v for axis in table.values() for v in axis))
    for v in variants:
        cells = []
        for axis in AXES:
            area = table.get(axis, {}).get(v, {}).get("area")
            cells.append("n/a" if not area or area["mean"] is None else
                         f"{area['mean']:.3f}" + ("" if area["ci95"] is None else f" ± {area['ci95']:.3f}"))
        c = table.get("tokens", {}).get(v, {})
        reach = c.get("to_reference_final")
        cells.append("not reached" if reach is None else f"{reach:.0f} ({c['to_reference_final_ratio']:.2f}x)")
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += ["", "AUC: area under held-out accuracy against the running cost, divided by the cost spent (the mean "
              "accuracy over the run; mean ± 95% CI over seeds). The cost to reach is read off the mean curve."]
    return "\n".join(lines) + "\n"


def plot(table: dict[str, dict], outdir: str, suffix: str = "") -> list[str]:
    """accuracy_vs_<axis><suffix>.png per cost axis: mean curves with 95% bands."""
    import os

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for axis, variants in table.items():
        if not variants:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for v, c in variants.items():
            x, mean, band = (np.asarray(c[k], np.float64) for k in ("x", "mean", "band"))
            line, = ax.plot(x, mean, marker="o", label=v)
            ax.fill_between(x, mean - band, mean + band, color=line.get_color(), alpha=0.15)
        ax.set_xlabel(AXES[axis])
        ax.set_ylabel("held-out accuracy (mean over seeds, 95% band)")
        ax.legend(fontsize=7)
        path = os.path.join(outdir, f"accuracy_vs_{axis}{suffix}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
