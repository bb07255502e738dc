"""The comparison launcher fails before compute on a bad config or flag, naming the culprit."""

import os
import subprocess
import sys
import pytest

pytestmark = pytest.mark.slow  # launcher subprocesses: `python -m pytest -m slow`

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _launch(tmp_path, *args):
    command = [sys.executable, os.path.join(REPO, "experiments", "compare.py"), "--config",
               os.path.join(REPO, "configs", "compare_multihop.py") + ":runlocal", "--workdir", str(tmp_path / "w"),
               *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_bad_run_field_is_named_with_its_variant(tmp_path):
    out = _launch(tmp_path, "--config.budget.unit=seconds")
    assert out.returncode != 0
    assert "comparison variant 'grpo', seed 0" in out.stderr and "budget" in out.stderr
    assert not os.path.exists(tmp_path / "w" / "shared" / "sft")  # nothing was trained


def test_bad_ablation_flag_is_refused(tmp_path):
    out = _launch(tmp_path, "--ablation=colour")
    assert out.returncode != 0 and "ablation" in out.stderr
