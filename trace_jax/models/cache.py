"""The KV cache: a plain pytree with per-row lengths, so rows can be forked by gathering a parent index.

Row b holds valid keys/values in slots [0, lengths[b]); slots past that are scratch and
never attended to. One buffer per layer, so a decode step scatters its new keys into each
buffer in place and attends to it without slicing a stacked array (a copy per layer on CPU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from trace_jax.models.config import ModelConfig


@struct.dataclass
class KVCache:
    k: tuple[jax.Array, ...]  # L x [B, K, H, T]: laid out for attention without transposes
    v: tuple[jax.Array, ...]  # L x [B, K, T, H]
    lengths: jax.Array  # [B] int32: valid slots per row

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[0]

    @property
    def max_len(self) -> int:
        return self.v[0].shape[2]

    def gather(self, rows: jax.Array) -> KVCache:
        """A cache whose row i is a copy of row rows[i] (tree forking: one gather, no re-prefill)."""
        return jax.tree.map(lambda x: jnp.take(x, rows, axis=0), self)


def init_cache(config: ModelConfig, batch: int, max_len: int, dtype=None) -> KVCache:
    """An empty cache for `batch` rows of up to `max_len` tokens (size it to need: decode reads all of it)."""
    dtype = jnp.dtype(dtype) if dtype is not None else config.jnp_dtype
    k_shape = (batch, config.num_kv_heads, config.head_dim, max_len)
    v_shape = (batch, config.num_kv_heads, max_len, config.head_dim)
    layers = range(config.num_layers)
    return KVCache(k=tuple(jnp.zeros(k_shape, dtype) for _ in layers),
                   v=tuple(jnp.zeros(v_shape, dtype) for _ in layers), lengths=jnp.zeros((batch,), jnp.int32))
