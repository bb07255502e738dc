"""Two CPU processes with two devices each (jax.distributed, gloo), started through the launcher, run 3
TRACE RL steps of the quickstart's `runlocal` config on a (data 2, fsdp 2) mesh spanning both, and give
what one process on the same mesh gives: held-out accuracy, every step's record (ledger, trees, learner
metrics, predictor), the exported params; each process's devices decode half of the rollouts, and each
process runs the tools of the turns its devices decoded (none twice).

The SFT checkpoint is trained once, in this process, and copied into both workdirs (the runs restore it:
in the two-process run through orbax as a global array)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file

from configs import quickstart
from tests.parallel.test_multiprocess import _free_port, distributed_env
from trace_jax.run import experiment, sft, train

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# One-operation arithmetic after 300 SFT steps: a policy that succeeds sometimes, so the steps have
# mixed trees and non-zero gradients.
OVERRIDES = {"task.source": "math", "task.max_difficulty": 1, "sft.steps": 300, "rl.steps": 3,
             "rl.max_new_tokens": 40, "learner.micro_batch": 4, "mesh.data": 2, "mesh.fsdp": 2, "eval.num_tasks": 8}


def _config():
    c = quickstart.get_config("runlocal")
    for dotted, value in OVERRIDES.items():
        section, key = dotted.split(".")
        c[section][key] = value
    return c


@pytest.fixture(scope="module")
def sft_checkpoint(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("sft"))
    sft.warm_start(experiment.build(_config(), workdir), workdir, None)
    return workdir


def _workdir(tmp_path, name, sft_checkpoint):
    workdir = tmp_path / name
    workdir.mkdir()
    for part in ("sft", "tokenizer"):
        shutil.copytree(os.path.join(sft_checkpoint, part), workdir / part)
    return workdir


def _records(workdir):
    rows = [json.loads(line) for line in open(workdir / "steps.jsonl", encoding="utf-8")]
    for row in rows:
        row.pop("timings")
    return rows


def test_two_processes_run_the_rl_steps_of_one(tmp_path, sft_checkpoint):
    port = _free_port()
    multi = _workdir(tmp_path, "two_processes", sft_checkpoint)
    flags = [f"--config.{k}={v}" for k, v in OVERRIDES.items()]
    env = {**distributed_env(tmp_path / "jax_cache"), "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    procs = [subprocess.Popen(
        [sys.executable, "experiments/train.py", "--config", "configs/quickstart.py:runlocal", "--workdir", str(multi),
         *flags, "--distributed", f"--coordinator_address=localhost:{port}", "--num_processes=2",
         f"--process_id={i}", "--initialization_timeout=120"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    single = _workdir(tmp_path, "one_process", sft_checkpoint)
    try:  # meanwhile, this process: the same mesh on 4 of its 8 devices
        reference = train.train_and_evaluate(_config(), str(single))
    finally:
        outputs = [p.communicate(timeout=400) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    summary = json.loads(outputs[0][0].strip().splitlines()[-1])  # process 0 prints the summary
    assert not [line for line in outputs[1][0].splitlines() if line.startswith("{")]  # and only process 0

    assert summary["acc_after_sft"] == reference["acc_after_sft"]
    assert summary["acc_after_rl"] == reference["acc_after_rl"]
    assert summary["rollouts_by_process"] == [reference["rollouts_by_process"][0] // 2] * 2
    got, want = _records(multi), _records(single)
    assert [r.pop("rollouts_by_process") for r in got] == [[r["ledger"]["rollouts_started"] // 2] * 2 for r in got]
    # every turn's tools ran once, on the process that decoded its row; one process alone ran them all
    turns = [r.pop("turns_by_process") for r in got]
    assert [[sum(t)] for t in turns] == [r.pop("turns_by_process") for r in want]
    assert all(min(t) > 0 for t in turns) and summary["turns_by_process"] == np.sum(turns, axis=0).tolist()
    for r in want:
        r.pop("rollouts_by_process")
    for g, w in zip(got, want):
        learner_got, learner_want = g.pop("learner"), w.pop("learner")
        assert g == w
        measured = sorted(k for k, v in learner_want.items() if v is not None)  # ppo_clip: no behaviour weights
        assert sorted(k for k, v in learner_got.items() if v is not None) == measured
        np.testing.assert_allclose([learner_got[k] for k in measured], [learner_want[k] for k in measured],
                                   rtol=1e-5, atol=1e-6)
    assert max(r["learner"]["grad_norm"] for r in _records(single)) > 0  # the steps did update the params
    exported, expected = load_file(str(multi / "export" / "model.safetensors")), \
        load_file(str(single / "export" / "model.safetensors"))
    assert exported.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(exported[name], expected[name], rtol=1e-5, atol=1e-6)
