"""Launcher: the supervised warm start alone (`trace_jax.run.sft.sft`).

  python experiments/sft.py --config configs/quickstart.py --workdir /tmp/quickstart

The last line printed is one JSON object with the headline figures.
"""

from launch import run

if __name__ == "__main__":
    run("sft.sft")
