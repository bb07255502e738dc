"""Two processes joined with jax.distributed (localhost coordinator, gloo CPU collectives) run the sharded
learner step, and grow rollout trees with each process running the tools of its own rows only, and agree
with the single-process result."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.parallel.test_sharding import _losses

pytestmark = pytest.mark.slow  # several processes joined by jax.distributed: `python -m pytest -m slow`

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


def _run_workers(script: str, tmp_path, *args, timeout: int = 240) -> list[dict]:
    port = _free_port()
    env = distributed_env(tmp_path / "jax_cache")
    procs = [subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "parallel", script), str(port), str(i), "2",
                               *map(str, args)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    outputs = [p.communicate(timeout=timeout) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


def test_two_processes_grow_the_trees_of_one_and_split_the_tools(tmp_path, tiny_setup):
    """Greedy multi-turn trees with branching from turn boundaries on a (data 2) mesh over two processes,
    continuously batched with the tools in a worker thread: each process runs the turns (parsing, tools,
    scoring) of the rows its device decodes and receives the others' results, and both hold the trees one
    process grows alone."""
    from tests.rollout.test_continuous import grow, leaf_paths
    from trace_jax.rollout.continuous import Batching

    engine, trees, _ = grow(tiny_setup, Batching(), temperature=0.0)
    want = json.loads(json.dumps(leaf_paths(trees)))
    turns = engine.counters.turns_by_process[0]
    assert turns > engine.ledger.rollouts_started  # multi-turn: more turns than rollouts
    got = _run_workers("rollout_worker.py", tmp_path, tmp_path / "tokenizer")
    assert [g["leaves"] for g in got] == [want, want]
    assert got[0]["turns_by_process"] == got[1]["turns_by_process"]
    split = got[0]["turns_by_process"]
    assert sum(split) == turns and min(split) > 0, split  # every turn run once, by one of the processes
    assert got[0]["tool_errors"] == got[1]["tool_errors"] == dict(engine.counters.tool_errors)
    assert got[0]["tool_calls"] == got[1]["tool_calls"] == engine.ledger.tool_calls
