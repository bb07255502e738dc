"""A killed run resumes to the same results: SIGKILL at random points, SIGTERM during RL and during
SFT (both checkpoint and exit cleanly), settings checked against the checkpoint, and the summary,
step log and metrics of a resumed run are those of an uninterrupted one."""

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from configs import quickstart
from trace_jax.config.schema import ConfigError
from trace_jax.rollout.continuous import Batching
from trace_jax.run import experiment, sft, train
from trace_jax.run.checkpointing import Checkpointer
from trace_jax.run.metrics import MetricWriter, read_metrics
from trace_jax.run.records import read_steps

pytestmark = pytest.mark.slow  # full runs killed and resumed: `python -m pytest -m slow`

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


@pytest.fixture(scope="module")
def subprocess_env(tmp_path_factory):
    """The killed and resumed processes share one compilation cache: each start compiles less."""
    return {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path_factory.mktemp("jax_cache")),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def _command(workdir, **changes):
    command = [sys.executable, os.path.join(REPO, "experiments", "train.py"), "--config",
               os.path.join(REPO, "configs", "quickstart.py") + ":runlocal", "--workdir", str(workdir)]
    return command + [f"--config.{k}={v}" for k, v in {**OVERRIDES, **changes}.items()]


def test_sigkill_at_three_random_points_then_resume_reproduces_the_uninterrupted_run(finished, tmp_path,
                                                                                    subprocess_env):
    """Three processes are SIGKILLed at seeded random points: a random moment (0-2 s) after a randomly
    chosen milestone (SFT saved, step n logged), wherever that lands: in a rollout, a learner step, a
    checkpoint write, an evaluation. A last run finishes; records, accuracy and summary must match."""
    full, summary = finished
    killed = tmp_path / "killed"
    rng = random.Random(21)
    milestones = sorted(rng.sample([0, 1, 2, 3], 3))  # 0: the SFT checkpoint exists; n: step n is logged
    reached = {0: lambda: bool(Checkpointer(str(killed / "sft")).steps()) if (killed / "sft").is_dir() else False}
    kills = []
    for milestone in milestones:
        proc = subprocess.Popen(_command(killed), cwd=REPO, env=subprocess_env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        done = reached.get(milestone, lambda: len(read_steps(str(killed))) >= milestone)
        deadline = time.time() + 300
        while proc.poll() is None and not done() and time.time() < deadline:
            time.sleep(0.05)
        jitter = rng.uniform(0.0, 2.0)
        try:
            proc.wait(timeout=jitter)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills.append((milestone, round(jitter, 2)))
    assert len(kills) == 3, kills
    resumed = train.train_and_evaluate(_config(), str(killed))
    assert resumed["acc_after_rl"] == summary["acc_after_rl"], kills
    assert resumed["effective_ratio"] == summary["effective_ratio"], kills  # the whole run's, not the last part's
    assert train.evaluate(_config(), str(full))["accuracy"] == summary["acc_after_rl"]
    want, got = _train_metrics(full), _train_metrics(killed)
    assert got == want, kills
    lines = [json.loads(line) for line in open(killed / "steps.jsonl")]
    assert sorted(r["step"] for r in lines) == [1, 2, 3, 4], kills  # each step logged once
    evals = [row["step"] for row in read_metrics(str(killed)) if "eval/accuracy" in row]
    assert sorted(evals) == sorted(set(evals)), kills


def test_sigterm_during_sft_checkpoints_it_and_the_resumed_sft_ends_where_an_uninterrupted_one_does(
        finished, tmp_path, monkeypatch):
    full, _ = finished
    calls = {"n": 0}
    real_step = sft.sft_step

    def step_then_signal(*args):
        calls["n"] += 1
        if calls["n"] == 4:
            os.kill(os.getpid(), signal.SIGTERM)  # what a preemption sends, mid-SFT
        return real_step(*args)

    monkeypatch.setattr(sft, "sft_step", step_then_signal)
    stopped = train.train_and_evaluate(_config(), str(tmp_path))
    assert stopped == {"interrupted": True, "stage": "sft", "steps": 0}
    assert Checkpointer(str(tmp_path / "sft")).steps() == [4]
    monkeypatch.setattr(sft, "sft_step", real_step)

    setup = experiment.build(_config(), str(tmp_path))
    resumed = sft.warm_start(setup, str(tmp_path), MetricWriter(str(tmp_path)))
    uninterrupted = sft.warm_start(experiment.build(_config(), str(full)), str(full), writer=None)  # restored
    jax.tree.map(np.testing.assert_array_equal, resumed, uninterrupted)
    sft_rows = [row["step"] for row in read_metrics(str(tmp_path)) if "sft/loss" in row]
    assert sft_rows == sorted(set(sft_rows))


def test_sigterm_during_the_last_sft_step_saves_sft_and_stops_before_rl(tmp_path, monkeypatch):
    calls = {"n": 0}
    real_step = sft.sft_step

    def step_then_signal(*args):
        calls["n"] += 1
        if calls["n"] == OVERRIDES["sft.steps"]:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_step(*args)

    monkeypatch.setattr(sft, "sft_step", step_then_signal)
    stopped = train.train_and_evaluate(_config(), str(tmp_path))
    assert stopped["interrupted"] and stopped["stage"] == "sft"
    assert Checkpointer(str(tmp_path / "sft")).steps() == [OVERRIDES["sft.steps"]]
    assert not os.path.exists(tmp_path / "steps.jsonl")  # no RL step ran


def test_periodic_sft_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setattr(sft, "SFT_CHECKPOINT_SECONDS", 0.0)
    saved = []
    real_save = Checkpointer.save
    monkeypatch.setattr(Checkpointer, "save", lambda self, step, *a: (saved.append(step), real_save(self, step, *a)))
    sft.warm_start(experiment.build(_config(), str(tmp_path)), str(tmp_path), writer=None)
    assert saved == list(range(1, 11))  # every step (partial), then the finished SFT at step 10


def test_sigterm_checkpoints_and_exits_cleanly(tmp_path, subprocess_env):
    workdir = tmp_path / "terminated"
    command = _command(workdir, **{"rl.steps": 500, "checkpoint.every": 100})
    proc = subprocess.Popen(command, cwd=REPO, env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
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


def test_a_stop_during_the_export_resumes_with_every_metrics_row_once(finished, tmp_path, monkeypatch):
    """The final evaluation is logged after the last checkpoint and before the export: a run stopped in the export
    resumes at the last step, evaluates again and logs that row once, as an uninterrupted run does."""
    real_save = train.hf_io.save

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt("stopped during the export")

    monkeypatch.setattr(train.hf_io, "save", stopped)
    with pytest.raises(KeyboardInterrupt):
        train.train_and_evaluate(_config(), str(tmp_path))
    monkeypatch.setattr(train.hf_io, "save", real_save)
    summary = train.train_and_evaluate(_config(), str(tmp_path))
    full, full_summary = finished
    rows = lambda w: [(m["step"], sorted(k for k in m if k.startswith("eval/"))) for m in read_metrics(str(w))  # noqa: E731
                      if any(k.startswith("eval/") for k in m)]
    assert rows(tmp_path) == rows(full) and summary["acc_after_rl"] == full_summary["acc_after_rl"]


def test_a_checkpoint_is_resumed_only_under_the_settings_it_was_made_under(finished):
    full, summary = finished
    with pytest.raises(ConfigError, match=r"checkpoints .*learner.learning_rate: 0.0001 there, 0.5 now"):
        train.train_and_evaluate(_config(**{"learner.learning_rate": 0.5}), str(full))
    setup = experiment.build(_config(**{"sft.steps": 11}), str(full))
    with pytest.raises(ConfigError, match=r"SFT checkpoint .*sft.steps: 10 there, 11 now"):
        sft.warm_start(setup, str(full), writer=None)
    # evaluating differently (or on another mesh) is not a different experiment
    assert train.evaluate(_config(**{"eval.num_tasks": 4}), str(full))["step"] == 4


def test_rl_steps_below_the_checkpoint_step_is_an_error(finished):
    full, _ = finished
    with pytest.raises(ConfigError, match=r"'rl\.steps'=2 is below the step of the checkpoint to resume \(4"):
        train.train_and_evaluate(_config(**{"rl.steps": 2}), str(full))


def test_a_non_finite_update_stops_the_run_naming_the_step_and_exports_nothing(finished, tmp_path, monkeypatch):
    full, _ = finished
    real = train.learner.train_step
    calls = {"n": 0}

    def poisoned_on_the_second_step(config, loss, optimizer, params, opt_state, batch):
        calls["n"] += 1
        if calls["n"] == 2:
            batch = {**batch, "advantages": np.full_like(batch["advantages"], np.nan)}
        return real(config, loss, optimizer, params, opt_state, batch)

    monkeypatch.setattr(train.learner, "train_step", poisoned_on_the_second_step)
    workdir = tmp_path / "nan"
    os.makedirs(workdir)
    os.symlink(full / "sft", workdir / "sft")  # the same SFT start
    with pytest.raises(train.learner.NonFiniteError, match=r"RL step 2 .*last checkpoint, step 1"):
        train.train_and_evaluate(_config(), str(workdir))
    assert not os.path.exists(workdir / "export")
    assert Checkpointer(str(workdir / "checkpoints")).steps() == [1]



def test_the_decode_schedule_reaches_the_rollout_engine(tmp_path):
    """`rl.decode_chunk` / `decode_slots` / `overlap_tools` / `keep_prefixes` build the policy's `Batching` (the
    schedules sample the same trees: tests/rollout/test_continuous.py; a run resumes under another:
    RESUMABLE_SETTINGS)."""
    changes = {"rl.decode_chunk": 3, "rl.decode_slots": 4, "rl.overlap_tools": False, "rl.keep_prefixes": False}
    assert experiment.build(_config(**changes), str(tmp_path)).policy().batching == Batching(3, 4, overlap_tools=False,
                                                                                        keep_prefixes=False)
    assert experiment.build(_config(), str(tmp_path)).policy().batching == Batching()


def test_two_runs_on_one_machine_are_bit_identical(finished, tmp_path):
    """The same config trained twice in one process on one machine: every step record (wall times aside), the
    metrics and the exported weights are identical (another machine's float arithmetic may not be:
    docs/results.md, "Does a seed reproduce?")."""
    from safetensors.numpy import load_file

    full, full_summary = finished
    summary = train.train_and_evaluate(_config(), str(tmp_path))
    assert _train_metrics(tmp_path) == _train_metrics(full)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "time"} for r in rows]  # noqa: E731
    assert strip(read_metrics(str(tmp_path))) == strip(read_metrics(str(full)))
    a, b = (load_file(os.path.join(w, "export", "model.safetensors")) for w in (tmp_path, full))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert {k: v for k, v in summary.items() if not k.endswith("_s")} == \
        {k: v for k, v in full_summary.items() if not k.endswith("_s")}
