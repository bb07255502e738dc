"""The staleness study's readout (`studies/staleness/readout.py`) reads the committed runs: every arm, and the
overlapping arms' step records carry the lag they were sampled with."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_readout_reads_every_committed_run_of_the_staleness_study():
    out = subprocess.run([sys.executable, os.path.join(REPO, "studies/staleness/readout.py")], capture_output=True,
                         text=True, check=True, timeout=120)
    line = json.loads(out.stdout.splitlines()[-1])
    assert set(line["arms"]) == {"trace_s0", "trace_s1", "grpo_s0", "grpo_s1"}
    assert line["arms"]["trace_s0"]["seeds"], "the study's first run is committed"
    for arm, figures in line["arms"].items():
        if figures["seeds"]:  # 60 steps: lag 0 at step 1, then the arm's max_staleness
            assert figures["policy_lag"] == round(59 / 60 if arm.endswith("s1") else 0, 6), arm
