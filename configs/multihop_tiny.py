"""multihop on the `tiny` preset: a few-minute CPU run of the whole pipeline on this task source.

  python experiments/train.py --config configs/multihop_tiny.py --workdir /tmp/multihop_tiny

Expected runtime: about 3-5 minutes on a 2-core CPU (SFT, RL, two evaluations).
"""

from configs import quickstart


def get_config(arg: str | None = None):
    c = quickstart.get_config(arg)
    c.model.preset = "tiny"
    c.task.source = "multihop"
    c.task.max_difficulty = {"multihop": 2, "math": 3, "funcall": 0}["multihop"]
    c.task.max_turns = {"multihop": 5, "math": 6, "funcall": 6}["multihop"]
    c.sft.steps = min(c.sft.steps, 400)
    c.rl.steps = min(c.rl.steps, 30)
    return c
