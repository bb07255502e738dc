"""math on the `tiny` preset (see `multihop_tiny.py`).

  python experiments/train.py --config configs/math_tiny.py --workdir /tmp/math_tiny

Runtime and results: see `multihop_tiny.py`.
"""

from configs import multihop_tiny


def get_config(arg: str | None = None):
    return multihop_tiny.get_config(arg, source="math")
