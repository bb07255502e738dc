"""The comparison's report: per-run curves from the step records and evaluations, mean and 95% CI over seeds,
`results.md` and the PNG plots. Pure functions of the run records (no training state)."""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
from scipy import stats as scipy_stats

from trace_jax.rollout.tree import Ledger
from trace_jax.run.evaluation import SUBSET_KEY
from trace_jax.run.records import StepRecord


def mean_ci95(values) -> dict[str, float | None]:
    """Mean and the half-width of the two-sided 95% Student-t interval (None for one value)."""
    x = np.asarray([v for v in values if v is not None], np.float64)
    if len(x) == 0:
        return {"mean": None, "ci95": None}
    half = (float(scipy_stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
            if len(x) > 1 else None)
    return {"mean": float(x.mean()), "ci95": half}


def steps_by_number(lines: list[dict]) -> dict[int, dict]:
    """metrics.jsonl lines merged per step (a resumed run re-logs steps after its checkpoint: last wins)."""
    out: dict[int, dict] = {}
    for r in lines:
        out.setdefault(r["step"], {}).update({k: v for k, v in r.items() if v is not None})
    return out


def per_step_curves(steps: list[StepRecord]) -> dict[str, list[float | None]]:
    """The per-step statistics the report plots, from the run's step records."""
    def calibration(record: StepRecord, key: str):
        value = getattr(record.allocation.calibration, key) if record.allocation.calibration else None
        return None if value is None or not math.isfinite(value) else value

    curves = {key: [getattr(r.trees, key) for r in steps]
              for key in ("effective_ratio", "useful_rollout_share", "reward", "expanded_mixed_share",
                          "nonzero_advantage_token_share")}
    curves.update({f"predictor_{key}": [calibration(r, key) for r in steps] for key in ("brier", "auc", "ece")})
    return curves


def run_record(variant: str, seed: int, steps: list[StepRecord], metric_lines: list[dict], summary: dict,
               after_sft: float, ledger: Ledger, after_sft_sampled: dict | None = None) -> dict:
    """One run's curves: per-step statistics and held-out accuracy against rollouts and tokens spent;
    "eval_sampled" the same for the mean-of-k where intermediate evaluations measured it (`eval.sample_every`).

    steps: the run's step records (audited: one per step); metric_lines: its metrics.jsonl (evaluations);
    after_sft_sampled: the shared start's held-out result, for the mean-of-k at step 0."""
    by_step = steps_by_number(metric_lines)
    totals = {"rollouts": [r.ledger.rollouts_started for r in steps],
              "tokens": [r.ledger.tokens_generated for r in steps],
              "tokens_processed": [r.ledger.tokens_generated + r.ledger.tokens_prefilled for r in steps],
              "tool_calls": [r.ledger.tool_calls for r in steps]}
    totals = {axis: np.cumsum(per_step).tolist() for axis, per_step in totals.items()}
    # with eval.intermediate_tasks the greedy curve is the fixed subset every evaluation scored
    key = next((k for k in (SUBSET_KEY,) if any(f"eval/{k}" in line for line in by_step.values())), "accuracy")
    start = after_sft if key == "accuracy" else (after_sft_sampled or {}).get(key, after_sft)
    evals = [(0, start)] + [(s, by_step[s][f"eval/{key}"]) for s in sorted(by_step)
                            if s > 0 and f"eval/{key}" in by_step[s]]
    mean_key = next((k for k in (after_sft_sampled or {}) if k.startswith("mean@") and "/" not in k), None)
    sampled = [(0, after_sft_sampled[mean_key])] + [(s, by_step[s][f"eval/{mean_key}"]) for s in sorted(by_step)
                                                    if s > 0 and f"eval/{mean_key}" in by_step[s]] if mean_key else []

    def curve(points):
        return {"step": [s for s, _ in points], "accuracy": [a for _, a in points],
                **{axis: [0 if s == 0 else total[s - 1] for s, _ in points] for axis, total in totals.items()}}

    per_step = per_step_curves(steps)
    return {
        "variant": variant, "seed": seed, "final_accuracy": summary["acc_after_rl"], "after_sft": after_sft,
        "final_sampled": by_step.get(len(steps), {}).get(f"eval/{mean_key}") if mean_key else None,
        **contrast(steps),
        "effective_ratio": float(np.mean(per_step["effective_ratio"])),
        "useful_rollout_share": float(np.mean(per_step["useful_rollout_share"])),
        "tokens_generated": int(ledger.tokens_generated), "ledger": dataclasses.asdict(ledger),
        "wall_s": summary.get("wall_s"), "eval_s": summary.get("eval_s"), "compile_s": summary.get("compile_s"),
        "rl_s": float(sum(r.timings.step_s for r in steps if r.timings)),
        "eval": curve(evals), **({"eval_sampled": curve(sampled)} if len(sampled) > 2 else {}),
        "per_step": per_step,
    }


ARMS_NOTE = ("Arms: `trace` is the paper's TRACE (stage 2 spends m_i x N continuations on prompt i's own turn "
             "prefixes, one round, with holdout anchors scoring the predictor); `trace_global` our extension (one "
             "stage-2 pool over all trees, `budget.rounds` rounds). Grids before 2026-12-05 ran the global mode "
             "under the name `trace`.")
CONTRAST = ("prompts_trained", "prompts_mixed", "root_groups_mixed", "branch_leaf_share",
            "nonzero_advantage_token_share", "clip_fraction", "clip_fraction_last", "approx_kl_last", "updates")


def contrast(steps: list[StepRecord]) -> dict:
    """What the contrast of a run's steps was (means per step; None where the records predate a figure),
    and the branch leaves per anchor depth summed over its steps."""
    def mean(values):
        values = [v for v in values if v is not None and math.isfinite(v)]
        return float(np.mean(values)) if values else None

    learned = [r.learner for r in steps if r.learner is not None]
    depths = [r.trees.anchor_depths for r in steps if r.trees.anchor_depths is not None]
    return {"prompts_trained": mean([r.trees.trees for r in steps]),
            **{k: mean([getattr(r.trees, k) for r in steps])
               for k in ("prompts_mixed", "root_groups_mixed", "branch_leaf_share", "nonzero_advantage_token_share")},
            **{k: mean([getattr(m, k) for m in learned]) for k in ("clip_fraction", "clip_fraction_last",
                                                                   "approx_kl_last", "updates")},
            "anchor_depths": summed_histogram(depths) if depths else None}


def summed_histogram(histograms) -> list[int]:
    """Histograms of different lengths (counts per anchor depth) summed bin by bin."""
    total = np.zeros(max((len(h) for h in histograms), default=0), int)
    for h in histograms:
        total[: len(h)] += np.asarray(h, int)
    return total.tolist()


def contrast_markdown(runs: list[dict]) -> str:
    """One row per variant: the contrast figures (means over its seeds) and its anchor-depth histogram."""
    lines = ["| variant | prompts trained / step | mixed prompts / step | bare groups mixed / step | branch-leaf "
             "share | non-zero-advantage token share (own estimator) | clip fraction (mean / last update) | "
             "updates / step | branch leaves by anchor depth (1, 2, ...) |", "|---|---|---|---|---|---|---|---|---|"]

    def cell(values, fmt):
        values = [v for v in values if v is not None]
        return format(float(np.mean(values)), fmt) if values else "n/a"

    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == variant]
        depths = [r.get("anchor_depths") for r in mine if r.get("anchor_depths")]
        hist = summed_histogram(depths) if depths else "n/a"
        col = {k: [r.get(k) for r in mine] for k in CONTRAST}
        lines.append(f"| {variant} | {cell(col['prompts_trained'], '.2f')} | {cell(col['prompts_mixed'], '.2f')} | "
                     f"{cell(col['root_groups_mixed'], '.2f')} | {cell(col['branch_leaf_share'], '.3f')} | "
                     f"{cell(col['nonzero_advantage_token_share'], '.3f')} | {cell(col['clip_fraction'], '.3f')} / "
                     f"{cell(col['clip_fraction_last'], '.3f')} | {cell(col['updates'], '.1f')} | {hist} |")
    return "\n".join(lines) + "\n"


def aggregate(runs: list[dict]) -> dict[str, dict]:
    """variant -> mean/CI of the headline figures over its seeds (variants in first-seen order)."""
    out: dict[str, dict] = {}
    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == variant]
        out[variant] = {key: mean_ci95([r[key] for r in mine])
                        for key in ("final_accuracy", "effective_ratio", "useful_rollout_share", "tokens_generated",
                                    "wall_s")}
        out[variant]["seeds"] = [r["seed"] for r in mine]
        out[variant]["final_accuracy"]["per_seed"] = [r["final_accuracy"] for r in mine]
    return out


def headline(summary: dict[str, dict]) -> dict:
    """The command's last line: held-out accuracy (mean, ci95), effective ratio and tokens per variant."""
    return {"heldout_acc": {v: {"mean": s["final_accuracy"]["mean"], "ci95": s["final_accuracy"]["ci95"]}
                            for v, s in summary.items()},
            "effective_ratio": {v: s["effective_ratio"]["mean"] for v, s in summary.items()},
            "tokens_generated": {v: s["tokens_generated"]["mean"] for v, s in summary.items()}}


def _pm(stat: dict, fmt: str) -> str:
    if stat["mean"] is None:
        return "n/a"
    return format(stat["mean"], fmt) + ("" if stat["ci95"] is None else " ± " + format(stat["ci95"], fmt))


def markdown(summary: dict[str, dict], *, title: str, after_sft: float, setting: str,
             generalization: dict | None = None, reference: str = "grpo") -> str:
    lines = [f"# {title}", "", setting, "", f"Held-out accuracy of the shared SFT checkpoint: {after_sft:.3f}.", "",
             "| allocator | held-out acc (mean ± 95% CI) | vs " + reference + " | per seed | effective ratio | "
             "useful-rollout share | tokens generated | wall time (s) |",
             "|---|---|---|---|---|---|---|---|"]
    ref = summary.get(reference, {}).get("final_accuracy", {}).get("mean")
    # the paper's "untrained" row: the policy every run starts from (here the SFT checkpoint), no RL
    lines.append(f"| untrained (the shared SFT start, no RL) | {after_sft:.3f} | "
                 f"{'' if ref is None else f'{100 * (after_sft - ref):+.1f} pts'} | | | | 0 | |")
    for variant, s in summary.items():
        acc = s["final_accuracy"]
        delta = "" if ref is None or variant == reference else f"{100 * (acc['mean'] - ref):+.1f} pts"
        seeds = " / ".join(f"{a:.3f}" for a in acc["per_seed"])
        lines.append(f"| {variant} | {_pm(acc, '.3f')} | {delta} | {seeds} | {_pm(s['effective_ratio'], '.3f')} | "
                     f"{_pm(s['useful_rollout_share'], '.3f')} | {_pm(s['tokens_generated'], '.0f')} | "
                     f"{_pm(s['wall_s'], '.0f')} |")
    lines += ["", "Effective ratio: share of a step's trained prompts whose tree has both a success and a failure "
              "(mean over steps, then seeds). Useful-rollout share: rollouts in such trees per rollout bought, "
              "discarded ones included (DAPO's filter makes its effective ratio 1 by construction; this one is "
              "comparable)."]
    if generalization:
        lines += ["", generalization_markdown(generalization, level="##")]
    return "\n".join(lines) + "\n"


def generalization_markdown(study: dict, level: str = "#") -> str:
    """The predictor generalization study: the configured predictor against the per-prompt Beta, then
    the featurizer ablation (AUC of each featurizer on the same outcomes, Beta as the reference column)."""
    lines = [f"{level} Predictor generalization (frozen SFT policy, outcomes predicted before they were seen)", "",
             f"Trained on {study['train_steps']} steps ({study['train_prompts']} prompts). "
             "Beta = per-prompt Beta(1,1) posterior (MoPPS); a prefix gets its prompt's posterior mean.", "",
             "| prompts | anchors | n | AUC predictor | AUC beta | Brier predictor | Brier beta |",
             "|---|---|---|---|---|---|---|"]
    for group, levels in study["table"].items():
        for lvl, c in levels.items():
            p, b = c["predictor"], c["beta"]
            lines.append(f"| {group} | {lvl} | {p['n']} | {_num(p['auc'])} | {_num(b['auc'])} | "
                         f"{_num(p['brier'])} | {_num(b['brier'])} |")
    featurizers = study.get("featurizers")
    if featurizers:
        cells = [(g, lvl) for g, levels in study["table"].items() for lvl in levels]
        lines += ["", f"{level}# Featurizer ablation (AUC; the same training rollouts and scored outcomes)", "",
                  "| featurizer | " + " | ".join(f"{g}, {lvl}" for g, lvl in cells) + " |",
                  "|---|" + "---|" * len(cells)]
        for name, table in featurizers.items():
            lines.append(f"| {name} | " + " | ".join(_num(table[g][lvl]["auc"]) for g, lvl in cells) + " |")
        lines.append("| per-prompt Beta (reference) | " + " | ".join(
            _num(study["table"][g][lvl]["beta"]["auc"]) for g, lvl in cells) + " |")
    return "\n".join(lines) + "\n"


def _num(x) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.3f}"


def plots(runs: list[dict], outdir: str, generalization: dict | None = None, suffix: str = "") -> list[str]:
    """PNG files: effective ratio per step and trace calibration (accuracy against cost: `curves.plot`)
    (`suffix` names the framing: "" at equal rollouts, "_tokens" at equal tokens)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r["variant"] for r in runs))
    written = []

    def save(fig, name):
        path = os.path.join(outdir, name.replace(".png", f"{suffix}.png"))
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for v in variants:
        curves = np.array([r["per_step"]["effective_ratio"] for r in runs if r["variant"] == v], np.float64)
        mean = curves.mean(0)
        smooth = np.convolve(mean, np.ones(5) / 5, mode="valid") if len(mean) >= 5 else mean
        ax.plot(np.arange(len(smooth)) + (len(mean) - len(smooth)) // 2 + 1, smooth, label=v)
    ax.set_xlabel("RL step")
    ax.set_ylabel("effective ratio (mean over seeds, 5-step moving average)")
    ax.legend(fontsize=7)
    save(fig, "effective_ratio.png")

    traced = [r for r in runs if r["per_step"]["predictor_brier"][0] is not None]
    if traced or generalization:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for r in traced:
            for key, style in (("predictor_brier", "-"), ("predictor_auc", "--")):
                y = np.array([np.nan if x is None else x for x in r["per_step"][key]], np.float64)
                axes[0].plot(np.arange(1, len(y) + 1), y, style, label=f"{r['variant']} s{r['seed']} "
                             f"{key.removeprefix('predictor_')}", alpha=0.7)
        axes[0].set_xlabel("RL step")
        axes[0].set_title("in-loop Brier (solid) and AUC (dashed)")
        if traced:
            axes[0].legend(fontsize=6)
        if generalization:
            for group, levels in generalization["pairs"].items():
                for level, d in levels.items():
                    centers, observed = reliability(np.array(d["predictor"]), np.array(d["outcome"]))
                    axes[1].plot(centers, observed, marker="o", label=f"{group}, {level}")
            axes[1].plot([0, 1], [0, 1], "k:", label="perfect")
            axes[1].set_xlabel("predicted success")
            axes[1].set_ylabel("observed success")
            axes[1].set_title("reliability on held-out outcomes (generalization study)")
            axes[1].legend(fontsize=7)
        save(fig, "predictor_calibration.png")
    return written


def reliability(predicted: np.ndarray, outcomes: np.ndarray, bins: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Mean prediction and mean outcome per equal-width bin that holds any predictions."""
    which = np.minimum((predicted * bins).astype(int), bins - 1)
    used = [b for b in range(bins) if np.any(which == b)]
    return (np.array([predicted[which == b].mean() for b in used]),
            np.array([outcomes[which == b].mean() for b in used]))
