"""math on the `tiny` preset: a few-minute CPU run of the whole pipeline on this task source.

  python experiments/train.py --config configs/math_tiny.py --workdir /tmp/math_tiny

Expected runtime: about 3-5 minutes on a 2-core CPU (SFT, RL, two evaluations).
"""

from configs import quickstart


def get_config(arg: str | None = None):
    c = quickstart.get_config(arg)
    c.model.preset = "tiny"
    c.task.source = "math"
    c.task.max_difficulty = {"multihop": 2, "math": 3, "funcall": 0}["math"]
    c.task.max_turns = {"multihop": 5, "math": 6, "funcall": 6}["math"]
    c.sft.steps = min(c.sft.steps, 400)
    c.rl.steps = min(c.rl.steps, 30)
    return c
