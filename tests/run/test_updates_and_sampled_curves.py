"""The RL loop with several learner updates per step and mean-of-k at intermediate evaluations: the step
records carry the updates' figures, the metrics the sampled curve, the report a sampled learning curve."""

import json
import os

import pytest

from configs import quickstart
from trace_jax.compare import curves, report
from trace_jax.config.files import from_config_dict
from trace_jax.config.schema import ConfigError
from trace_jax.run import train
from trace_jax.run.metrics import read_metrics
from trace_jax.run.records import read_steps


def _config(**changes):
    c = quickstart.get_config("runlocal")
    for dotted, value in {"model.preset": "tiny", "rl.steps": 2, "rl.eval_every": 0, "checkpoint.every": 2,
                          "eval.num_tasks": 4, "eval.sample_k": 2, "eval.sample_every": 1, "sft.steps": 10,
                          "budget.rollouts": 8, "budget.prompts": 2, "budget.candidates": 4,
                          "learner.mini_batches": 2, "learner.epochs": 2, **changes}.items():
        section, key = dotted.split(".")
        c[section][key] = value
    return c


@pytest.mark.slow
def test_updates_per_step_and_the_sampled_learning_curve(tmp_path):
    summary = train.train_and_evaluate(_config(), str(tmp_path))
    assert summary["steps"] == 2
    steps = read_steps(str(tmp_path))
    assert all(r.learner is None or 1 <= r.learner.updates <= 4 for r in steps)
    assert all(r.trees.prompts_mixed is not None and r.trees.anchor_depths is not None for r in steps)
    with open(os.path.join(tmp_path, "eval", "step_1.json")) as f:
        assert set(json.load(f)) == {"greedy", "sampled"}  # the intermediate evaluation measured the mean-of-k
    lines = read_metrics(str(tmp_path))
    after_sft = {"accuracy": 0.25, "mean@2": 0.125}
    record = report.run_record("trace", 0, steps, lines, summary, after_sft["accuracy"],
                               steps[0].ledger, after_sft_sampled=after_sft)
    assert record["eval_sampled"]["step"] == [0, 1, 2] and record["eval_sampled"]["accuracy"][0] == 0.125
    table = curves.curves([record], reference="trace", key="eval_sampled")
    assert table["tokens"]["trace"]["area"]["mean"] is not None


@pytest.mark.slow
def test_intermediate_evaluations_score_the_fixed_subset_and_the_run_times_its_parts(tmp_path):
    """eval.intermediate_tasks: step 1 scores the first 2 tasks greedily, the end all 4; the greedy curve reads
    the subset's key at every point; the summary splits evaluation and compile seconds out of the wall time."""
    summary = train.train_and_evaluate(_config(**{"eval.sample_every": 0, "rl.eval_every": 1,
                                                   "eval.intermediate_tasks": 2}), str(tmp_path))
    with open(os.path.join(tmp_path, "eval", "step_1.json")) as f:
        assert len(json.load(f)["greedy"]["successes"]) == 2
    with open(os.path.join(tmp_path, "eval", "step_2.json")) as f:
        final = json.load(f)
    assert len(final["greedy"]["successes"]) == 4 and "sampled" in final
    assert 0 < summary["eval_s"] < summary["wall_s"] and 0 < summary["compile_s"] < summary["wall_s"]
    lines = read_metrics(str(tmp_path))
    assert {"eval/accuracy/intermediate_subset", "eval/accuracy"} <= set(next(m for m in lines if m["step"] == 2))
    after_sft = {"accuracy": 0.25, "accuracy/intermediate_subset": 0.5, "mean@2": 0.125}
    steps = read_steps(str(tmp_path))
    record = report.run_record("grpo", 0, steps, lines, summary, after_sft["accuracy"], steps[0].ledger,
                               after_sft_sampled=after_sft)
    assert record["eval"]["step"] == [0, 1, 2] and record["eval"]["accuracy"][0] == 0.5
    assert record["eval_s"] == summary["eval_s"] and record["rl_s"] > 0


def test_the_intermediate_subset_is_part_of_the_evaluated_tasks():
    with pytest.raises(ConfigError, match="eval.intermediate_tasks"):
        from_config_dict(_config(**{"eval.intermediate_tasks": 5}).to_dict())
    with pytest.raises(ConfigError, match="eval.intermediate_tasks"):
        from_config_dict(_config(**{"eval.intermediate_tasks": -1}).to_dict())
    assert from_config_dict(_config(**{"eval.intermediate_tasks": 3}).to_dict()).eval.intermediate_tasks == 3


def test_sample_every_needs_a_k():
    c = _config(**{"eval.sample_k": 0})
    with pytest.raises(ConfigError, match="eval.sample_every"):
        from_config_dict(c.to_dict())
