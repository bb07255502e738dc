"""Runs tests/parallel/mesh/ (the sampling layout, a TRACE step on a mesh, multi-host RL) in its own pytest
process (why: tests/parallel/conftest.py) and fails with its report when any of them fails."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # the mesh suite, in its own process: `python -m pytest -m slow`

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_mesh_tests_pass_in_their_own_process():
    env = {**os.environ, "TRACE_JAX_MESH_SUITE": "1", "PYTHONPATH": REPO}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/parallel/mesh"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert " passed" in out.stdout.splitlines()[-1] and "failed" not in out.stdout.splitlines()[-1]
