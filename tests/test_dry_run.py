"""experiments/dry_run.py compiles a config's programs ahead of time on fake devices and reports per-device
bytes from XLA's memory analysis; a config whose micro-batch the mesh cannot split is refused first."""

import json
import os
import subprocess
import sys

import pytest

from configs import qwen3_8b_multihop
from trace_jax import run_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_dry_run_reports_every_program_per_device():
    out = subprocess.run([sys.executable, "experiments/dry_run.py", "--config", "configs/quickstart.py:runlocal"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result["per_device_bytes"]) == {"learner", "decode", "prefill", "tree_expand"}
    assert set(result["sampling_layout"].values()) <= {"replicated", "fsdp_gathered"}
    assert all(v > 0 for v in result["per_device_bytes"].values()) and all(result["fits"].values())
    assert "estimate (models/memory.py" in out.stdout


def test_a_micro_batch_the_mesh_cannot_split_is_named(tmp_path):
    (tmp_path / "ckpt").mkdir()
    c = qwen3_8b_multihop.get_config(f"checkpoint={tmp_path / 'ckpt'}")
    c.learner.micro_batch = 4
    with pytest.raises(run_config.ConfigError, match=r"'learner\.micro_batch'=4 and 'mesh' \(data x fsdp = 8\) "
                                                     r"conflict.*multiple of 8"):
        run_config.from_config_dict(c)
