"""Launcher: held-out evaluation of the latest checkpoint in a workdir (`trace_jax.run.train.evaluate`).

  python experiments/evaluate.py --config configs/quickstart.py --workdir /tmp/quickstart

The last line printed is one JSON object with the headline figures.
"""

from launch import run

if __name__ == "__main__":
    run("train.evaluate")
