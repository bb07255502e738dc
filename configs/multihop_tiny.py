"""Multi-hop QA on the `tiny` preset: a few-minute CPU run of the whole pipeline.

  python experiments/train.py --config configs/multihop_tiny.py --workdir /tmp/multihop_tiny

Expected runtime: about 3-5 minutes on a 2-core CPU (SFT, RL, two evaluations).
`math_tiny.py` and `funcall_tiny.py` are the same on the other task sources.
"""

from configs import quickstart

_PER_SOURCE = {"multihop": dict(max_difficulty=2, max_turns=5), "math": dict(max_difficulty=3, max_turns=6),
               "funcall": dict(max_difficulty=0, max_turns=6)}


def get_config(arg: str | None = None, source: str = "multihop"):
    c = quickstart.get_config(arg)
    c.model.preset = "tiny"
    c.task.source = source
    c.task.update(_PER_SOURCE[source])
    c.sft.steps = min(c.sft.steps, 400)
    c.rl.steps = min(c.rl.steps, 30)
    return c
