"""Launcher: SFT warm start then RL (`trace_jax.run.train.train_and_evaluate`).

  python experiments/train.py --config configs/quickstart.py --workdir /tmp/quickstart
  python experiments/train.py --config configs/quickstart.py:runlocal --workdir /tmp/q --config.allocator.name=grpo

The last line printed is one JSON object with the headline figures.
"""

from launch import run

if __name__ == "__main__":
    run("train.train_and_evaluate")
