"""The paged KV cache: keys/values in a pool of fixed-size pages, rows reaching them through page tables.

Row b's token at slot t lives in page `page_tables[b, t // page_size]`, offset `t % page_size`. Rows that
share a prefix (tree forks) list the same pages, so the prefix is held once; which pages are free, and how
many rows hold each, is the host's book (`sampling/pages.py`), which also guarantees that a page any row
writes into is held by that row alone. A table entry past a row's pages is `num_pages` (no page): writes
there are dropped and reads are masked.

Decoding attends over live pages only (`live_page_attention`): the batch's (row, page) pairs are listed
densely on device from the lengths, so one step's work is the rows' real tokens (rounded up to pages and
to a bucket of `live_pages` pairs), never rows x the longest row. Multi-token chunks (prefill, extend)
attend over a row-major view of each row's pages (`view`), as the dense cache does.
Pages are laid out as the dense cache's rows: keys [P, K, H, page], values [P, K, page, H].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from trace_jax.models.attention import MASKED
from trace_jax.models.cache import KVCache
from trace_jax.models.config import ModelConfig


@struct.dataclass
class PagedKVCache:
    k: tuple[jax.Array, ...]  # L x [P, K, H, page]
    v: tuple[jax.Array, ...]  # L x [P, K, page, H]
    page_tables: jax.Array  # [B, pages per row] int32; num_pages where a row has no page
    lengths: jax.Array  # [B] int32: valid slots per row
    # (row, page) pairs a decode step attends (`live_page_attention`); 0: decoding reads a dense working copy of
    # the rows' pages instead (`dense_copy` / `write_back`), which a batch of alike lengths decodes faster
    live_pages: int = struct.field(pytree_node=False, default=0)

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[0]

    @property
    def page_size(self) -> int:
        return self.v[0].shape[2]

    @property
    def num_pages(self) -> int:
        return self.v[0].shape[0]

    @property
    def max_len(self) -> int:
        return self.page_tables.shape[1] * self.page_size


def init_pages(config: ModelConfig, num_pages: int, page_size: int, dtype=None) -> tuple[tuple, tuple]:
    """(k, v): an empty pool of `num_pages` pages of `page_size` slots per layer."""
    dtype = jnp.dtype(dtype) if dtype is not None else config.jnp_dtype
    k_shape = (num_pages, config.num_kv_heads, config.head_dim, page_size)
    v_shape = (num_pages, config.num_kv_heads, page_size, config.head_dim)
    layers = range(config.num_layers)
    return tuple(jnp.zeros(k_shape, dtype) for _ in layers), tuple(jnp.zeros(v_shape, dtype) for _ in layers)


def write(k_pages, v_pages, page_tables, slots, k_new, v_new, valid=None):
    """k_new, v_new [B, S, K, H] written at slots [B, S] of each row where `valid` [B, S] (default all; slots
    past a row's pages and invalid ones are dropped: an idle row writes nothing, so it may share its pages)."""
    page_size = v_pages.shape[2]
    page_index = jnp.clip(slots // page_size, 0, page_tables.shape[1] - 1)
    inside = slots // page_size < page_tables.shape[1]
    if valid is not None:
        inside = inside & valid
    pages = jnp.where(inside, jnp.take_along_axis(page_tables, page_index, axis=1), v_pages.shape[0])  # [B, S]
    offsets = slots % page_size
    k_pages = k_pages.at[pages, :, :, offsets].set(k_new.astype(k_pages.dtype), mode="drop")
    v_pages = v_pages.at[pages, :, offsets].set(v_new.astype(v_pages.dtype), mode="drop")
    return k_pages, v_pages


def view(k_pages, v_pages, page_tables):
    """The rows as a dense cache: keys [B, K, H, T], values [B, K, T, H] with T = pages per row x page size
    (slots of absent pages read some page: the caller masks slots past each row's length)."""
    B, R = page_tables.shape
    P, K, H, page = k_pages.shape
    keys = jnp.take(k_pages, page_tables, axis=0, mode="clip")  # [B, R, K, H, page]
    values = jnp.take(v_pages, page_tables, axis=0, mode="clip")  # [B, R, K, page, H]
    return (keys.transpose(0, 2, 3, 1, 4).reshape(B, K, H, R * page),
            values.transpose(0, 2, 1, 3, 4).reshape(B, K, R * page, H))


def live_pairs(lengths, page_tables, page_size: int, pairs: int):
    """The (row, page) pairs of the rows' live pages, listed densely: row [W] (B past the last pair), page
    [W], and the valid slots of each pair's page [W] (0 past the last pair). W = `pairs` must be at least
    sum(ceil(lengths / page_size))."""
    B, R = page_tables.shape
    counts = (lengths + page_size - 1) // page_size
    ends = jnp.cumsum(counts)
    pair = jnp.arange(pairs)
    row = jnp.searchsorted(ends, pair, side="right").astype(jnp.int32)  # rows with no page are skipped
    safe_row = jnp.minimum(row, B - 1)
    index = pair - (ends[safe_row] - counts[safe_row])
    page = page_tables[safe_row, jnp.clip(index, 0, R - 1)]
    valid = jnp.where(row < B, jnp.clip(lengths[safe_row] - index * page_size, 0, page_size), 0)
    return row, page, valid


def live_page_attention(q, k_pages, v_pages, page_tables, lengths, pairs: int):
    """One query per row over its live pages: q [B, K, G, H] -> [B, K, G, H] (float32 inside).

    Each (row, page) pair's scores are reduced on their own (max, sum of exponentials, weighted values) and
    the pairs of a row combined by the usual log-sum-exp rescaling, with a [B, W] one-hot matrix (B and W
    are small; on CPU a matmul beats a scatter). A row with no live slot gets zeros."""
    B = q.shape[0]
    H = q.shape[-1]
    row, page, valid = live_pairs(lengths, page_tables, v_pages.shape[2], pairs)
    keys = jnp.take(k_pages, page, axis=0, mode="clip").astype(jnp.float32)  # [W, K, H, page]
    values = jnp.take(v_pages, page, axis=0, mode="clip").astype(jnp.float32)  # [W, K, page, H]
    q_pairs = jnp.take(q, jnp.minimum(row, B - 1), axis=0).astype(jnp.float32)  # [W, K, G, H]
    scores = jnp.einsum("WKGH,WKHP->WKGP", q_pairs, keys) * (H ** -0.5)
    in_page = jnp.arange(v_pages.shape[2])[None, :] < valid[:, None]  # [W, page]
    scores = jnp.where(in_page[:, None, None, :], scores, MASKED)
    local_max = scores.max(-1)  # [W, K, G]
    probs = jnp.exp(scores - local_max[..., None])
    local_sum = probs.sum(-1)
    local_out = jnp.einsum("WKGP,WKPH->WKGH", probs, values)
    member = (row[None, :] == jnp.arange(B)[:, None]) & (valid > 0)[None, :]  # [B, W]
    row_max = jnp.where(member[:, :, None, None], local_max[None], MASKED).max(1)  # [B, K, G]
    weight = jnp.where(valid[:, None, None] > 0,
                       jnp.exp(local_max - jnp.take(row_max, jnp.minimum(row, B - 1), axis=0)), 0.0)
    member = member.astype(jnp.float32)
    numerator = jnp.einsum("BW,WKGH->BKGH", member, local_out * weight[..., None])
    denominator = jnp.einsum("BW,WKG->BKG", member, local_sum * weight)
    return numerator / jnp.where(denominator > 0, denominator, 1.0)[..., None]


def dense_copy(cache: PagedKVCache) -> KVCache:
    """The rows' pages as a dense `KVCache` (every row as wide as the page table), for a decode loop that
    reads it in place at every step and writes its new tokens back once (`write_back`)."""
    k, v = zip(*(view(k, v, cache.page_tables) for k, v in zip(cache.k, cache.v)))
    return KVCache(k=tuple(k), v=tuple(v), lengths=cache.lengths)


def write_back(paged: PagedKVCache, dense, steps: int) -> PagedKVCache:
    """The slots a decode loop of at most `steps` tokens filled in `dense` (from each row's length in `paged`
    up to its length in `dense`) written into the rows' pages; the paged cache with the new lengths."""
    slots = paged.lengths[:, None] + jnp.arange(steps)[None, :]  # [B, steps]
    written = slots < dense.lengths[:, None]
    slots = jnp.where(written, slots, paged.max_len)  # past every page: dropped
    safe = jnp.minimum(slots, dense.max_len - 1)
    ks, vs = [], []
    for k_pages, v_pages, k, v in zip(paged.k, paged.v, dense.k, dense.v):
        k_new = jnp.take_along_axis(k, safe[:, None, None, :], axis=3).transpose(0, 3, 1, 2)  # [B, steps, K, H]
        v_new = jnp.take_along_axis(v, safe[:, None, :, None], axis=2).transpose(0, 2, 1, 3)
        k_pages, v_pages = write(k_pages, v_pages, paged.page_tables, slots, k_new, v_new)
        ks.append(k_pages)
        vs.append(v_pages)
    return paged.replace(k=tuple(ks), v=tuple(vs), lengths=dense.lengths)


def copy_pages(k: tuple, v: tuple, source, target) -> tuple[tuple, tuple]:
    """Every layer's page source[i] copied onto page target[i] (copy on write: a fork's partly kept page)."""
    return (tuple(x.at[target].set(x[source], mode="drop") for x in k),
            tuple(x.at[target].set(x[source], mode="drop") for x in v))
