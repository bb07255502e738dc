"""Qwen3-14B on multi-hop QA with TRACE (the paper's headline setting).

  python experiments/train.py --config configs/qwen3_14b_multihop.py:checkpoint=/data/Qwen3-14B \
      --workdir /data/runs/qwen3_14b_trace --config.mesh.fsdp=8 --config.mesh.tensor=2 --distributed

On a pod the same command runs on every host (TPU pods and SLURM supply the rest); elsewhere add, per host,
`--coordinator_address=HOST0:1234 --num_processes=N --process_id=K`. Every process needs the checkpoint
and the data at the same path; the workdir must be shared (orbax writes each array once).
Will it fit? `python experiments/dry_run.py --config configs/qwen3_14b_multihop.py --devices 16`: on 16
v5p (95 GiB) or H100 (80 GB) devices yes (largest program 47.5 GiB in XLA-CPU's plan: decoding in waves of
32 rows, layers recomputed in the learner's backward pass); on 16 v5e (16 GiB) no, the learner step needs
25.2 GiB (README, "Scaling out"). Expected runtime: hours on 16 accelerators.
"""

from configs import qwen3_8b_multihop


def get_config(arg: str | None = None):
    c = qwen3_8b_multihop.get_config(arg, size="14b")
    c.learner.micro_batch = 8  # a multiple of data x fsdp: one sequence per fsdp shard
    c.mesh.update(data=1, fsdp=8, tensor=2)
    return c
