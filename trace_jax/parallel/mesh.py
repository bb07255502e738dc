"""A device mesh from config, and multi-host initialisation."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

AXES = ("data", "fsdp", "tensor")


def make_mesh(data: int = 1, fsdp: int = 1, tensor: int = 1, devices=None) -> Mesh:
    """A (data, fsdp, tensor) mesh over the first data*fsdp*tensor devices (all processes' devices)."""
    devices = list(jax.devices() if devices is None else devices)
    need = data * fsdp * tensor
    if need > len(devices):
        raise ValueError(f"mesh data x fsdp x tensor = {data} x {fsdp} x {tensor} = {need} needs more than the "
                         f"{len(devices)} available devices")
    return Mesh(np.asarray(devices[:need]).reshape(data, fsdp, tensor), AXES)


def initialize_distributed(coordinator: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None) -> None:
    """`jax.distributed.initialize` (arguments from the cluster environment when omitted); on CPU the
    collectives go through gloo."""
    if jax.config.jax_platforms in (None, "", "cpu") or not jax.config.jax_platforms:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)
