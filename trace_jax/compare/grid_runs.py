"""The runs of a comparison grid: each (variant, seed) trained from the shared SFT checkpoint in its own
directory (`runs/<variant>/seed<k>-<settings hash>/`, linked to the shared SFT and tokenizer), read back when
it finished earlier (in the workdir or the results store), audited against the budget, and collected for
the report. A run that fails the audit is named and left out; the others go on."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re

import jax
import numpy as np

from trace_jax.compare import audit, grid, report, results_store
from trace_jax.config import schema
from trace_jax.run import evaluation, experiment, train
from trace_jax.run.metrics import read_metrics
from trace_jax.run.records import read_steps


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", name).strip("_")


def run_dir(workdir: str, variant: str, seed: int, run: schema.RunConfig) -> str:
    """`runs/<variant>/seed<k>-<hash of the run's identity>`: a run is read back or resumed only under
    the settings it ran under, so `:runlocal` and the full comparison can share one workdir (and its
    SFT checkpoint), and changing a setting reruns instead of reporting a stale result; the scheduler and
    learner layout are not part of it (`schema.EXECUTION_SETTINGS`). The directory keeps the identity
    itself in `identity.json` (`results_store.write_identity`)."""
    digest = hashlib.sha256(json.dumps(schema.identity(run), sort_keys=True).encode()).hexdigest()[:8]
    return os.path.join(workdir, "runs", _slug(variant), f"seed{seed}-{digest}")


def link_shared(shared: str, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    for name in ("sft", "tokenizer"):
        link = os.path.join(directory, name)
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(os.path.join(shared, name)), link)


@dataclasses.dataclass
class GridResults:
    """What the finished, audited runs give the report."""

    records: list[dict] = dataclasses.field(default_factory=list)  # `report.run_record` per run
    outcomes: dict[str, dict] = dataclasses.field(default_factory=lambda: {"greedy": {}, "sampled": {}})
    levels: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # difficulty per eval task
    failed: list[str] = dataclasses.field(default_factory=list)  # audit failures, each naming its run directory
    interrupted_at: int | None = None  # the run a signal stopped (then nothing else is set)


def run_grid(runs: list[tuple[grid.Variant, int, schema.RunConfig]], workdir: str, compare: grid.CompareSection,
             after_sft: dict, *, report_only: bool = False) -> GridResults:
    """Trains (or reads back) every run in order; `report_only` trains nothing."""
    shared, out = os.path.join(workdir, "shared"), GridResults()
    for i, (variant, seed, run) in enumerate(runs):
        directory = run_dir(workdir, variant.name, seed, run)
        experiment.banner(f"run {i + 1}/{len(runs)}: {variant.name}, seed {seed}")
        link_shared(shared, directory)
        identity = schema.identity(run)
        results_store.write_identity(directory, identity)
        summary_path = os.path.join(directory, "summary.json")
        relative = os.path.relpath(directory, workdir)
        if compare.results and results_store.restore_run(compare.results, relative, directory, identity):
            experiment.log(f"finished earlier, kept in {compare.results}")
        failure = results_store.stored_failure(compare.results, relative) if compare.results else None
        if failure is not None and not os.path.exists(summary_path):
            out.failed.append(f"{failure} [{directory}]")
            experiment.log(f"failed the budget audit earlier (kept in {compare.results}): {failure}")
            continue
        if os.path.exists(summary_path):
            with open(summary_path, encoding="utf-8") as f:
                summary = json.load(f)
            experiment.log(f"finished earlier: {summary}")
        elif report_only:
            experiment.log("not run yet: left out of the report")
            continue
        else:
            summary = train.train_and_evaluate(run, directory, after_sft=after_sft)
            # Each run jits fresh closures; without this, a long comparison accumulates compiled
            # executables until XLA's CPU compiler cannot map more memory. The persistent cache
            # makes the recompiles cheap.
            jax.clear_caches()
            if summary.get("interrupted"):
                return GridResults(interrupted_at=i)
            with open(summary_path, "w", encoding="utf-8") as f:
                json.dump(summary, f)
        steps = read_steps(directory)
        try:
            ledger = audit.audit(f"{variant.name} seed {seed}", run, steps)
        except audit.BudgetAuditError as e:  # the grid goes on: one bad run must not cost the rest of a night
            out.failed.append(f"{e} [{directory}]")
            experiment.log(f"BUDGET AUDIT FAILED (continuing with the other runs): {e}")
            if compare.results:
                results_store.keep_failure(compare.results, relative, str(e))
            continue
        if compare.results:  # audited first: a ledger that fails is not kept
            results_store.keep_run(compare.results, relative, directory)
        out.records.append(report.run_record(variant.name, seed, steps, read_metrics(directory), summary,
                                             after_sft["accuracy"], ledger, after_sft_sampled=after_sft))
        final = os.path.join(directory, "eval", f"step_{run.rl.steps}.json")
        if os.path.exists(final):  # runs from before per-task outcomes were kept have none
            for kind, o in evaluation.read_outcomes(final).items():
                out.outcomes[kind].setdefault(variant.name, {})[seed] = np.asarray(o.successes, float) / o.k
                out.levels.setdefault(kind, np.asarray(o.difficulty))
    return out


def stored_run(config, variant: str, seed: int) -> tuple[schema.RunConfig, str, dict]:
    """One run of a comparison whose shared start is stored (`compare.results`): (its run config, at the stored
    token cap where the framing is tokens; the stored shared directory with the SFT checkpoint and tokenizer; the
    SFT start's held-out result). Retrains it elsewhere, e.g. to check that a rerun reproduces it."""
    compare, base = grid.split_config(config)
    if not compare.results or not os.path.exists(os.path.join(compare.results, "shared.json")):
        raise schema.ConfigError(f"no stored shared start in compare.results ({compare.results!r})")
    if compare.unit == "tokens" and not compare.tokens:
        raise schema.ConfigError("the tokens framing's cap is measured, not stored in the config: set compare.tokens")
    runs = {(v.name, s): run for v, s, run in grid.validate(grid.framed(base, compare, compare.tokens), compare)}
    if (variant, seed) not in runs:
        raise schema.ConfigError(f"the comparison has no run ({variant!r}, seed {seed}); it has {sorted(runs)}")
    with open(os.path.join(compare.results, "shared.json"), encoding="utf-8") as f:
        after_sft = json.load(f)["after_sft"]
    return runs[(variant, seed)], os.path.join(compare.results, "shared"), after_sft

