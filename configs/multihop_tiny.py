"""Multi-hop QA on the `tiny` preset: a few-minute CPU run of the whole pipeline.

  python experiments/train.py --config configs/multihop_tiny.py --workdir /tmp/multihop_tiny

Pipeline runs on each task source with the `tiny` model (139k params): they exercise every stage,
they are not tuned for accuracy. `math_tiny.py` and `funcall_tiny.py` are the same on the other
sources. Expected runtime on a 2-core CPU: a few minutes each (measurements: README, "Training runs").
"""

from configs import quickstart
from trace_jax.config import files

_PER_SOURCE = {"multihop": dict(max_difficulty=2, max_turns=5), "math": dict(max_difficulty=3, max_turns=6),
               "funcall": dict(max_difficulty=0, max_turns=6)}
_SFT_MAX_LEN = {"multihop": 512, "math": 512, "funcall": 1024}


def use_source(c, source: str):
    """Points a quickstart-shaped config at another synthetic task source, with that source's episode limits."""
    files.use_source(c, source, **_PER_SOURCE[source])
    c.sft.max_len = _SFT_MAX_LEN[source]
    return c


def get_config(arg: str | None = None, source: str = "multihop"):
    c = use_source(quickstart.base(arg), source)
    c.model.preset = "tiny"
    c.sft.steps = min(c.sft.steps, 400)
    c.rl.steps = min(c.rl.steps, 30)
    return c
