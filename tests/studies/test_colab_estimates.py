"""studies/benchmarks/colab_estimates.py: its learner term is the stated arithmetic, and the runtimes rank as their
peaks do."""

import json
import os
import subprocess
import sys

from trace_jax.models.presets import get_preset
from trace_jax.models.transformer import num_params

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_estimates_follow_the_stated_arithmetic():
    out = subprocess.run([sys.executable, "studies/benchmarks/colab_estimates.py", "--nothis_cpu"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    t4, v5e = result["runtimes"]["t4"], result["runtimes"]["tpu-v5e-1"]
    context = 450 + 2 * (150 + 20)
    learner = 2 * 6 * num_params(get_preset("qwen3-0.6b")) * 20 * 32 * context / (8.1e12 * 0.35)
    assert abs(t4["learner_s"] - learner) <= 1
    assert v5e["total_s"] < t4["total_s"] and t4["fits"] and v5e["fits"]
    assert "plus XLA compilation" in out
