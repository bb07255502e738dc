"""Sampler state (KV cache + token history + next-token logits + last hidden) and shape buckets.

A `SamplerState` row is a prefix ready to be continued: its cache holds every token so far,
`logits` are the next-token logits after the last one, `hidden` holds the success predictor's features
at the last token (the final-normed hidden state, then the residual stream after half the layers,
RMS-normalised: `transformer.middle_layers`), `pooled` the sum of the final-layer
hidden states of every prefilled (appended, not decoded) token: right after the prompt's prefill,
its length times the mean-pooled prompt state. Rows fork by one gather (`fork.py`).
Batch and length are rounded up to a few bucket sizes so a long run compiles a handful of
programs.

On a mesh (params committed to a `NamedSharding` over more than one device) the state is in the
sampling layout of `parallel/rules.py`: rows split over data x fsdp (row buckets are multiples of
that), KV heads over tensor. Every jitted program here and in `engine.py` takes the mesh as a static
argument (None on one device) and constrains the state it returns to that layout, so a state never
drifts to another layout between calls.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from trace_jax.models.cache import KVCache, init_cache
from trace_jax.models.config import ModelConfig
from trace_jax.parallel.host import to_device
from trace_jax.parallel.rules import BATCH_AXES, row_shards, state_spec


@struct.dataclass
class SamplerState:
    cache: KVCache
    tokens: jax.Array  # [B, T] int32: the token in each cache slot
    logits: jax.Array  # [B, V] float32: next-token logits after each row's last token
    hidden: jax.Array  # [B, 2D]: at each row's last token, the final-normed hidden state, then the middle layer's
    pooled: jax.Array  # [B, D] float32: sum of the final-layer hidden states of the prefilled tokens

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def capacity(self) -> int:
        return self.tokens.shape[1]


# --- the layout on a mesh --------------------------------------------------------------------

def mesh_of(tree) -> Mesh | None:
    """The mesh a pytree's arrays are laid out on (its first leaf's), None on one device: the sampler
    follows its params (and a state its own rows) onto their mesh."""
    leaf = jax.tree.leaves(tree)[0]
    sharding = getattr(leaf, "sharding", None)
    if isinstance(sharding, NamedSharding) and sharding.mesh.size > 1:
        return sharding.mesh
    return None


def map_fields(fn, state: SamplerState) -> SamplerState:
    """`fn(field name, array)` on every array of the state (the per-layer cache buffers are "k" and "v")."""
    cache = state.cache
    return SamplerState(
        cache=KVCache(k=tuple(fn("k", k) for k in cache.k), v=tuple(fn("v", v) for v in cache.v),
                      lengths=fn("lengths", cache.lengths)),
        tokens=fn("tokens", state.tokens), logits=fn("logits", state.logits), hidden=fn("hidden", state.hidden),
        pooled=fn("pooled", state.pooled))


def state_specs(state: SamplerState, mesh: Mesh) -> SamplerState:
    """The sampling layout's PartitionSpec of every field (a SamplerState of specs; shapes or arrays in)."""
    return map_fields(lambda field, x: state_spec(field, tuple(x.shape), mesh), state)


def constrain(state: SamplerState, mesh: Mesh | None) -> SamplerState:
    """Inside a jitted program: pins every field of `state` to the sampling layout (no-op without a mesh)."""
    if mesh is None:
        return state
    return map_fields(lambda field, x: jax.lax.with_sharding_constraint(
        x, NamedSharding(mesh, state_spec(field, x.shape, mesh))), state)


def put_rows(array: np.ndarray, mesh: Mesh | None) -> jax.Array:
    """A host array whose first axis is rows, placed like the state's rows (over every process's devices
    in a multi-host run: each process holds the same host array). Copied first, as in `put_replicated`."""
    host = np.array(array, copy=True)
    if mesh is None:
        return jax.device_put(host)
    return to_device(host, NamedSharding(mesh, P(BATCH_AXES, *([None] * (host.ndim - 1)))))


def put_replicated(array, mesh: Mesh | None) -> jax.Array:
    """A host value every device of the mesh holds whole (a seed, row indices). Copied first: on CPU
    `device_put` may alias a numpy buffer until the program that reads it has run, so a caller that reuses
    its array for the next call would race with the one in flight."""
    host = np.array(array, copy=True)
    return jax.device_put(host) if mesh is None else to_device(host, NamedSharding(mesh, P()))


def rows_multiple(mesh: Mesh | None) -> int:
    return 1 if mesh is None else row_shards(mesh)


def row_processes(rows: int, mesh: Mesh | None) -> np.ndarray:
    """The process whose devices decode each of `rows` rows (that of its shard's first device)."""
    if mesh is None:
        return np.full(rows, jax.process_index())
    shards = row_shards(mesh)
    first = mesh.devices.reshape(shards, -1)[:, 0]  # shard order of P(("data", "fsdp")): data-major
    return np.repeat([d.process_index for d in first], rows // shards)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def empty_state(config: ModelConfig, batch: int, capacity: int, mesh: Mesh | None = None) -> SamplerState:
    """`batch` empty rows of `capacity` slots, created on device (no host transfer), in the sampling layout."""
    return constrain(SamplerState(
        cache=init_cache(config, batch, capacity),
        tokens=jnp.zeros((batch, capacity), jnp.int32),
        logits=jnp.zeros((batch, config.vocab_size), jnp.float32),
        hidden=jnp.zeros((batch, 2 * config.hidden_size), config.jnp_dtype),
        pooled=jnp.zeros((batch, config.hidden_size), jnp.float32),
    ), mesh)


def batch_bucket(n: int, multiple: int = 1) -> int:
    """Rows are padded to the next power of two, then to a multiple of `multiple` (the mesh's row shards)."""
    rows = 1 << max(0, int(n) - 1).bit_length()
    return -(-rows // multiple) * multiple


def length_bucket(n: int, minimum: int = 64) -> int:
    """Cache capacity: 4 sizes per octave (at most 25% unused slots, which decode still reads)."""
    n = max(int(n), minimum)
    granule = max(minimum // 4, 1 << max(0, (n // 4).bit_length() - 1))
    return -(-n // granule) * granule


def chunk_bucket(n: int, maximum: int) -> int:
    """Prefill chunk width: a power of two in [16, maximum]."""
    return min(maximum, max(16, batch_bucket(n)))


def grow(state: SamplerState, capacity: int) -> SamplerState:
    """The same rows with `capacity` slots (new slots empty); used when a row would outgrow its cache. Rows
    on pages (`paged.PagedRows`) widen their token history only: their pages are taken as they are written."""
    if not isinstance(state, SamplerState):
        return state.widen(capacity)
    return _grow(state, capacity, mesh_of(state))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _grow(state: SamplerState, capacity: int, mesh: Mesh | None) -> SamplerState:
    extra = capacity - state.capacity

    def pad(x, axis):
        return jnp.pad(x, [(0, extra) if a == axis else (0, 0) for a in range(x.ndim)])

    cache = state.cache.replace(k=tuple(pad(k, 3) for k in state.cache.k), v=tuple(pad(v, 2) for v in state.cache.v))
    return constrain(state.replace(cache=cache, tokens=pad(state.tokens, 1)), mesh)
