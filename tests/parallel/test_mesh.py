"""Meshes and multi-host start-up: explicit multi-host flags come together or not at all, malformed ones are
named before any process waits; importing the package (configs, envs) leaves JAX's backend unstarted, so
`jax.distributed.initialize` can still run after the launcher has loaded a config."""

import os
import subprocess
import sys

import pytest

from trace_jax.parallel.mesh import check_distributed, make_mesh

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("args,message", [
    ((None, 2, None), r"--num_processes given without --coordinator_address, --process_id"),
    (("localhost:1234", None, None), r"--coordinator_address given without --num_processes, --process_id"),
    (("localhost", 2, 0), r"expected host:port"),
    (("localhost:99999", 2, 0), r"expected host:port"),
    (("localhost:1234", 2, 2), r"--process_id=2 must lie in \[0, --num_processes=2\)"),
])
def test_malformed_multi_host_flags_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        check_distributed(*args)


def test_complete_or_absent_flags_pass():
    check_distributed(None, None, None)
    check_distributed("10.0.0.1:1234", 4, 3)


def test_a_mesh_larger_than_the_devices_is_named():
    with pytest.raises(ValueError, match="needs more than the 8 available devices"):
        make_mesh(4, 4, 1)


def test_loading_a_config_leaves_the_backend_unstarted():
    code = ("import jax._src.xla_bridge as xb, configs.quickstart, trace_jax.run.train, trace_jax.envs; "
            "configs.quickstart.get_config(); print(xb.backends_are_initialized())")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr[-1500:]


@pytest.mark.slow
def test_the_launcher_names_a_missing_coordinator_before_compute(tmp_path):
    out = subprocess.run([sys.executable, "experiments/train.py", "--config", "configs/quickstart.py:runlocal",
                          "--workdir", str(tmp_path), "--distributed", "--num_processes=2"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "--num_processes given without --coordinator_address" in out.stderr
    assert not os.listdir(tmp_path)
