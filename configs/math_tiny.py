"""math on the `tiny` preset (see `multihop_tiny.py`).

  python experiments/train.py --config configs/math_tiny.py --workdir /tmp/math_tiny

Expected runtime: about 3-5 minutes on a 2-core CPU.
"""

from configs import multihop_tiny


def get_config(arg: str | None = None):
    return multihop_tiny.get_config(arg, source="math")
