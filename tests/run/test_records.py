"""Typed records: a StepRecord survives its JSON line (NaN included), the writer's steps.jsonl reads
back last-wins per step, and TensorBoard gets flat finite scalars."""

import dataclasses
import json
import math

import pytest

from trace_jax.allocation.calibration import Calibration
from trace_jax.rl.learner import LearnerMetrics
from trace_jax.run.metrics import MetricWriter
from trace_jax.run.records import CheckpointRecord, StepRecord, read_steps
from trace_jax.testing import step_record


def _full(step=3):
    record = step_record(step, started=12, discarded=4, trees=2, tokens=77, spent=11.5)
    calibration = Calibration(brier=0.2, ece=0.1, auc=float("nan"), n=5)
    allocation = dataclasses.replace(record.allocation, calibration=calibration, predictor_loss=0.6, groups_sampled=4,
                                     root_counts=(3, 5))
    return dataclasses.replace(
        record, allocation=allocation,
        learner=LearnerMetrics(loss=0.1, clip_fraction=0.0, approx_kl=1e-3, entropy=2.0, grad_norm=0.5,
                               trained_tokens=70.0, updates=4, clip_fraction_last=0.1, approx_kl_last=2e-3,
                               grad_norm_last=0.4, is_weight_mean=1.02, is_truncated_share=0.01))


def _without_nan(r):
    return dataclasses.replace(r, allocation=dataclasses.replace(r.allocation, calibration=None))


def test_a_step_record_round_trips_through_its_json_line():
    record = _full()
    line = json.dumps(record.to_json())  # strict JSON: NaN became null
    assert "NaN" not in line
    back = StepRecord.from_json(json.loads(line))
    assert math.isnan(back.allocation.calibration.auc) and back.allocation.root_counts == (3, 5)
    assert _without_nan(back) == _without_nan(record)
    assert back.ledger.rollouts_discarded == 4 and back.trees.leaves == 8
    assert StepRecord.from_json(json.loads(json.dumps(step_record(1).to_json()))) == step_record(1)
    diagnosed = dataclasses.replace(record, trees=dataclasses.replace(
        record.trees, prompts_mixed=2, root_groups_mixed=1, branch_leaf_share=0.25, anchor_depths=(3, 0, 1)))
    assert StepRecord.from_json(json.loads(json.dumps(diagnosed.to_json()))).trees == diagnosed.trees


def test_a_line_missing_a_field_is_refused_not_defaulted():
    """No field of a step record has a default a line could silently fall back on (records of runs stored before a
    field existed were migrated once: studies/migrations/identity_v2.py, staleness_v3.py); a None where a float is NaN comes back NaN,
    and a None where the field is `... | None` stays None."""
    line = _full().to_json()
    del line["trees"]["anchor_depths"]
    with pytest.raises(ValueError, match=r"step 3, trees has no \['anchor_depths'\]"):
        StepRecord.from_json(line)
    line = _full().to_json()
    del line["policy_lag"]
    with pytest.raises(ValueError, match=r"step 3 has no \['policy_lag'\]"):
        StepRecord.from_json(line)
    line = _full().to_json()
    line["learner"]["grad_norm_last"] = None
    line["learner"]["is_weight_mean"] = None
    line["trees"]["prompts_mixed"] = None
    back = StepRecord.from_json(line)
    assert math.isnan(back.learner.grad_norm_last) and back.trees.prompts_mixed is None
    assert back.learner.is_weight_mean is None


def test_the_writer_logs_records_that_read_back_last_wins(tmp_path):
    writer = MetricWriter(str(tmp_path))
    for record in (step_record(1, tokens=10), step_record(2, tokens=20), step_record(2, tokens=30)):
        writer.write_step(record)  # a run resumed before step 2 logs it again
    writer.close()
    steps = read_steps(str(tmp_path))
    assert [r.step for r in steps] == [1, 2] and steps[1].ledger.tokens_generated == 30
    assert read_steps(str(tmp_path / "nothing")) == []


def test_rewinding_to_the_last_checkpoint_forgets_the_final_evaluation_logged_after_it(tmp_path):
    """The last step's checkpoint precedes the final evaluation: a run stopped during the export resumes there and
    logs the final evaluation again, so the rewind drops it (`keep_step=False`) while keeping that step's record."""
    from trace_jax.run.metrics import read_metrics
    writer = MetricWriter(str(tmp_path))
    writer.write(0, {"accuracy": 0.1}, prefix="eval/")
    for step in (1, 2):
        writer.write_step(step_record(step))
    writer.write(2, {"accuracy": 0.3}, prefix="eval/")  # the final evaluation, after the step-2 checkpoint
    writer.rewind(2, keep_step=False)
    writer.write(2, {"accuracy": 0.3}, prefix="eval/")  # logged again on resume
    writer.close()
    evals = [m for m in read_metrics(str(tmp_path)) if "eval/accuracy" in m]
    assert [m["step"] for m in evals] == [0, 2] and [r.step for r in read_steps(str(tmp_path))] == [1, 2]
    writer = MetricWriter(str(tmp_path))
    writer.rewind(2)  # an intermediate checkpoint's evaluation is logged before it: kept
    assert [m["step"] for m in read_metrics(str(tmp_path)) if "eval/accuracy" in m] == [0, 2]


def test_scalars_are_flat_and_finite():
    scalars = _full().scalars()
    assert scalars["ledger/rollouts_started"] == 12 and scalars["learner/loss"] == 0.1
    assert scalars["budget_spent"] == 11.5 and "calibration/auc" not in scalars and "step" not in scalars
    assert scalars["calibration/brier"] == 0.2 and scalars["root_m_std"] == 1.0 and "root_counts" not in scalars


def test_checkpoint_record_round_trips():
    record = CheckpointRecord(step=5, data_position=160, after_sft={"accuracy": 0.5}, allocator={"rng": {}},
                              settings={"seed": 0})
    assert CheckpointRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    kept = dataclasses.replace(record, sampler_versions=(4,))  # rl.max_staleness = 1: the params step 6 samples with
    assert CheckpointRecord.from_json(json.loads(json.dumps(kept.to_json()))) == kept
