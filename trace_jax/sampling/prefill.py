"""Prefill: prompts and new tokens written into a sampler state's rows, and the first logits they give.

`_append` is the one jitted prefill program (a chunk of right-padded tokens after each row's last token);
`extend` feeds a batch's new tokens through it chunk by chunk; `start` prefills a fresh state, in length groups
when the prompts' lengths differ enough (`length_groups`), so a batch's prefill is never padded to a much longer
row; `refeed_last` recomputes a cut row's logits from its kept last token (truncation, forks). Continuous
batching's sub-batch versions are `rows.py`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.models.config import ModelConfig
from trace_jax.models.transformer import Params, forward, unembed
from trace_jax.parallel.host import to_host
from trace_jax.sampling.fork import concat_states, gather_rows, merged_row
from trace_jax.sampling.paged import PagedRows, PagePool
from trace_jax.sampling.state import (SamplerState, batch_bucket, chunk_bucket, constrain, empty_state, grow,
                                      length_bucket, mesh_of, put_rows, rows_multiple)

MAX_CHUNK = 512


def append_body(config: ModelConfig, params: Params, state: SamplerState, tokens, mask) -> SamplerState:
    """Writes tokens [B, C] (right-padded, mask [B, C]) after each row's last token."""
    B, C = tokens.shape
    lengths = state.cache.lengths
    slots = lengths[:, None] + jnp.arange(C)[None, :]
    fed = forward(config, params, tokens, slots, state.cache, mask, return_logits=False)
    hidden = fed.hidden
    count = mask.sum(axis=1)
    last = (jnp.arange(B), jnp.maximum(count - 1, 0))
    last_hidden = hidden[last]
    logits = unembed(config, params, last_hidden).astype(jnp.float32)
    changed = (count > 0)[:, None]
    return SamplerState(
        cache=fed.cache,
        tokens=state.tokens.at[jnp.arange(B)[:, None], slots].set(tokens, mode="drop"),
        logits=jnp.where(changed, logits, state.logits),
        hidden=jnp.where(changed, features(last_hidden, fed.middle[last]), state.hidden),
        pooled=state.pooled + jnp.einsum("bc,bcd->bd", mask.astype(jnp.float32), hidden.astype(jnp.float32)),
    )


def features(hidden, middle):
    """A state's `hidden` field: [..., 2D] the final-normed hidden state, then the middle layers' (`state.py`)."""
    return jnp.concatenate([hidden, middle.astype(hidden.dtype)], axis=-1)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=3)
def _append(config, mesh, params, state, tokens, mask):
    return constrain(append_body(config, params, state, tokens, mask), mesh)


def refeed_last(config: ModelConfig, params: Params, state: SamplerState, lengths, changed) -> SamplerState:
    """Rows `changed` are cut back to `lengths` tokens, their logits/hidden recomputed from the kept last
    token; the other rows are untouched."""
    last = jnp.take_along_axis(state.tokens, jnp.maximum(lengths - 1, 0)[:, None], axis=1)
    cut = state.replace(cache=state.cache.replace(lengths=jnp.where(changed, lengths - 1, state.cache.lengths)))
    return append_body(config, params, cut, last, changed[:, None]).replace(pooled=state.pooled)


def host_lengths(state: SamplerState) -> np.ndarray:
    return np.array(to_host(state.cache.lengths))  # a writable host copy


def ensure_capacity(state: SamplerState, needed: int, *, ahead: int = 0) -> SamplerState:
    """Grows every row's cache to a bucketed capacity >= needed (no-op when it fits); when it grows, to room
    for `ahead` tokens too (what the caller will need soon: one growth, and one set of programs compiled for
    it, instead of one per call). Buckets are `length_bucket`'s, the sizes experiments/dry_run.py plans for."""
    if needed <= state.capacity:
        return state
    return grow(state, length_bucket(max(needed, ahead)))


def start(config: ModelConfig, params: Params, prompts: Sequence[Sequence[int]], *, reserve: int = 0,
          max_chunk: int = MAX_CHUNK, pool: PagePool | None = None) -> SamplerState | PagedRows:
    """Prefills each prompt into its own row of a fresh state with room for `reserve` more tokens (with a
    `pool`: rows whose KV lives in its pages, `paged.py`).

    Prompts of very different lengths are prefilled in length groups (`length_groups`), each into a state only
    as long as its own prompts, then merged into one state (capacity grown to the longest, rows in prompt
    order): no short prompt is padded to a long one's length, and none attends over a long one's capacity."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    mesh = mesh_of(params)
    groups = length_groups([len(p) for p in prompts], reserve, rows_multiple(mesh))
    if pool is not None:
        if mesh is not None:
            raise ValueError("a page pool is one device's: on a mesh the sampler runs on the dense cache")
        return _start_paged(config, params, prompts, groups, pool, max_chunk)
    if len(groups) == 1:
        return _start_padded(config, params, prompts, reserve, max_chunk, mesh)
    parts = [_start_padded(config, params, [prompts[i] for i in g], reserve, max_chunk, mesh) for g in groups]
    merged, offsets = concat_states(parts)
    rows = np.zeros(batch_bucket(len(prompts), rows_multiple(mesh)), np.int64)  # padding rows copy the first row
    for group, offset, part in zip(groups, offsets, parts):
        for j, i in enumerate(group):
            rows[i] = merged_row(offset, j, part.batch_size, merged.batch_size, mesh)
    rows[len(prompts):] = rows[0]
    return gather_rows(merged, rows)


def _start_paged(config, params, prompts, groups, pool: PagePool, max_chunk) -> PagedRows:
    """`start` into pages: each group prefilled into rows of its own, the groups' rows then listed together
    in prompt order (their page tables: no KV is copied to join them)."""
    parts = [extend(config, params, pool.empty(len(g), max(len(prompts[i]) for i in g)), [prompts[i] for i in g],
                    max_chunk=max_chunk) for g in groups]
    if len(parts) == 1:
        return parts[0]
    merged, offsets = pool.concat(parts)
    order = np.full(batch_bucket(len(prompts)), merged.batch_size, np.int64)  # padding rows: empty
    for group, offset in zip(groups, offsets):
        order[group] = offset + np.arange(len(group))
    return pool.take(merged, order, consume=True)


def _start_padded(config, params, prompts, reserve, max_chunk, mesh) -> SamplerState:
    """Every prompt in one batch, right-padded to the longest (one state of the longest prompt's capacity)."""
    capacity = length_bucket(max(len(p) for p in prompts) + reserve)
    state = empty_state(config, batch_bucket(len(prompts), rows_multiple(mesh)), capacity, mesh)
    return extend(config, params, state, prompts, max_chunk=max_chunk)


# A split into length groups must save at least this share of the padded batch's prefill, or the prompts stay
# in one batch: every group is another set of compiled programs (on CPU, compiling is most of a small RL step's
# time: docs/sampler.md) and a merge copy. Lengths within about one octave of each other never split.
GROUP_SAVING = 0.5


def length_groups(lengths: Sequence[int], reserve: int = 0, multiple: int = 1) -> list[list[int]]:
    """The prompts' indices in prefill groups: sorted by length, cut where the cache's length bucket
    (`length_bucket(length + reserve)`) starts a new octave; two neighbouring groups merge back while merging
    costs less than 1 / (1 - GROUP_SAVING) times their separate cost, counted as rows (bucketed to `multiple`)
    times the group's longest prompt times its cache capacity (attention over the cache dominates a long
    prefill; MLP work only grows with rows times length). One group (the padded batch) when lengths are alike."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    octave = lambda i: length_bucket(lengths[i] + reserve).bit_length()  # noqa: E731
    groups: list[list[int]] = []
    for i in order:
        if groups and octave(groups[-1][0]) == octave(i):
            groups[-1].append(i)
        else:
            groups.append([i])

    def cost(group):
        longest = max(lengths[i] for i in group)
        return batch_bucket(len(group), multiple) * longest * length_bucket(longest + reserve)

    merged = True
    while merged and len(groups) > 1:
        merged = False
        for k in range(len(groups) - 1):
            both = groups[k] + groups[k + 1]
            if (1 - GROUP_SAVING) * cost(both) <= cost(groups[k]) + cost(groups[k + 1]):
                groups[k:k + 2] = [both]
                merged = True
                break
    return [sorted(g) for g in groups]


def extend(config: ModelConfig, params: Params, state: SamplerState, new_tokens: Sequence[Sequence[int]], *,
           max_chunk: int = MAX_CHUNK) -> SamplerState:
    """Appends new_tokens[i] to row i with a chunked prefill; no row's history is re-prefilled.

    Rows past len(new_tokens), and rows given an empty list, are unchanged. Consumes `state`
    (its buffers are donated); fork first (`gather_rows`) to keep a copy.
    """
    if len(new_tokens) > state.batch_size:
        raise ValueError(f"{len(new_tokens)} token lists for a state of {state.batch_size} rows")
    longest = max((len(t) for t in new_tokens), default=0)
    if longest == 0:
        return state
    lengths = host_lengths(state)
    wanted = lengths.copy()
    wanted[: len(new_tokens)] += [len(t) for t in new_tokens]
    paged = isinstance(state, PagedRows)
    if paged:
        state.pool.prepare(state, np.where(wanted > lengths, lengths, -1), wanted, "prefilling")
    else:
        state = ensure_capacity(state, int(wanted.max()))
    width = chunk_bucket(longest, max_chunk)
    mesh = mesh_of(state)
    for begin in range(0, longest, width):
        chunk = np.zeros((state.batch_size, width), np.int32)
        mask = np.zeros((state.batch_size, width), bool)
        for i, toks in enumerate(new_tokens):
            piece = toks[begin:begin + width]
            chunk[i, : len(piece)] = piece
            mask[i, : len(piece)] = True
        if paged:
            state.pool.run(functools.partial(_append, config, None, params), state, put_rows(chunk, None),
                           put_rows(mask, None), capacity=int(wanted.max()))
        else:
            state = _append(config, mesh, params, state, put_rows(chunk, mesh), put_rows(mask, mesh))
    return state
