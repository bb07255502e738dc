"""The paged KV cache: keys/values in a pool of fixed-size pages, rows reaching them through page tables.

Row b's token at slot t lives in page `page_tables[b, t // page_size]`, offset `t % page_size`. Rows that
share a prefix (tree forks) list the same pages, so the prefix is held once; which pages are free, and how
many rows hold each, is the host's book (`sampling/pages.py`), which also guarantees that a page any row
writes into is held by that row alone. A table entry past a row's pages is `num_pages` (no page): writes
there are dropped and reads are masked.

A decode call reads a working copy of its rows' pages at every step and writes its new tokens back once:
rows of alike lengths a dense one (`dense_copy` / `write_back`: the dense cache's own decode), rows of very
different lengths a packed one (`pack` / `unpack`: the rows' live blocks listed densely, so a step's work is
the rows' real tokens, rounded up to blocks and a bucket of `packed_blocks`, never rows x the longest row).
Multi-token chunks (prefill, extend) attend over a row-major view of each row's pages (`view`).
Pages are laid out as the dense cache's rows: keys [P, K, H, page], values [P, K, page, H].
"""

from __future__ import annotations

from typing import NamedTuple

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
    # blocks of a decode call's packed working copy (`pack`); 0: a dense working copy instead (`dense_copy`),
    # which a batch of alike lengths decodes as fast with fewer programs
    packed_blocks: int = struct.field(pytree_node=False, default=0)

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

    def writes(self, valid, lengths) -> PageWrites:
        return PageWrites(self.page_tables, valid)


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


# Tokens per block of a decode call's packed working copy (`PackedKVCache`): whole pages, read in place at every
# step. On CPU a block of 64 reads as fast per token as the dense cache (16: about 1.6x slower).
BLOCK = 64


class PageWrites(NamedTuple):
    """What a layer of a cached pass on pages needs: where rows' slots are and which tokens are real."""

    tables: jax.Array  # [B, pages per row]
    valid: jax.Array  # [B, S]


class BlockWrites(NamedTuple):
    """What a layer of a decode step on a packed working copy needs (`PackedKVCache`)."""

    row: jax.Array  # [W]
    index: jax.Array  # [W]
    first: jax.Array  # [B]
    lengths: jax.Array  # [B] after the step's token
    valid: jax.Array  # [B, 1]


@struct.dataclass
class PackedKVCache:
    """A decode call's working copy of its rows' live pages (`pack`), packed: block w holds `block` tokens of
    row row[w] (its index[w]-th block; rows' blocks consecutive, from first[b]), room for every token the call
    may add included. Each step writes one token per row into it and attends over its blocks in place
    (`block_attention`): a step's work is the rows' live tokens, not rows x the longest row. `unpack` writes
    the new tokens back into the pages once, at the end of the call."""

    k: tuple[jax.Array, ...]  # L x [W, K, H, block]
    v: tuple[jax.Array, ...]  # L x [W, K, block, H]
    row: jax.Array  # [W] int32 (B past the last block)
    index: jax.Array  # [W] int32
    first: jax.Array  # [B] int32
    lengths: jax.Array  # [B] int32

    @property
    def max_len(self) -> int:  # what a cached pass's (unused) dense mask is sized by
        return self.v[0].shape[2]

    def writes(self, valid, lengths) -> BlockWrites:
        return BlockWrites(self.row, self.index, self.first, lengths, valid)


def block_size(page_size: int) -> int:
    """A packed block: whole pages, at least BLOCK tokens."""
    return page_size * -(-BLOCK // page_size)


def _blocks(lengths, blocks: int, block: int):
    """Rows' blocks listed densely: row [W] (B past the last), index [W] within the row, first [B]."""
    B = lengths.shape[0]
    counts = (lengths + block - 1) // block
    ends = jnp.cumsum(counts)
    first = (ends - counts).astype(jnp.int32)
    row = jnp.searchsorted(ends, jnp.arange(blocks), side="right").astype(jnp.int32)
    return row, (jnp.arange(blocks) - first[jnp.minimum(row, B - 1)]).astype(jnp.int32), first


def pack(cache: PagedKVCache, reach, blocks: int) -> PackedKVCache:
    """The rows' pages up to reach[b] tokens (every token the call may write; pages taken beforehand) packed
    into `blocks` blocks (at least sum(ceil(reach / block)))."""
    B, R = cache.page_tables.shape
    ps = cache.page_size
    block = block_size(ps)
    per = block // ps
    row, index, first = _blocks(reach, blocks, block)
    page_index = index[:, None] * per + jnp.arange(per)[None, :]  # [W, per]
    pages = jnp.take_along_axis(cache.page_tables[jnp.minimum(row, B - 1)], jnp.clip(page_index, 0, R - 1), axis=1)
    W = blocks
    k = tuple(jnp.take(x, pages, axis=0, mode="clip").transpose(0, 2, 3, 1, 4).reshape(W, *x.shape[1:3], block)
              for x in cache.k)
    v = tuple(jnp.take(x, pages, axis=0, mode="clip").transpose(0, 2, 1, 3, 4).reshape(W, x.shape[1], block,
                                                                                       x.shape[3]) for x in cache.v)
    return PackedKVCache(k=k, v=v, row=row, index=index, first=first, lengths=cache.lengths)


def _block_slots(first, slots, block: int, blocks: int):
    return jnp.minimum(first[:, None] + slots // block, blocks), slots % block


def block_write(k_blocks, v_blocks, writes: BlockWrites, slots, k_new, v_new):
    """Each row's new token(s) k_new, v_new [B, S, K, H] at slots [B, S], where valid (others dropped)."""
    W, _, block, _ = v_blocks.shape
    where, offsets = _block_slots(writes.first, slots, block, W)
    where = jnp.where(writes.valid, where, W)
    return (k_blocks.at[where, :, :, offsets].set(k_new.astype(k_blocks.dtype), mode="drop"),
            v_blocks.at[where, :, offsets].set(v_new.astype(v_blocks.dtype), mode="drop"))


def block_attention(q, k_blocks, v_blocks, writes: BlockWrites):
    """One query per row over its blocks, in place: q [B, K, G, H] -> [B, K, G, H] (float32 inside).

    Each block's scores are reduced on their own (max, sum of exponentials, weighted values) and a row's blocks
    combined by the usual log-sum-exp rescaling, with a [B, W] one-hot matrix (B and W are small; on CPU a
    matmul beats a scatter). A row with no live slot gets zeros."""
    B, H = q.shape[0], q.shape[-1]
    block = v_blocks.shape[2]
    row = jnp.minimum(writes.row, B - 1)
    live = jnp.where(writes.row < B, jnp.clip(writes.lengths[row] - writes.index * block, 0, block), 0)  # [W]
    q_blocks = jnp.take(q, row, axis=0).astype(jnp.float32) * (H ** -0.5)  # [W, K, G, H]
    scores = jnp.sum(q_blocks[..., None] * k_blocks[:, :, None].astype(jnp.float32), axis=-2)  # [W, K, G, block]
    scores = jnp.where((jnp.arange(block)[None, :] < live[:, None])[:, None, None, :], scores, MASKED)
    local_max = scores.max(-1)  # [W, K, G]
    probs = jnp.exp(scores - local_max[..., None])
    local_sum = probs.sum(-1)
    local_out = jnp.sum(probs[..., None] * v_blocks[:, :, None].astype(jnp.float32), axis=-2)  # [W, K, G, H]
    member = (writes.row[None, :] == jnp.arange(B)[:, None]) & (live > 0)[None, :]  # [B, W]
    row_max = jnp.where(member[:, :, None, None], local_max[None], MASKED).max(1)  # [B, K, G]
    weight = jnp.where(live[:, None, None] > 0, jnp.exp(local_max - jnp.take(row_max, row, axis=0)), 0.0)
    member = member.astype(jnp.float32)
    numerator = jnp.einsum("BW,WKGH->BKGH", member, local_out * weight[..., None])
    denominator = jnp.einsum("BW,WKG->BKG", member, local_sum * weight)
    return numerator / jnp.where(denominator > 0, denominator, 1.0)[..., None]


def unpack(paged: PagedKVCache, packed: PackedKVCache, steps: int) -> PagedKVCache:
    """The tokens a decode call of at most `steps` tokens wrote into its packed copy (from each row's length in
    `paged` up to its length in `packed`) written into the rows' pages; the paged cache with the new lengths."""
    slots = paged.lengths[:, None] + jnp.arange(steps)[None, :]  # [B, steps]
    written = slots < packed.lengths[:, None]
    W, _, block, _ = packed.v[0].shape
    where, offsets = _block_slots(packed.first, slots, block, W - 1)
    ks, vs = [], []
    for k_pages, v_pages, k, v in zip(paged.k, paged.v, packed.k, packed.v):
        k_pages, v_pages = write(k_pages, v_pages, paged.page_tables, slots, k[where, :, :, offsets],
                                 v[where, :, offsets], written)
        ks.append(k_pages)
        vs.append(v_pages)
    return paged.replace(k=tuple(ks), v=tuple(vs), lengths=packed.lengths)


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
