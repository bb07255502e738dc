"""Sampler state (KV cache + token history + next-token logits + last hidden) and shape buckets.

A `SamplerState` row is a prefix ready to be continued: its cache holds every token so far,
`logits` are the next-token logits after the last one, `hidden` is the final-layer hidden
state at the last token (the success predictor's feature), `pooled` the sum of the final-layer
hidden states of every prefilled (appended, not decoded) token: right after the prompt's prefill,
its length times the mean-pooled prompt state. Rows fork by one gather.
Batch and length are rounded up to a few bucket sizes so a long run compiles a handful of
programs.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from trace_jax.models.cache import KVCache, init_cache
from trace_jax.models.config import ModelConfig


@struct.dataclass
class SamplerState:
    cache: KVCache
    tokens: jax.Array  # [B, T] int32: the token in each cache slot
    logits: jax.Array  # [B, V] float32: next-token logits after each row's last token
    hidden: jax.Array  # [B, D]: final-layer hidden state at each row's last token
    pooled: jax.Array  # [B, D] float32: sum of the final-layer hidden states of the prefilled tokens

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def capacity(self) -> int:
        return self.tokens.shape[1]


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def empty_state(config: ModelConfig, batch: int, capacity: int) -> SamplerState:
    """`batch` empty rows of `capacity` slots, created on device (no host transfer)."""
    return SamplerState(
        cache=init_cache(config, batch, capacity),
        tokens=jnp.zeros((batch, capacity), jnp.int32),
        logits=jnp.zeros((batch, config.vocab_size), jnp.float32),
        hidden=jnp.zeros((batch, config.hidden_size), config.jnp_dtype),
        pooled=jnp.zeros((batch, config.hidden_size), jnp.float32),
    )


def batch_bucket(n: int) -> int:
    """Rows are padded to the next power of two."""
    return 1 << max(0, int(n) - 1).bit_length()


def length_bucket(n: int, minimum: int = 64) -> int:
    """Cache capacity: 4 sizes per octave (at most 25% unused slots, which decode still reads)."""
    n = max(int(n), minimum)
    granule = max(minimum // 4, 1 << max(0, (n // 4).bit_length() - 1))
    return -(-n // granule) * granule


def chunk_bucket(n: int, maximum: int) -> int:
    """Prefill chunk width: a power of two in [16, maximum]."""
    return min(maximum, max(16, batch_bucket(n)))


@jax.jit
def gather_rows(state: SamplerState, rows: jax.Array) -> SamplerState:
    """Row i of the result is a copy of row rows[i]: one gather forks prefixes to branches."""
    take = lambda x: jnp.take(x, rows, axis=0)  # noqa: E731
    return SamplerState(cache=state.cache.gather(rows), tokens=take(state.tokens), logits=take(state.logits),
                        hidden=take(state.hidden), pooled=take(state.pooled))


@functools.partial(jax.jit, static_argnums=1)
def grow(state: SamplerState, capacity: int) -> SamplerState:
    """The same rows with `capacity` slots (new slots empty); used when a row would outgrow its cache."""
    extra = capacity - state.capacity

    def pad(x, axis):
        return jnp.pad(x, [(0, extra) if a == axis else (0, 0) for a in range(x.ndim)])

    cache = state.cache.replace(k=tuple(pad(k, 3) for k in state.cache.k), v=tuple(pad(v, 2) for v in state.cache.v))
    return state.replace(cache=cache, tokens=pad(state.tokens, 1))


def concat_states(states: list[SamplerState]) -> SamplerState:
    """Rows of several states in one (capacities grown to the largest), for one batched fork."""
    if len(states) == 1:
        return states[0]
    capacity = max(s.capacity for s in states)
    grown = [s if s.capacity == capacity else grow(s, capacity) for s in states]
    merged = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *grown)
    rows = merged.batch_size
    if rows == batch_bucket(rows):
        return merged
    index = np.zeros((batch_bucket(rows),), np.int32)  # pad rows copy row 0
    index[:rows] = np.arange(rows)
    return gather_rows(merged, jax.device_put(index))
