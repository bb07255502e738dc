"""`run_comparison`: one shared SFT checkpoint, every (variant, seed) RL run from it at the same
budget and step count, the budget audit, the generalization study and the report. The pieces, one file
each: `shared_start.py` (the SFT checkpoint and what is measured on it), `grid_runs.py` (the runs),
`studies.py` (the generalization and mechanism studies), `report_files.py` (results.json/.md, plots).

Layout under the workdir: `shared/` (tokenizer, SFT checkpoint, its held-out result, the
generalization study), `runs/<variant>/seed<k>-<settings hash>/` (an ordinary training workdir
whose `sft` and `tokenizer` link to the shared ones, plus `summary.json` once it finished), and the report:
`results.json`, `results.md`, `*.png`. Re-running the same command resumes: finished runs are read
back, an interrupted one continues from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
import time

from trace_jax.compare import audit, grid, grid_runs, report_files, shared_start, studies
from trace_jax.config import schema
from trace_jax.config.files import from_config_dict
from trace_jax.run import experiment
from trace_jax.run.workdir_lock import holds_workdir


@holds_workdir
def run_comparison(config, workdir: str, *, ablation: str | None = None, study: str | None = None,
                   unit: str | None = None, seeds: tuple[int, ...] | None = None,
                   allocators: tuple[str, ...] | None = None, report_only: bool = False) -> dict:
    """Runs (or resumes) the comparison; returns the headline dict (also the last line printed).
    `report_only`: trains nothing; reports the runs finished so far (in the workdir or `compare.results`)."""
    started = time.time()
    compare, base = grid.split_config(config)
    overrides = {k: v for k, v in (("ablation", ablation), ("study", study), ("unit", unit), ("seeds", seeds),
                                   ("allocators", allocators)) if v is not None}
    try:
        compare = dataclasses.replace(compare, **overrides)
    except ValueError as e:
        raise schema.ConfigError(f"comparison flags: {e}") from None
    # every run's config, before any compute (the tokens framing's measured cap is a placeholder here)
    runs = grid.validate(grid.framed(base, compare, compare.tokens or 1), compare)
    base_run = from_config_dict(base)
    if compare.study:
        experiment.log(f"{compare.study} study (no training) on the shared SFT checkpoint, budget {base_run.budget}")
    else:
        by_variant = {v.name: list(grid.seeds_of(v, compare)) for v in grid.variants(compare)}
        experiment.log(f"{len(runs)} runs: {len(by_variant)} variants, seeds {report_files.seeds_text(by_variant)}, "
                       f"{base_run.rl.steps} steps each at budget {base_run.budget}")

    shared = os.path.join(workdir, "shared")
    start = shared_start.prepare(base_run, compare, shared)
    if start is None:
        return {"interrupted": True, "finished_runs": 0}
    if compare.study == "generalization":
        return studies.generalization_report(workdir, start.predictor_study)
    if compare.unit == "tokens":
        base = grid.framed(base, compare, shared_start.token_cap(start, compare, shared))
        runs = grid.validate(base, compare)
    if compare.study == "mechanism":
        return studies.mechanism_report(start.setup, start.params, base, compare, workdir, start.predictor_study,
                                        start.after_sft)

    results = grid_runs.run_grid(runs, workdir, compare, start.after_sft, report_only=report_only)
    if results.interrupted_at is not None:
        experiment.log("comparison interrupted; run the same command again to resume")
        return {"interrupted": True, "finished_runs": results.interrupted_at}
    if results.failed:
        raise audit.BudgetAuditError(f"{len(results.failed)} run(s) failed the budget audit, so no report is written "
                                     "(the others are finished and kept): " + "; ".join(results.failed) + ". Fix the "
                                     "cause, delete those run directories (and, with compare.results, their stored "
                                     "audit_failed.json) and rerun the same command to redo them.")
    if not results.records:
        experiment.log("no finished runs to report")
        return {"finished_runs": 0}
    return report_files.write(workdir, compare, base_run, start, results, runs, started)
