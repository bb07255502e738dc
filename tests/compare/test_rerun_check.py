"""studies/decisive/rerun_check.py: two run directories compared step by step (the first step whose ledger differs)
and at the end (paired by task); the stored run of a comparison is found with its shared start, or named."""

import json

import pytest

from tests import experiment_scripts
from trace_jax.compare import grid_runs
from trace_jax.config.files import load_config_file
from trace_jax.config.schema import ConfigError


def _run(path, ledgers, losses, successes):
    path.mkdir()
    (path / "steps.jsonl").write_text("".join(json.dumps({"ledger": {"tokens_generated": t}, "learner": {"loss": l}}) + "\n"
                                              for t, l in zip(ledgers, losses)))
    (path / "eval").mkdir()
    (path / "eval" / "step_3.json").write_text(json.dumps({"greedy": {"successes": successes, "k": 1}}))
    return str(path)


def test_two_runs_are_compared_step_by_step_and_at_the_end(tmp_path):
    script = experiment_scripts.load("studies/decisive/rerun_check")
    a = _run(tmp_path / "a", [10, 11, 12], [0.5, 0.25, 0.1], [1, 0, 1, 1])
    same = script.compare_runs(a, _run(tmp_path / "same", [10, 11, 12], [0.5, 0.25, 0.1], [1, 0, 1, 1]))
    assert same["identical_steps"] and same["first_ledger_divergence"] is None
    assert same["final"]["greedy"]["identical"] and same["final"]["greedy"]["diff"] == 0
    other = script.compare_runs(a, _run(tmp_path / "b", [10, 11, 13], [0.5, 0.2501, 0.1], [1, 1, 1, 1]))
    assert other["first_ledger_divergence"] == 3
    assert other["max_relative_loss_difference_before"] == pytest.approx(0.0004)
    assert other["final"]["greedy"]["diff"] == pytest.approx(0.25)  # rerun (4 of 4) - committed (3 of 4)


def test_a_stored_run_is_found_with_its_shared_start_or_named():
    config = load_config_file("studies/decisive/config.py:confirm")
    run, shared, after_sft = grid_runs.stored_run(config, "grpo", 7)
    assert run.seed == 7 and run.budget.tokens == 2342 and shared.endswith("confirm_math/shared")
    assert after_sft["mean@8"] == pytest.approx(0.061)
    with pytest.raises(ConfigError, match="no run \\('grpo', seed 9\\)"):
        grid_runs.stored_run(config, "grpo", 9)
    with pytest.raises(ConfigError, match="not found"):
        load_config_file("configs/no_such.py:mixed")
