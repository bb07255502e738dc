"""Qwen3-14B on multi-hop QA with TRACE (the paper's headline setting).

  python experiments/train.py --config configs/qwen3_14b_multihop.py:checkpoint=/data/Qwen3-14B \
      --workdir /data/runs/qwen3_14b_trace --config.mesh.fsdp=8 --config.mesh.tensor=2 --distributed

Expected runtime: hours on 16 accelerators.
"""

from configs import qwen3_8b_multihop


def get_config(arg: str | None = None):
    c = qwen3_8b_multihop.get_config(arg, size="14b")
    c.learner.micro_batch = 8  # a multiple of data x fsdp: one sequence per fsdp shard
    c.mesh.update(data=1, fsdp=8, tensor=2)
    return c
