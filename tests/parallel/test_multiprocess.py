"""Two processes joined with jax.distributed (localhost coordinator, gloo CPU collectives) run the sharded
learner step and agree with the single-process result."""

import json
import os
import socket
import subprocess
import sys

import numpy as np

from tests.parallel.test_sharding import _losses

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def distributed_env(cache_dir) -> dict:
    """The environment of jax.distributed test processes: their own compilation cache, apart from the one
    this session shares with single-process subprocesses (the processes of one run write the same entries
    at the same moment, and their executables are built for a distributed runtime)."""
    return {**os.environ, "PYTHONPATH": REPO, "JAX_COMPILATION_CACHE_DIR": str(cache_dir)}


def test_two_processes_match_one(tmp_path):
    port = _free_port()
    worker = os.path.join(REPO, "tests", "parallel", "multiprocess_worker.py")
    env = distributed_env(tmp_path / "jax_cache")
    procs = [subprocess.Popen([sys.executable, worker, str(port), str(i), "2"], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [p.communicate(timeout=240) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert [r["devices"] for r in results] == [2, 2]
    reference, _ = _losses(None)
    for r in results:
        np.testing.assert_allclose(r["losses"], reference, rtol=2e-5, atol=1e-6)
