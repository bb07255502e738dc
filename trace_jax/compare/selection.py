"""Each arm's setting from a step-size screen, read from the screen's stored runs, by a rule fixed before the
screen runs (a study's plan states it; the decisive comparison's is its "Selection rule").

A screen is a grid with `compare.sweep` (every arm at every combination of the swept fields). Per arm:
  1. a setting is not eligible if any of its runs failed the per-step budget audit (it did not run at
     equal measured cost; `results_store.AUDIT_FAILED` in its stored run directory);
  2. the eligible settings are scored on the seeds every one of them finished (all of them when the
     screen is complete): the mean over those seeds of the final mean-of-k on the screen's eval split;
  3. among the settings within `tie` (0.5 points) of the best score, the largest area under the greedy
     curve against generated tokens wins; then the smaller learning rate; then the fewer mini-batches
     (the sweep's fields in order, smaller first).
A setting with runs neither finished nor failed makes the selection provisional (the screen is not done).
Pure functions of the stored files; a study's script calls them (e.g. studies/decisive/select_step_sizes.py).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from trace_jax.compare import audit, curves, grid, grid_runs, report, results_store
from trace_jax.config import schema
from trace_jax.run.evaluation import mean_of_k, read_outcomes
from trace_jax.run.metrics import read_metrics
from trace_jax.run.records import read_steps

TIE = 0.005  # 0.5 points of mean-of-k success


@dataclasses.dataclass(frozen=True)
class RunScore:
    """One finished screen run: final mean-of-k and greedy success, and the normalised area under its
    greedy curve against generated tokens (step 0 is the shared SFT start)."""

    sampled: float
    greedy: float
    greedy_area: float


@dataclasses.dataclass(frozen=True)
class Setting:
    """One arm at one combination of the swept fields, with what its seeds did."""

    arm: str
    variant: str
    swept: dict[str, object]  # {"learner.learning_rate": 3e-4, ...}: the sweep's fields only
    finished: dict[int, RunScore]
    failed: dict[int, str]  # seed -> the audit's message
    missing: tuple[int, ...]  # seeds neither finished nor failed

    @property
    def eligible(self) -> bool:
        return not self.failed and bool(self.finished)


@dataclasses.dataclass(frozen=True)
class Choice:
    """An arm's selected setting and why."""

    arm: str
    variant: str
    swept: dict[str, object]
    seeds: tuple[int, ...]  # the seeds the scores averaged
    score: float  # mean over `seeds` of the final mean-of-k
    greedy_area: float
    reason: str
    provisional: bool  # some setting of the arm has runs still to do

    def arm_settings(self) -> dict[str, dict[str, object]]:
        """{section: {field: value}}: what `compare.arm_settings[arm]` takes."""
        out: dict[str, dict[str, object]] = {}
        for key, value in self.swept.items():
            section, field = key.split(".")
            out.setdefault(section, {})[field] = value
        return out


def score_run(directory: str, run: schema.RunConfig, after_sft: float) -> RunScore:
    """A finished run's scores from its stored files (the final evaluation's per-task outcomes)."""
    steps = read_steps(directory)
    ledger = audit.audit(directory, run, steps)
    with open(os.path.join(directory, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    record = report.run_record("", run.seed, steps, read_metrics(directory), summary, after_sft, ledger)
    final = os.path.join(directory, "eval", f"step_{run.rl.steps}.json")
    outcomes = read_outcomes(final)
    if "sampled" not in outcomes:
        raise ValueError(f"{final} has no mean-of-k outcomes; the screen needs eval.sample_k > 0")
    sampled = mean_of_k(outcomes["sampled"])
    key = next(k for k in sampled if "/" not in k)
    return RunScore(sampled=float(sampled[key]), greedy=float(summary["acc_after_rl"]),
                    greedy_area=curves.normalised_area(record["eval"]["tokens"], record["eval"]["accuracy"]))


def read_settings(results: str, runs: list[tuple[grid.Variant, int, schema.RunConfig]], compare: grid.CompareSection,
                  after_sft: float) -> list[Setting]:
    """Every (arm, swept values) of the screen with its seeds' stored outcomes, in the grid's order."""
    swept_keys = list(grid.dotted(compare.sweep))
    by_variant: dict[str, dict] = {}
    for variant, seed, run in runs:
        entry = by_variant.setdefault(variant.name, {"variant": variant, "finished": {}, "failed": {}, "missing": []})
        stored = grid_runs.run_dir(results, variant.name, seed, run)
        if os.path.exists(os.path.join(stored, "summary.json")):
            entry["finished"][seed] = score_run(stored, run, after_sft)
        elif (reason := results_store.stored_failure(results, os.path.relpath(stored, results))) is not None:
            entry["failed"][seed] = reason
        else:
            entry["missing"].append(seed)
    return [Setting(arm=grid.arm_of(name), variant=name,
                    swept={k: e["variant"].overrides[k] for k in swept_keys},
                    finished=e["finished"], failed=e["failed"], missing=tuple(e["missing"]))
            for name, e in by_variant.items()]


def choose(settings: list[Setting], *, tie: float = TIE) -> dict[str, Choice]:
    """arm -> its Choice by the module's rule; ValueError naming an arm none of whose settings is eligible
    or whose eligible settings share no finished seed."""
    out = {}
    for arm in dict.fromkeys(s.arm for s in settings):
        mine = [s for s in settings if s.arm == arm]
        eligible = [s for s in mine if s.eligible]
        if not eligible:
            raise ValueError(f"arm {arm!r}: no eligible setting (every one failed the audit or has no finished run): "
                             + "; ".join(f"{s.variant}: failed {sorted(s.failed)}, finished {sorted(s.finished)}"
                                         for s in mine))
        seeds = tuple(sorted(set.intersection(*(set(s.finished) for s in eligible))))
        if not seeds:
            raise ValueError(f"arm {arm!r}: its eligible settings share no finished seed "
                             + "; ".join(f"{s.variant}: {sorted(s.finished)}" for s in eligible))
        score = {s.variant: float(np.mean([s.finished[k].sampled for k in seeds])) for s in eligible}
        area = {s.variant: float(np.mean([s.finished[k].greedy_area for k in seeds])) for s in eligible}
        best = max(score.values())
        near = [s for s in eligible if score[s.variant] >= best - tie - 1e-12]
        pick = sorted(near, key=lambda s: (-area[s.variant], *(float(v) for v in s.swept.values())))[0]
        if len(near) == 1:
            reason = f"highest mean-of-k ({100 * best:.1f}%) over seeds {list(seeds)}"
        else:
            reason = (f"{len(near)} settings within {100 * tie:.1f} points of the best mean-of-k ({100 * best:.1f}%): "
                      f"largest greedy area against tokens ({100 * area[pick.variant]:.1f}%)")
        out[arm] = Choice(arm=arm, variant=pick.variant, swept=pick.swept, seeds=seeds, score=score[pick.variant],
                          greedy_area=area[pick.variant], reason=reason,
                          provisional=any(s.missing for s in mine))
    return out


def markdown(settings: list[Setting], choices: dict[str, Choice]) -> str:
    """Every setting's per-seed outcomes and status, the selected ones in bold."""
    lines = ["| arm | setting | seeds finished | mean-of-k per seed | greedy area per seed | status |",
             "|---|---|---|---|---|---|"]
    for s in settings:
        label = ", ".join(f"{k.split('.')[1]} {grid.value_label(v)}" for k, v in s.swept.items())
        seeds = sorted(s.finished)
        status = ("**selected**" if choices.get(s.arm) and choices[s.arm].variant == s.variant
                  else f"failed the audit (seeds {sorted(s.failed)})" if s.failed
                  else f"not run (seeds {list(s.missing)})" if not s.finished else "eligible")
        lines.append(f"| {s.arm} | {label} | {seeds} | "
                     + " / ".join(f"{100 * s.finished[k].sampled:.1f}" for k in seeds) + " | "
                     + " / ".join(f"{100 * s.finished[k].greedy_area:.1f}" for k in seeds) + f" | {status} |")
    return "\n".join(lines) + "\n"
