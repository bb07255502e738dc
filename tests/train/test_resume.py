"""A run killed with SIGKILL after a checkpoint, then resumed, logs the same metrics as an uninterrupted run."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from configs import quickstart
from trace_jax import train
from trace_jax.records import read_steps
from trace_jax.run_config import ConfigError

OVERRIDES = {"model.preset": "tiny", "rl.steps": 4, "checkpoint.every": 1, "eval.num_tasks": 8, "sft.steps": 10,
             "budget.rollouts": 8, "budget.prompts": 2, "budget.candidates": 4}
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(**changes):
    c = quickstart.get_config("runlocal")
    for dotted, value in {**OVERRIDES, **changes}.items():
        section, key = dotted.split(".")
        c[section][key] = value
    return c


def _train_metrics(workdir):
    """Each step's record as JSON (NaN as null) without its timings (a killed run may have logged a
    step twice: last wins)."""
    return {r.step: dataclasses.replace(r, timings=None).to_json() for r in read_steps(str(workdir))}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    full = tmp_path_factory.mktemp("full")
    summary = train.train_and_evaluate(_config(), str(full))
    assert summary["steps"] == 4
    return full, summary


def test_sigkill_then_resume_reproduces_the_uninterrupted_run(finished, tmp_path):
    full, summary = finished

    killed = tmp_path / "killed"
    command = [sys.executable, os.path.join(REPO, "experiments", "train.py"), "--config",
               os.path.join(REPO, "configs", "quickstart.py") + ":runlocal", "--workdir", str(killed)]
    command += [f"--config.{k}={v}" for k, v in OVERRIDES.items()]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not os.path.isdir(killed / "checkpoints" / "2") and time.time() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert os.path.isdir(killed / "checkpoints" / "2")

    resumed = train.train_and_evaluate(_config(), str(killed))
    assert resumed["acc_after_rl"] == summary["acc_after_rl"]
    assert train.evaluate(_config(), str(full))["accuracy"] == summary["acc_after_rl"]
    want, got = _train_metrics(full), _train_metrics(killed)
    assert sorted(got) == [1, 2, 3, 4]
    for step in (3, 4):
        assert got[step] == want[step], step


def test_sigterm_checkpoints_and_exits_cleanly(tmp_path):
    workdir = tmp_path / "terminated"
    command = [sys.executable, os.path.join(REPO, "experiments", "train.py"), "--config",
               os.path.join(REPO, "configs", "quickstart.py") + ":runlocal", "--workdir", str(workdir)]
    command += [f"--config.{k}={v}" for k, v in {**OVERRIDES, "rl.steps": 500, "checkpoint.every": 100}.items()]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 300
    while not os.path.exists(workdir / "steps.jsonl"):
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["interrupted"] and summary["steps"] < 500
    assert os.path.isdir(workdir / "checkpoints" / str(summary["steps"]))  # saved although every=100


def test_a_checkpoint_is_resumed_only_under_the_settings_it_was_made_under(finished):
    full, summary = finished
    with pytest.raises(ConfigError, match=r"checkpoints .*learner.learning_rate: 0.0001 there, 0.5 now"):
        train.train_and_evaluate(_config(**{"learner.learning_rate": 0.5}), str(full))
    setup = train.build(_config(**{"sft.steps": 11}), str(full))
    with pytest.raises(ConfigError, match=r"SFT checkpoint .*sft.steps: 10 there, 11 now"):
        train.warm_start(setup, str(full), writer=None)
    # evaluating differently (or on another mesh) is not a different experiment
    assert train.evaluate(_config(**{"eval.num_tasks": 4}), str(full))["step"] == 4
