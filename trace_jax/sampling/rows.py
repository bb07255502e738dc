"""Programs on some rows of a live sampler state, for continuous batching (`rollout/continuous.py`).

Each gathers the rows it works on into a small sub-batch (a power of four; padding indices point past the
batch, are gathered by clipping and never written back), computes on it and writes it back into the
donated state, so the other rows (mid-turn) are neither computed nor changed:

- `place_rows`: a fork into free slots (rows of another state, cut back to a turn boundary);
- `extend_rows`: observations appended to the rows whose turn ended (cut first where a stop string
  ended the turn early);
- `copy_rows`: rows copied into another state (a finished branch archived before its slot is reused).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.models.config import ModelConfig
from trace_jax.models.transformer import Params
from trace_jax.sampling.decoding import fork_rows, truncate
from trace_jax.sampling.fork import plan_fork
from trace_jax.sampling.paged import PagedRows
from trace_jax.sampling.prefill import (MAX_CHUNK, append_body, ensure_capacity, extend, host_lengths,
                                        refeed_last)
from trace_jax.sampling.state import SamplerState, chunk_bucket, constrain, grow, mesh_of, put_replicated


def _take_rows(state: SamplerState, rows) -> SamplerState:
    return jax.tree.map(lambda x: jnp.take(x, rows, axis=0, mode="clip"), state)


def _put_rows(state: SamplerState, rows, sub: SamplerState) -> SamplerState:
    """Writes the rows of `sub` into rows `rows` of `state` (indices past the batch are dropped: padding)."""
    return jax.tree.map(lambda x, y: x.at[rows].set(y, mode="drop"), state, sub)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=3)
def _place(config, mesh, params, state, source, source_rows, rows, lengths):
    """Row rows[i] of `state` becomes row source_rows[i] of `source` cut to lengths[i] tokens (a fork into a
    free slot); only the placed rows are computed."""
    sub = _take_rows(source, source_rows)
    sub = refeed_last(config, params, sub, lengths, rows < state.batch_size)
    return constrain(_put_rows(state, rows, sub), mesh)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=1)
def _copy(mesh, target, source, source_rows, rows):
    return constrain(_put_rows(target, rows, _take_rows(source, source_rows)), mesh)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=3)
def _rewind_rows(config, mesh, params, state, rows, cut):
    """Rows `rows` only (a sub-batch gathered and written back) cut back to `cut` tokens, their logits and
    hidden state recomputed from the kept last token (a turn stopped at a stop string)."""
    sub = refeed_last(config, params, _take_rows(state, rows), cut, rows < state.batch_size)
    return constrain(_put_rows(state, rows, sub), mesh)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=3)
def _append_rows(config, mesh, params, state, rows, tokens, mask):
    """`append_body` on rows `rows` only (a sub-batch gathered and written back): tokens [n, C] (right-padded,
    mask [n, C]) appended. Apart from `_rewind_rows`: a model pass compiled into every append for the rare
    turn cut at a stop string made each of these programs twice as slow to compile."""
    sub = append_body(config, params, _take_rows(state, rows), tokens, mask)
    return constrain(_put_rows(state, rows, sub), mesh)


SUB_BATCH_FLOOR = 16


def sub_batch_bucket(n: int, rows: int) -> int:
    """A sub-batch's rows for n chosen rows of states of `rows` rows (the smaller state's; >= n): the next
    power of four from SUB_BATCH_FLOOR (16, 64, 256, ...), at most `rows`. Each size is a program per state
    shape, crossed with the others (capacities, slot counts, prefill widths), and compiling those is what the
    scheduler's steps cost (docs/sampler.md); padding rows cost a little prefill instead. Below the floor a
    table is small enough that the whole of it is the one size."""
    size = SUB_BATCH_FLOOR
    while size < n:
        size *= 4
    return max(n, min(size, rows))


def _sub_batch(rows: Sequence[int], batch: int, size: int) -> np.ndarray:
    """Row indices padded to `size` with `batch` (out of range: gathered by clipping, never written back)."""
    index = np.full(size, batch, np.int32)
    index[: len(rows)] = rows
    return index


def place_rows(config: ModelConfig, params: Params, state: SamplerState, source: SamplerState,
               source_rows: Sequence[int], rows: Sequence[int], lengths: Sequence[int]) -> SamplerState:
    """Forks into free slots: row rows[i] of `state` becomes row source_rows[i] of `source` (left intact) cut
    back to lengths[i] tokens. Only those rows are computed; consumes `state`."""
    if not len(rows) == len(source_rows) == len(lengths):
        raise ValueError(f"{len(rows)} rows, {len(source_rows)} source rows and {len(lengths)} lengths")
    if not rows:
        return state
    have = host_lengths(source)[np.asarray(source_rows)]
    wanted = np.asarray(lengths, np.int64)
    if (wanted < 1).any() or (wanted > have).any():
        raise ValueError(f"fork lengths must lie in [1, parent length]; got {list(lengths)} for parents of "
                         f"lengths {have.tolist()}")
    if isinstance(state, PagedRows):  # the forks on pages of their own, then into the slots
        branches = fork_rows(config, params, source, plan_fork(source_rows, source.batch_size, None), lengths)
        return state.pool.put(state, rows, branches)
    if source.capacity > state.capacity:
        state = grow(state, source.capacity)
    elif source.capacity < state.capacity:
        source = grow(source, state.capacity)
    size = sub_batch_bucket(len(rows), min(state.batch_size, source.batch_size))
    index, mesh = _sub_batch(rows, state.batch_size, size), mesh_of(state)
    cut = np.ones(len(index), np.int32)
    cut[: len(rows)] = wanted
    return _place(config, mesh, params, state, source,
                  put_replicated(_sub_batch(source_rows, source.batch_size, size), mesh),
                  put_replicated(index, mesh), put_replicated(cut, mesh))


def copy_rows(target: SamplerState, source: SamplerState, source_rows: Sequence[int],
              rows: Sequence[int]) -> SamplerState:
    """Row rows[i] of `target` becomes a copy of row source_rows[i] of `source` (left intact; same capacity).
    Consumes `target`."""
    if isinstance(target, PagedRows):  # the rows list the source rows' pages
        size = sub_batch_bucket(len(rows), min(target.batch_size, source.batch_size))
        taken = source.pool.take(source, _sub_batch(source_rows, source.batch_size, size))
        return target.pool.put(target, _sub_batch(rows, target.batch_size, size), taken)
    if source.capacity != target.capacity:
        raise ValueError(f"copy_rows needs equal capacities, got {source.capacity} and {target.capacity}")
    mesh, size = mesh_of(target), sub_batch_bucket(len(rows), min(target.batch_size, source.batch_size))
    return _copy(mesh, target, source, put_replicated(_sub_batch(source_rows, source.batch_size, size), mesh),
                 put_replicated(_sub_batch(rows, target.batch_size, size), mesh))


def extend_rows(config: ModelConfig, params: Params, state: SamplerState, rows: Sequence[int],
                new_tokens: Sequence[Sequence[int]], *, cut: Sequence[int | None] | None = None,
                max_chunk: int = MAX_CHUNK, reserve: int = 0) -> SamplerState:
    """`extend` on rows `rows` only, computed on a sub-batch of those rows: appends new_tokens[i] to row
    rows[i], after cutting it back to cut[i] tokens where that is given (a turn stopped at a stop string;
    see `truncate`). If the cache must grow, it grows to room for `reserve` more tokens past the appended
    ones (`ensure_capacity`). Consumes `state`."""
    if len(rows) != len(new_tokens) or (cut is not None and len(cut) != len(rows)):
        raise ValueError(f"{len(rows)} rows for {len(new_tokens)} token lists"
                         + ("" if cut is None else f" and {len(cut)} cut lengths"))
    if not rows:
        return state
    have = host_lengths(state)[np.asarray(rows)]
    wanted = have.copy() if cut is None else np.array([h if c is None else c for h, c in zip(have, cut)], np.int64)
    if (wanted < 1).any() or (wanted > have).any():
        raise ValueError(f"cut lengths must lie in [1, row length]; got {list(cut)} for rows of lengths "
                         f"{have.tolist()}")
    if isinstance(state, PagedRows):  # the rows taken out with their pages, cut, extended and put back
        rows = _sub_batch(rows, state.batch_size, sub_batch_bucket(len(rows), state.batch_size))
        sub = state.pool.take(state, rows, consume=True)
        if (wanted < have).any():
            sub = truncate(config, params, sub, wanted.tolist())
        return state.pool.put(state, rows, extend(config, params, sub, new_tokens, max_chunk=max_chunk))
    needed = int(max(w + len(t) for w, t in zip(wanted, new_tokens)))
    state = ensure_capacity(state, needed, ahead=needed + reserve)
    index, mesh = _sub_batch(rows, state.batch_size, sub_batch_bucket(len(rows), state.batch_size)), mesh_of(state)
    longest = max(max(len(t) for t in new_tokens), 1)
    width = chunk_bucket(longest, max_chunk)
    if (wanted < have).any():  # only the rows cut back are recomputed
        recut = [r for r, w, h in zip(rows, wanted, have) if w < h]
        cut_index = _sub_batch(recut, state.batch_size, sub_batch_bucket(len(recut), state.batch_size))
        lengths = np.ones(len(cut_index), np.int32)
        lengths[: len(recut)] = wanted[wanted < have]
        state = _rewind_rows(config, mesh, params, state, put_replicated(cut_index, mesh),
                             put_replicated(lengths, mesh))
    for begin in range(0, longest, width):
        chunk = np.zeros((len(index), width), np.int32)
        mask = np.zeros((len(index), width), bool)
        for i, toks in enumerate(new_tokens):
            piece = toks[begin:begin + width]
            chunk[i, : len(piece)] = piece
            mask[i, : len(piece)] = True
        state = _append_rows(config, mesh, params, state, *(put_replicated(x, mesh) for x in (index, chunk, mask)))
    return state
