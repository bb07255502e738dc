"""Runs whose rollouts overlap the learner (`rl.max_staleness` = 1, `run/pipeline.py`), leaves rewarded by their
tokens' parity so every step's update moves the params (`async_driver.py`): each step's batch is trained once,
sampled by the params one learner step behind; a run stopped, killed (SIGKILL) or failed in its sampler resumes
to the uninterrupted run's records; rollouts on a device of their own give the same records."""

import dataclasses
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.run import async_driver
from trace_jax.run import train
from trace_jax.run.checkpointing import Checkpointer
from trace_jax.run.pipeline import SamplerError
from trace_jax.run.records import read_steps

pytestmark = pytest.mark.slow  # whole runs, and processes killed and resumed
REPO = async_driver.REPO


def _records(workdir):
    """Each step's record as JSON without its timings (a killed run may have logged a step twice: last wins)."""
    return {r.step: dataclasses.replace(r, timings=None).to_json() for r in read_steps(str(workdir))}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The 4-step run at max_staleness 1, with what the learner trained and which params sampled each step."""
    workdir, trained, sampled = tmp_path_factory.mktemp("s1"), [], []
    roll_out, learn_step = async_driver.parity_rewards(train.roll_out), train.learn_step

    def recording_roll_out(*args, **kwargs):
        rollouts = roll_out(*args, **kwargs)
        sampled.append((rollouts.step, rollouts.version))
        return rollouts

    def recording_learn_step(setup, fns, params, opt_state, rollouts, **kwargs):
        trained.append(rollouts.step)
        return learn_step(setup, fns, params, opt_state, rollouts, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(train, "roll_out", recording_roll_out)
        m.setattr(train, "learn_step", recording_learn_step)
        summary = train.train_and_evaluate(async_driver.config(), str(workdir))
    return workdir, summary, trained, sampled


def test_every_batch_is_trained_once_sampled_by_the_params_one_step_behind(uninterrupted):
    workdir, summary, trained, sampled = uninterrupted
    assert summary["steps"] == 4 and trained == [1, 2, 3, 4]
    assert sorted(sampled) == [(1, 0), (2, 0), (3, 1), (4, 2)]
    records = read_steps(str(workdir))
    assert [r.policy_lag for r in records] == [0, 1, 1, 1]
    assert all(r.learner.is_weight_mean is not None and r.learner.loss != 0.0 for r in records), \
        "every step trains on mixed rewards (else staleness could not matter)"
    assert records[0].learner.is_truncated_share == 0.0  # step 1: sampled by the params it trains, no correction


def test_a_run_stopped_after_two_steps_resumes_to_the_uninterrupted_records(uninterrupted, tmp_path, monkeypatch):
    workdir, summary, _, _ = uninterrupted
    monkeypatch.setattr(train, "roll_out", async_driver.parity_rewards(train.roll_out))
    train.train_and_evaluate(async_driver.config(**{"rl.steps": 2}), str(tmp_path))
    assert Checkpointer(str(tmp_path / "checkpoints")).read_record(2)["sampler_versions"] == [1]
    resumed = train.train_and_evaluate(async_driver.config(), str(tmp_path))
    assert _records(tmp_path) == _records(workdir)
    assert resumed["acc_after_rl"] == summary["acc_after_rl"]


def test_a_sampler_failure_stops_the_run_naming_the_step_and_the_checkpoint_before_it_resumes(
        uninterrupted, tmp_path, monkeypatch):
    workdir, _, _, _ = uninterrupted
    roll_out = async_driver.parity_rewards(train.roll_out)

    def failing(setup, allocator, params, pool, *, step, **kwargs):
        if step == 3:
            raise ConnectionError("the retrieval server went away")
        return roll_out(setup, allocator, params, pool, step=step, **kwargs)

    monkeypatch.setattr(train, "roll_out", failing)
    with pytest.raises(SamplerError, match="RL step 3 failed in the sampler worker: ConnectionError: the retrieval"):
        train.train_and_evaluate(async_driver.config(), str(tmp_path))
    assert Checkpointer(str(tmp_path / "checkpoints")).latest_step() == 2
    monkeypatch.setattr(train, "roll_out", roll_out)
    train.train_and_evaluate(async_driver.config(), str(tmp_path))
    assert _records(tmp_path) == _records(workdir)


def _driver(workdir, *pairs):
    return [sys.executable, os.path.join(REPO, "tests", "run", "async_driver.py"), str(workdir), *pairs]


def test_sigkill_while_the_sampler_runs_ahead_then_resume_reproduces_the_uninterrupted_run(uninterrupted, tmp_path):
    """Killed at a random moment (0-1.5 s) after step 2 is logged: in step 3's learner update or evaluation with
    step 4's rollouts in flight, or in a checkpoint write; the rerun finishes with the same records."""
    workdir, summary, _, _ = uninterrupted
    proc = subprocess.Popen(_driver(tmp_path), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and 2 not in _records(tmp_path):
        time.sleep(0.2)
    time.sleep(random.Random(56).uniform(0, 1.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    subprocess.run(_driver(tmp_path), cwd=REPO, check=True, capture_output=True)
    assert _records(tmp_path) == _records(workdir)


def _close(got, want, path=""):
    """Equal, floats to 1e-3 relative (a process with 2 CPU devices splits XLA's threads otherwise: the learner's
    sums round differently, 1e-6 relative, and the calibration figures of near-certain predictions by up to 3e-4)."""
    if isinstance(want, dict):
        assert set(got) == set(want), path
        for key in want:
            _close(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-3, abs=1e-6), path
    else:
        assert got == want, path


def test_rollouts_on_a_device_of_their_own_give_the_same_records(uninterrupted, tmp_path):
    """Sampler on the second CPU device, learner on the first: the same tokens, rewards and trees at every step
    (ledgers and tree statistics exactly), the learner's and predictor's figures to float rounding."""
    workdir, _, _, _ = uninterrupted
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    subprocess.run(_driver(tmp_path, "mesh.sampler_devices=1"), cwd=REPO, env=env, check=True, capture_output=True)
    got, want = _records(tmp_path), _records(workdir)
    assert [g["ledger"] for g in got.values()] == [w["ledger"] for w in want.values()]
    assert [g["trees"] for g in got.values()] == [w["trees"] for w in want.values()]
    _close(got, want)


def test_on_a_2x2x2_mesh_the_overlapping_run_gives_one_devices_records(uninterrupted, tmp_path):
    """Rollouts and learner on one (data, fsdp, tensor) = (2, 2, 2) mesh of 8 CPU devices, the worker's programs
    interleaved with the learner's: the same tokens, rewards and trees as one device, figures to float rounding
    (but the layout's own: rows copied across shards, padding rows in the decode buckets)."""
    workdir, _, _, _ = uninterrupted
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    subprocess.run(_driver(tmp_path, "mesh.data=2", "mesh.fsdp=2", "mesh.tensor=2"), cwd=REPO, env=env, check=True,
                   capture_output=True)
    got, want = _records(tmp_path), _records(workdir)
    assert [g["ledger"] for g in got.values()] == [w["ledger"] for w in want.values()]
    assert [g["trees"] for g in got.values()] == [w["trees"] for w in want.values()]
    crossed = [g.pop("cross_shard_rows") for g in got.values()]
    assert any(crossed)  # forks copied rows across shards; one device has no shards to cross
    for g in got.values():  # row buckets are multiples of the 4 row shards: more padding rows per decode step
        assert 0 < g.pop("slot_utilisation") <= 1
    _close(got, {step: {k: v for k, v in w.items() if k not in ("cross_shard_rows", "slot_utilisation")}
                 for step, w in want.items()})
