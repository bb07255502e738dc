"""funcall on the `tiny` preset (see `multihop_tiny.py`).

  python experiments/train.py --config configs/funcall_tiny.py --workdir /tmp/funcall_tiny

Runtime and results: see `multihop_tiny.py`.
"""

from configs import multihop_tiny


def get_config(arg: str | None = None):
    return multihop_tiny.get_config(arg, source="funcall")
