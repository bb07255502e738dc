"""Attention kernels of the full-sequence and cached passes and the implicit causal mask (also the packed
trees' ancestor-or-self rule): einsum attention, its query-blocked scan for long sequences, causal blocks
for long packed rows, and the fused `jax.nn.dot_product_attention` path for GPUs. Shapes as in `transformer.py`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

MASKED = -1e30  # finite, so a row with nothing to attend to gives a uniform (not NaN) softmax
# A full-sequence pass (the learner's) longer than this attends in blocks of this many queries, so the
# scores it holds at once are [B, N, block, S], never [B, N, S, S] (16k tokens x 32 heads: 32 GB a row).
ATTENTION_BLOCK = 1024
# Packed trees (`rl/batches/packed.py`) make rows as long as a whole tree, of which a query sees only its own path:
# above this many tokens such a row attends in blocks of this many queries (`causal_blocks`), so its scores
# [B, N, block, <= S] are no larger than the per-path layout's [B, N, L, L] for paths a fraction of the row
# long, and later groups of blocks alone score the row's later keys.
PACKED_ATTENTION_BLOCK = 256
# Long packed rows attend in this many groups of query blocks, each group over the keys up to its last query.
CAUSAL_GROUPS = 4


@struct.dataclass
class CausalMask:
    """A full sequence's self-attention mask, kept implicit: query s sees the keys t <= s that are real
    tokens (`valid` [B, S]). Packed trees (`rl/batches/packed.py`) add `enter` and `exit` [B, S]: the row positions
    where each token's node starts and where that node's subtree ends (nodes laid out depth-first), and
    key t is then also an ancestor-or-self token of query s: enter[t] <= enter[s] < exit[t]. `dense` builds
    any block of queries' rows of it, so no [S, S] mask exists beyond one block."""

    valid: jax.Array
    enter: jax.Array | None = None
    exit: jax.Array | None = None

    def dense(self, start=0, length: int | None = None, keys: int | None = None):
        """[B, length, keys]: the rows of queries start .. start + length - 1 (rows past S: don't-care) over
        the first `keys` keys (default all S; a causal block needs none past its last query)."""
        S = self.valid.shape[1]
        T = S if keys is None else keys
        queries = start + jnp.arange(S if length is None else length)
        mask = (queries[:, None] >= jnp.arange(T)[None, :])[None] & self.valid[:, None, :T]
        if self.enter is None:
            return mask
        query_enter = jnp.take(self.enter, queries, axis=1, mode="clip")[:, :, None]  # [B, length, 1]
        return mask & (self.enter[:, None, :T] <= query_enter) & (query_enter < self.exit[:, None, :T])


def fused_attention_implementation(dtype) -> str | None:
    """The `jax.nn.dot_product_attention` implementation for multi-token attention (prefill chunks and the
    learner's full sequences), or None for our own einsum path. GPUs in bf16/fp16 get cuDNN's fused kernel;
    CPUs (and f32) keep the einsum path, which reads the cache in its own layout with no transpose.
    Decoding (one query per row) always takes the einsum path: it is bound by reading the cache, which the
    multiply-reduce streams once in place, where a fused call would first transpose the whole cache."""
    if jax.default_backend() == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16):
        return "cudnn"
    return None


def fused_attention(q, keys, values, mask, implementation: str):
    """q [B, S, K, G, H]; keys, values [B, T, K, H]; mask [B, S, T] -> [B, S, K, G, H]."""
    B, S, K, G, H = q.shape
    out = jax.nn.dot_product_attention(q.reshape(B, S, K * G, H), keys, values, mask=mask[:, None],
                                       scale=H ** -0.5, implementation=implementation)
    # a query with nothing to attend to (padding) gives zeros, whatever the kernel does with it
    return jnp.where(mask.any(-1)[:, :, None, None], out, 0).reshape(B, S, K, G, H)


def einsum_attention(q, keys, values, mask):
    """q [B, S, K, G, H]; keys [B, K, H, T]; values [B, K, T, H]; mask [B, S, T] -> [B, S, K, G, H]."""
    scores = jnp.einsum("BSKGH,BKHT->BKGST", q, keys, preferred_element_type=jnp.float32) * (q.shape[-1] ** -0.5)
    probs = jax.nn.softmax(jnp.where(mask[:, None, None, :, :], scores, MASKED), axis=-1)
    return jnp.einsum("BKGST,BKTH->BSKGH", probs.astype(values.dtype), values)


def blocked_attention(q, keys, values, mask: CausalMask, block: int, start: int = 0):
    """`einsum_attention` over blocks of `block` queries (a scan; each block's scores are recomputed in the
    backward pass rather than stored), its mask rows built per block: the same rows, O(block * T) memory.
    q holds the queries start .. start + S - 1 of the sequence, keys and values its first T tokens."""
    B, S, K, G, H = q.shape
    T = keys.shape[-1]
    n = -(-S // block)
    q = jnp.pad(q, [(0, 0), (0, n * block - S), (0, 0), (0, 0), (0, 0)])
    q = q.reshape(B, n, block, K, G, H).swapaxes(0, 1)

    @jax.checkpoint
    def one(_, xs):
        i, q_block = xs
        return None, einsum_attention(q_block, keys, values, mask.dense(start + i * block, block, T))

    _, out = jax.lax.scan(one, None, (jnp.arange(n), q))
    return out.swapaxes(0, 1).reshape(B, n * block, K, G, H)[:, :S]


def causal_blocks(q, keys, values, mask: CausalMask, block: int):
    """`blocked_attention` in CAUSAL_GROUPS consecutive groups of query blocks, each group scored against
    the keys up to its last query only (a causal mask needs none after it): (groups + 1) / (2 groups) of the
    full pass's scores (0.625 with 4 groups), still one block's scores at a time."""
    S = q.shape[1]
    n = -(-S // block)
    groups = max(1, min(CAUSAL_GROUPS, n // 2))  # a scan of one block costs memory: every group has >= 2
    bounds = [min(S, -(-n * g // groups) * block) for g in range(groups + 1)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        if b > a:
            q_group = q[:, a:b]
            if out:  # after the previous group: one group's scores live at a time
                out[-1], q_group = jax.lax.optimization_barrier((out[-1], q_group))
            out.append(blocked_attention(q_group, keys[..., :b], values[:, :, :b], mask, block, start=a))
    return jnp.concatenate(out, axis=1)
