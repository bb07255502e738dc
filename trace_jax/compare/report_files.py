"""The comparison's report files: `results{suffix}.json` (setting, every run's record, paired statistics
against GRPO overall and by level, learning curves against cost, the primary endpoint), `results{suffix}.md`
and the plots, kept in the results store when one is configured. Returns the headline the runner prints."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import jax

from trace_jax.compare import curves, grid, paired_report, report, results_store
from trace_jax.compare.grid_runs import GridResults
from trace_jax.compare.shared_start import SharedStart
from trace_jax.config import schema
from trace_jax.run import experiment


def framing(budget) -> str:
    if budget.unit == "rollouts":
        return "equal rollouts"
    return (f"equal measured tokens: {budget.tokens} per step of generated + {budget.prefill_weight} x prefilled, "
            "M re-planned each step by the token meter")


def seeds_text(seeds: dict[str, list[int]]) -> str:
    groups: dict[tuple, list[str]] = {}
    for variant, mine in seeds.items():
        groups.setdefault(tuple(mine), []).append(variant)
    if len(groups) == 1:
        return str(list(next(iter(groups))))
    return "; ".join(f"{', '.join(v)}: {list(s)}" for s, v in groups.items())


def primary_endpoint(compare: grid.CompareSection, paired: dict[str, dict], outcomes: dict[str, dict],
                     base_run: schema.RunConfig, framing_text: str) -> dict | None:
    """`compare.primary`'s a - b (TRACE - GRPO by default) on `compare.endpoint`'s per-task outcomes after the last
    step (from `paired`, every variant minus GRPO per outcome kind, when b is GRPO: the PairedDifference JSON with its
    decision), with the key secondary TRACE - PCL where PCL ran and every arm's own settings; None until a and b
    share a finished seed."""
    a, b = compare.primary
    primary = (paired[compare.endpoint] if b == "grpo" else
               paired_report.paired_vs(b, outcomes[compare.endpoint], margin=compare.equivalence_margin,
                                seed=base_run.seed)).get(a)
    if primary is None:
        return None
    versus_pcl = paired_report.paired_vs("pcl", outcomes[compare.endpoint], margin=compare.equivalence_margin,
                                  seed=base_run.seed).get("trace")
    return {**primary, "pair": [a, b], "endpoint": compare.endpoint, "framing": framing_text, "task": base_run.task.source,
            "arms_settings": {arm: compare.arm_settings.get(arm, {}) for arm in compare.allocators},
            "trace_vs_pcl": versus_pcl}


def write(workdir: str, compare: grid.CompareSection, base_run: schema.RunConfig, start: SharedStart,
          results: GridResults, runs: list, started: float) -> dict:
    """Writes the report of the audited runs in `results`; returns the headline (with the primary endpoint)."""
    records, outcomes, levels = results.records, results.outcomes, results.levels
    setup, after_sft, predictor_study = start.setup, start.after_sft, start.predictor_study
    summary = report.aggregate(records)
    reference = next(iter(summary)) if compare.ablation else "grpo"
    margin = compare.equivalence_margin
    paired = {kind: paired_report.paired_vs("grpo", by_variant, margin=margin, seed=base_run.seed)
              for kind, by_variant in outcomes.items()}
    paired_levels = {kind: paired_report.paired_by_level("grpo", by_variant, levels[kind], margin=margin, seed=base_run.seed)
                     for kind, by_variant in outcomes.items() if kind in levels}
    cost_curves = curves.curves(records, reference=reference)
    sampled_curves = curves.curves(records, reference=reference, key="eval_sampled")
    suffix = grid.suffix(compare)
    b = runs[0][2].budget
    seeds = {v: s["seeds"] for v, s in summary.items()}
    cap = getattr(base_run.task, "max_difficulty", None)  # a synthetic source's; file sources have none
    setting = (f"Task {base_run.task.source}{'' if cap is None else f' (max difficulty {cap})'}, model preset "
               f"{base_run.model.preset}, {base_run.rl.steps} RL steps of M={b.rollouts} rollouts (B={b.prompts} "
               f"prompts, C={b.candidates} candidates, {framing(b)}), held-out set {base_run.eval.split} "
               f"({len(experiment.eval_tasks(setup))} tasks, greedy), seeds "
               f"{seeds_text(seeds)}; every ledger audited against the budget. Wall time of the runs, summed: "
               f"{sum(r['wall_s'] or 0 for r in records):.0f} s (this invocation: {time.time() - started:.0f} s; a run's "
               f"wall time covers RL and its evaluations, the first run in a process also compiles).")
    title = f"Allocator comparison ({compare.ablation} ablation)" if compare.ablation else "Allocator comparison"
    primary = primary_endpoint(compare, paired, outcomes, base_run, framing(b))
    if jax.process_index() == 0:
        written = [os.path.join(workdir, f"results{suffix}.json"), os.path.join(workdir, f"results{suffix}.md")]
        with open(written[0], "w", encoding="utf-8") as f:
            json.dump({"setting": setting, "compare": dataclasses.asdict(compare), "after_sft": after_sft,
                       "summary": summary, "runs": records, "generalization": predictor_study,
                       "paired_vs_grpo": paired, "paired_vs_grpo_by_level": paired_levels, "curves": cost_curves,
                       "curves_sampled": sampled_curves,
                       "primary_endpoint": primary}, f, indent=1)
        with open(written[1], "w", encoding="utf-8") as f:
            f.write(report.markdown(summary, title=title, after_sft=after_sft["accuracy"], setting=setting,
                                    generalization=predictor_study, reference=reference))
            f.write("\n## What the contrast was\n\n" + report.ARMS_NOTE + "\n\n" + report.contrast_markdown(records))
            f.write("\n## Learning curves against cost\n\n" + curves.markdown(cost_curves, reference=reference))
            if any(sampled_curves.values()):
                f.write("\n## Learning curves of sampled success (mean-of-k) against cost\n\n"
                        + curves.markdown(sampled_curves, reference=reference))
            if paired["greedy"] or paired["sampled"]:
                f.write("\n" + paired_report.paired_markdown(paired))
                f.write("\n" + paired_report.paired_level_markdown(paired_levels))
        written += report.plots(records, workdir, predictor_study, suffix) + curves.plot(cost_curves, workdir, suffix)
        if compare.results:
            results_store.keep_report(compare.results, written)
        for path in written:
            experiment.log(f"wrote {path}")
    return {**report.headline(summary), "primary_endpoint": primary}
