"""Qwen3-14B on multi-hop QA with TRACE (the paper's headline setting).

  python experiments/train.py --config configs/qwen3_14b_multihop.py:checkpoint=/data/Qwen3-14B \
      --workdir /data/runs/qwen3_14b_trace --distributed

On a pod the same command runs on every host (TPU pods and SLURM supply the rest); elsewhere add, per host,
`--coordinator_address=HOST0:1234 --num_processes=N --process_id=K`. Every process needs the checkpoint
and the data at the same path; the workdir must be shared (orbax writes each array once).
The mesh is fsdp 4 x tensor 4 on 16 devices: `python experiments/dry_run.py --config
configs/qwen3_14b_multihop.py --devices 16` plans every program within 16 GiB per device there (v5e; the
learner step, each layer recomputed in the backward pass, is the largest at 15.2 GiB; decoding in waves of 32),
where fsdp 8 x tensor 2 needs 19.8 GiB for the learner (README, "Scaling out"); on v5p or H100 either mesh
fits. Expected runtime: hours on 16 accelerators.
"""

from configs import qwen3_8b_multihop


def on_16_devices(c):
    """fsdp 4 x tensor 4: the tensor axis splits each layer's activations 4 ways (fsdp 8 x tensor 2 does not fit
    a 16 GiB device); micro-batches a multiple of data x fsdp, one sequence per fsdp shard."""
    c.learner.micro_batch = 4
    c.mesh.update(data=1, fsdp=4, tensor=4)
    return c


def get_config(arg: str | None = None):
    return on_16_devices(qwen3_8b_multihop.get_config(arg, size="14b"))
