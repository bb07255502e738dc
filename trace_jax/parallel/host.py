"""Host <-> device for arrays that may span processes (multi-host runs).

Every process holds the same host data at the same point of a step: the allocation, the trees and
the learner batch are decided identically on each (same predictor state, same keys, the same rollout
outcomes read back from the global arrays). So placing a host array on a sharding that spans
processes is each process handing over the slices of its own devices, and reading a global array
back is an all-gather to every process. On one process these are `jax.device_put`/`jax.device_get`.

Process-local copies (the SFT params, the predictor's state, identical on every process) become
global, replicated arrays where orbax needs them (`replicated_global`), and back (`local_copy`).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P


def _spans_processes(sharding) -> bool:
    return sharding is not None and not sharding.is_fully_addressable


def to_device(tree, shardings=None):
    """`jax.device_put(tree, shardings)` that also places on shardings spanning processes: from a host
    array (or a process-local array) every process holds, and by a jitted reshard from a global array."""
    if shardings is None or jax.process_count() == 1:
        return jax.device_put(tree, shardings)

    def put(x, sharding):
        if not _spans_processes(sharding):
            return jax.device_put(x, sharding)
        if isinstance(x, jax.Array) and _spans_processes(x.sharding):
            return x if x.sharding == sharding else jax.jit(lambda a: a, out_shardings=sharding)(x)
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda x: put(x, shardings), tree)
    return jax.tree.map(put, tree, shardings)


def to_host(tree):
    """`jax.device_get` that also reads arrays spanning processes (gathered to every process)."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    def get(x):
        if isinstance(x, jax.Array) and _spans_processes(x.sharding):
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return jax.device_get(x)

    return jax.tree.map(get, tree)


def replicated_global(tree):
    """In a multi-process run, process-local leaves (identical on every process) as global arrays
    replicated over every device; other leaves, and every leaf on one process, unchanged."""
    if jax.process_count() == 1:
        return tree
    everywhere = NamedSharding(jax.sharding.Mesh(np.asarray(jax.devices()), ("all",)), P())

    def lift(x):
        if isinstance(x, jax.Array) and not _spans_processes(x.sharding):
            return to_device(np.asarray(jax.device_get(x)), everywhere)
        return x

    return jax.tree.map(lift, tree)


def local_copy(x):
    """A fully replicated global array's value as a process-local array (this process's first shard)."""
    if isinstance(x, jax.Array) and _spans_processes(x.sharding):
        return jax.device_put(x.addressable_data(0), jax.local_devices()[0])
    return x
