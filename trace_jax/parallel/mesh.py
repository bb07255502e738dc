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


def check_distributed(coordinator: str | None, num_processes: int | None, process_id: int | None) -> None:
    """Explicit multi-host arguments come together (or not at all: the cluster environment then supplies
    them); raises ValueError naming what is missing or out of range, before any process waits on another."""
    given = {"--coordinator_address": coordinator, "--num_processes": num_processes, "--process_id": process_id}
    missing = [k for k, v in given.items() if v is None]
    if len(missing) not in (0, 3):
        raise ValueError(f"multi-host flags come together: {', '.join(k for k in given if k not in missing)} given "
                         f"without {', '.join(missing)} (or give none of them to read the cluster environment, "
                         "as on TPU pods and SLURM)")
    if coordinator is None:
        return
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--coordinator_address={coordinator!r}: expected host:port, e.g. 10.0.0.1:1234")
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ValueError(f"--process_id={process_id} must lie in [0, --num_processes={num_processes})")


def initialize_distributed(coordinator: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None, timeout_s: int = 300, heartbeat_s: int = 100) -> None:
    """`jax.distributed.initialize` (arguments from the cluster environment when omitted); on CPU the
    collectives go through gloo. A process whose peers do not all join within `timeout_s`, or whose peer
    stops sending heartbeats for `heartbeat_s` (it died), exits with JAX's error instead of waiting forever."""
    check_distributed(coordinator, num_processes, process_id)
    if jax.config.jax_platforms in (None, "", "cpu") or not jax.config.jax_platforms:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id,
                               initialization_timeout=timeout_s, heartbeat_timeout_seconds=heartbeat_s)
