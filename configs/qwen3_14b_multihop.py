"""Qwen3-14B on multi-hop QA with TRACE (the paper's headline setting).

  python experiments/train.py --config configs/qwen3_14b_multihop.py:checkpoint=/data/Qwen3-14B \
      --workdir /data/runs/qwen3_14b_trace --distributed

On a pod the same command runs on every host (TPU pods and SLURM supply the rest); elsewhere add, per host,
`--coordinator_address=HOST0:1234 --num_processes=N --process_id=K`. Every process needs the checkpoint
and the data at the same path; the workdir must be shared (orbax writes each array once).
The mesh is fsdp 4 x tensor 4 on 16 devices. XLA:CPU's plan (`python experiments/dry_run.py --config
configs/qwen3_14b_multihop.py --devices 16`) puts every program within 16 GiB per device (learner 15.2 GiB), but
the TPU compiler does not: compiled by libtpu for v5e:4x4 (`/tmp/tpu/bin/python experiments/dry_run.py --config
configs/qwen3_14b_multihop.py --target v5e:4x4`, docs/scaling.md) the learner needs 17.84 GiB per device, so
**this config does not fit v5e-16**. The smallest v5e slice it fits is v5e:4x8 (32 chips) with the tensor axis
doubled: `--config.mesh.tensor=8` (`--target v5e:4x8 --mesh 1,4,8`: learner 10.75 GiB, every sampler program
within 7.5 GiB); on v5p or H100 the 16-device mesh fits. Expected runtime: hours on 16-32 accelerators.
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
