"""The allocator comparison on multi-step arithmetic (calculator tool): `compare_multihop.py` with the
math source's episode limits (up to 3 steps, 6 turns) on the same `mini` preset and budget.

  python experiments/compare.py --config configs/compare_math.py --workdir /tmp/compare_math

See compare_multihop.py for `:runlocal` and the ablation flags. Expected runtime on a 2-core CPU,
SFT included: about 50 min; `:runlocal` about 18 min. Measurements: README.
"""

from configs import compare_multihop, multihop_tiny, quickstart


def get_config(arg: str | None = None):
    return compare_multihop.get_config(arg, base=lambda: multihop_tiny.use_source(quickstart.base(), "math"))
