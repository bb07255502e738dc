"""funcall on the `tiny` preset (see `multihop_tiny.py`).

  python experiments/train.py --config configs/funcall_tiny.py --workdir /tmp/funcall_tiny

Expected runtime: about 3-5 minutes on a 2-core CPU.
"""

from configs import multihop_tiny


def get_config(arg: str | None = None):
    return multihop_tiny.get_config(arg, source="funcall")
