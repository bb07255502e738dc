"""Where a comparison's runs live: a stored run is found under its settings, whichever scheduler or learner
layout computed it (that every committed study run is found by its config: tests/studies/test_committed_runs.py)."""

import dataclasses

from configs import compare_math
from trace_jax.compare import grid
from trace_jax.compare.grid_runs import run_dir
from trace_jax.config import schema


def test_the_scheduler_and_the_learner_layout_do_not_move_a_run_and_a_step_size_does():
    compare, base = grid.split_config(compare_math.get_config())
    runs = grid.validate(grid.framed(base, compare, 1), compare)
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
