"""Where a comparison's runs live: a stored run is found under its settings, whichever scheduler or learner
layout computed it, and the committed confirmatory runs are found by the configs as they stand."""

import dataclasses
import os

import pytest

from configs import compare_math
from trace_jax.compare import grid
from trace_jax.compare.grid_runs import run_dir
from trace_jax.config import schema

RESULTS = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "results", "decisive")


def _grid(spec: str):
    compare, base = grid.split_config(compare_math.get_config(spec))
    return compare, grid.validate(grid.framed(base, compare, compare.tokens or 1), compare)


def test_the_scheduler_and_the_learner_layout_do_not_move_a_run_and_a_step_size_does():
    _, runs = _grid("mixed,screen")
    _, seed, run = runs[0]
    where = run_dir("/w", "grpo", seed, run)
    for changed in (dataclasses.replace(run, rl=dataclasses.replace(run.rl, decode_chunk=16, decode_slots=32,
                                                                      overlap_tools=True)),
                    dataclasses.replace(run, learner=dataclasses.replace(run.learner, layout="packed"))):
        assert run_dir("/w", "grpo", seed, changed) == where
    faster = dataclasses.replace(run, learner=dataclasses.replace(run.learner, learning_rate=run.learner.learning_rate * 3))
    assert run_dir("/w", "grpo", seed, faster) != where


def test_execution_settings_are_also_settings_a_checkpoint_may_resume_under():
    resumable = schema.RESUMABLE_SETTINGS
    assert all(any(k == r or k.startswith(r + ".") for r in resumable) for k in schema.EXECUTION_SETTINGS)


@pytest.mark.parametrize("spec,folder", [("mixed,screen", "screen_math"), ("mixed,decisive", "confirm_math")])
def test_every_committed_decisive_run_is_found_by_the_config_as_it_stands(spec, folder):
    """A config edit that moved a stored run's directory would silently rerun it (hours) instead of reading
    it back: every committed `runs/<variant>/seed<k>-<hash>` must be one the grid asks for."""
    stored = os.path.join(RESULTS, folder, "runs")
    committed = {os.path.join(v, r) for v in os.listdir(stored) for r in os.listdir(os.path.join(stored, v))}
    assert committed, f"nothing stored under {stored}"
    _, runs = _grid(spec)
    asked = {os.path.relpath(run_dir("/w", variant.name, seed, run), "/w/runs") for variant, seed, run in runs}
    assert committed <= asked, sorted(committed - asked)
