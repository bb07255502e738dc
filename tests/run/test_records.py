"""Typed records: a StepRecord survives its JSON line (NaN included), the writer's steps.jsonl reads
back last-wins per step, and TensorBoard gets flat finite scalars."""

import dataclasses
import json
import math

from trace_jax.allocation.calibration import Calibration
from trace_jax.rl.learner import LearnerMetrics
from trace_jax.run.metrics import MetricWriter
from trace_jax.run.records import CheckpointRecord, StepRecord, read_steps
from trace_jax.testing import step_record


def _full(step=3):
    record = step_record(step, started=12, discarded=4, trees=2, tokens=77, spent=11.5)
    return dataclasses.replace(
        record, calibration=Calibration(brier=0.2, ece=0.1, auc=float("nan"), n=5), predictor_loss=0.6,
        learner=LearnerMetrics(loss=0.1, clip_fraction=0.0, approx_kl=1e-3, entropy=2.0, grad_norm=0.5,
                               trained_tokens=70.0, updates=4, clip_fraction_last=0.1, approx_kl_last=2e-3,
                               grad_norm_last=0.4), groups_sampled=4)


def test_a_step_record_round_trips_through_its_json_line():
    record = _full()
    line = json.dumps(record.to_json())  # strict JSON: NaN became null
    assert "NaN" not in line
    back = StepRecord.from_json(json.loads(line))
    assert math.isnan(back.calibration.auc)
    assert dataclasses.replace(back, calibration=None) == dataclasses.replace(record, calibration=None)
    assert back.ledger.rollouts_discarded == 4 and back.trees.leaves == 8
    assert StepRecord.from_json(json.loads(json.dumps(step_record(1).to_json()))) == step_record(1)
    diagnosed = dataclasses.replace(record, trees=dataclasses.replace(
        record.trees, prompts_mixed=2, root_groups_mixed=1, branch_leaf_share=0.25, anchor_depths=(3, 0, 1)))
    assert StepRecord.from_json(json.loads(json.dumps(diagnosed.to_json()))).trees == diagnosed.trees


def test_records_written_before_the_contrast_diagnostics_read_back_with_them_absent():
    line = _full().to_json()
    for key in ("prompts_mixed", "root_groups_mixed", "branch_leaf_share", "anchor_depths"):
        del line["trees"][key]
    for key in ("updates", "clip_fraction_last", "approx_kl_last", "grad_norm_last"):
        del line["learner"][key]
    back = StepRecord.from_json(line)
    assert back.trees.anchor_depths is None and back.trees.prompts_mixed is None
    assert back.learner.updates == 1 and math.isnan(back.learner.clip_fraction_last)


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


def test_checkpoint_record_round_trips():
    record = CheckpointRecord(step=5, data_position=160, after_sft={"accuracy": 0.5}, allocator={"rng": {}},
                              settings={"seed": 0})
    assert CheckpointRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
