"""The decisive comparison's study config (studies/decisive/config.py): phase 2 runs each arm at the setting phase 1
chose and refuses a missing or provisional selection; its equivalence margin is the one PLAN.md fixed."""

import importlib
import json
import os

import pytest

from trace_jax.compare import grid
from trace_jax.config.schema import ConfigError

decisive = importlib.import_module("studies.decisive.config")


def _write_selection(path, provisional=False):
    arms = {arm: {"settings": {"learner": {"learning_rate": 1e-4 if arm == "grpo" else 3e-4, "mini_batches": 4}}}
            for arm in decisive.ARMS}
    path.write_text(json.dumps({"provisional": provisional, "arms": arms}))


def test_the_confirmatory_config_runs_each_arm_at_its_selected_setting(tmp_path, monkeypatch):
    monkeypatch.setattr(decisive, "SELECTION", str(tmp_path / "selection.json"))
    with pytest.raises(ConfigError, match="needs the screen's selection"):
        decisive.get_config("confirm")
    _write_selection(tmp_path / "selection.json", provisional=True)
    with pytest.raises(ConfigError, match="provisional"):
        decisive.get_config("confirm")
    with pytest.raises(ConfigError, match="exactly one"):
        decisive.get_config("screen,confirm")
    _write_selection(tmp_path / "selection.json")
    compare, base = grid.split_config(decisive.get_config("confirm"))
    assert compare.endpoint == "sampled" and compare.seeds == tuple(range(8)) and compare.unit == "tokens"
    runs = grid.validate(grid.framed(base, compare, compare.tokens), compare)
    assert len(runs) == 4 * 8
    by_arm = {v.name: r for v, s, r in runs if s == 0}
    assert by_arm["grpo"].learner.learning_rate == 1e-4 and by_arm["trace"].learner.learning_rate == 3e-4
    assert by_arm["trace"].allocator.prefix_budget == "local" and by_arm["trace_global"].allocator.prefix_budget == "global"
    run = by_arm["trace"]
    assert (run.rl.steps, run.eval.split, run.eval.num_tasks, run.eval.sample_k, run.eval.sample_tasks,
            run.eval.sample_every, run.budget.unit, run.budget.tokens) == (240, "separate", 1000, 8, 1000, 80, "tokens", 2342)
    assert (run.task.source, run.task.max_difficulty, run.sft.max_difficulty) == ("math", 5, 3)  # the mixed pool


def test_the_screen_sweeps_each_arms_step_size_on_two_seeds():
    compare, base = grid.split_config(decisive.get_config("screen"))
    runs = grid.validate(grid.framed(base, compare, compare.tokens), compare)
    assert len(runs) == 4 * 6 * 2 and compare.results.endswith("studies/decisive/results/screen_math")
    assert {r.learner.learning_rate for _, _, r in runs} == {1e-4, 3e-4, 1e-3}


def test_the_decisive_config_fixes_the_plans_design_mdd_as_its_margin():
    with open(os.path.join(os.path.dirname(decisive.__file__), "PLAN.md"), encoding="utf-8") as f:
        plan = f.read()
    assert "**0.63 pts**" in plan  # the design's MDD at 8 x 1000, in the plan's table
    assert decisive.get_config("confirm").compare.equivalence_margin == pytest.approx(0.0063)
    assert decisive.get_config("screen").compare.equivalence_margin == 0.0
