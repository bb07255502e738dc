"""The KV cache: a plain pytree with per-row lengths, so rows can be forked by gathering a parent index.

Row b holds valid keys/values in slots [0, lengths[b]); slots past that are scratch and
never attended to. Layers are stacked on the leading axis to match the scanned decoder.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from trace_jax.models.config import ModelConfig


@struct.dataclass
class KVCache:
    k: jax.Array  # [L, B, T, K, H]
    v: jax.Array  # [L, B, T, K, H]
    lengths: jax.Array  # [B] int32: valid slots per row

    @property
    def batch_size(self) -> int:
        return self.k.shape[1]

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    def gather(self, rows: jax.Array) -> KVCache:
        """A cache whose row i is a copy of row rows[i] (tree forking: one gather, no re-prefill)."""
        return KVCache(k=jnp.take(self.k, rows, axis=1), v=jnp.take(self.v, rows, axis=1),
                       lengths=jnp.take(self.lengths, rows, axis=0))


def init_cache(config: ModelConfig, batch: int, max_len: int, dtype=None) -> KVCache:
    """An empty cache for `batch` rows of up to `max_len` tokens (size it to need: decode reads all of it)."""
    dtype = jnp.dtype(dtype) if dtype is not None else config.jnp_dtype
    shape = (config.num_layers, batch, max_len, config.num_kv_heads, config.head_dim)
    return KVCache(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), lengths=jnp.zeros((batch,), jnp.int32))
