"""Forks of sampler rows, on one device or a mesh: where children go, and the one gather that copies them.

On a mesh a state's rows are S = data x fsdp contiguous blocks, one per shard (`parallel/rules.py`).
A fork copies parent rows into a child bucket of R rows (a multiple of S):

- `plan_fork` puts each child on its parent's shard while that shard has free rows in the bucket, the
  others on free rows elsewhere (the greedy reaches the optimum, sum over shards of min(children whose
  parent is there, R / S)); `ForkPlan.cross_shard` counts the children that cross.
- `gather_rows` copies shard-local rows with a local take and the others through one explicit
  exchange: each shard packs the rows other shards need from it into a buffer of X rows (X: the most
  any shard sends, bucketed), one all-gather of those buffers over the batch axes, a take. A shard
  receives S x X rows, never another shard's whole block unless the fork really moves it (an
  all-to-all, each shard receiving only what it needs, would move less: not done).
- `concat_states` merges several states shard by shard (each shard's blocks side by side), so merging
  moves no row across shards.

On one device the plan is the identity (child i in row i, padding rows copy row 0) and the gather a
plain take.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from trace_jax.sampling.paged import PagedRows

from trace_jax.parallel.rules import BATCH_AXES
from trace_jax.sampling.state import (SamplerState, batch_bucket, constrain, grow, mesh_of, put_rows, rows_multiple,
                                      state_specs)


@dataclasses.dataclass(frozen=True)
class ForkPlan:
    """Where a fork's children go.

    Attributes:
      rows: [n] the bucket row of child i.
      source: [R] the parent row each bucket row copies (rows left free copy a row of their own shard).
      active: [R] True on the rows that hold a child.
      cross_shard: children placed on another shard than their parent's (0 on one device).
    """

    rows: np.ndarray
    source: np.ndarray
    active: np.ndarray
    cross_shard: int


def plan_fork(parents: Sequence[int], source_rows: int, mesh: Mesh | None) -> ForkPlan:
    """Places children of `parents` (rows of a state of `source_rows` rows) in a bucket of rows."""
    parents = np.asarray(parents, np.int64)
    shards = rows_multiple(mesh)
    bucket = batch_bucket(len(parents), shards)
    per_target, per_source = bucket // shards, source_rows // shards
    home = parents // per_source
    free = [list(range(s * per_target, (s + 1) * per_target)) for s in range(shards)]
    rows = np.full(len(parents), -1, np.int64)
    for i, s in enumerate(home):
        if free[s]:
            rows[i] = free[s].pop(0)
    leftover = [r for rows_of_shard in free for r in rows_of_shard]
    for i in np.flatnonzero(rows < 0):
        rows[i] = leftover.pop(0)
    source = (np.arange(bucket) // per_target) * per_source  # free rows: their own shard's first row
    source[rows] = parents
    active = np.zeros(bucket, bool)
    active[rows] = True
    return ForkPlan(rows=rows, source=source, active=active, cross_shard=int((rows // per_target != home).sum()))


def gather_rows(state: SamplerState, source: Sequence[int]) -> SamplerState:
    """Row i of the result is a copy of row source[i] of `state` (len(source) a multiple of the mesh's row
    shards): shard-local copies stay local, the others go through one explicit exchange."""
    if isinstance(state, PagedRows):  # the rows list the same pages: no KV copied (an index past the batch: empty)
        return state.pool.take(state, source)
    source = np.array(source, np.int32)  # a copy: the transfer below may read it after we return
    mesh = mesh_of(state)
    if mesh is None:
        return _take(state, jax.device_put(source))
    shards = rows_multiple(mesh)
    per_source, per_target = state.batch_size // shards, len(source) // shards
    home, local = source // per_source, source % per_source
    crossing = np.flatnonzero(np.arange(len(source)) // per_target != home)
    sends: list[list[int]] = [[] for _ in range(shards)]  # per shard: its local rows other shards need
    pick = local.copy()
    for t in crossing:
        pick[t] = len(sends[home[t]])  # provisional: its slot in its home shard's buffer
        sends[home[t]].append(int(local[t]))
    width = batch_bucket(max(map(len, sends))) if crossing.size else 0
    for t in crossing:  # its place in [own block, every shard's send buffer]
        pick[t] = per_source + home[t] * width + pick[t]
    send = np.zeros((shards, max(width, 1)), np.int32)
    for shard, rows in enumerate(sends):
        send[shard, :len(rows)] = rows
    return _exchange(state, put_rows(pick, mesh), put_rows(send.reshape(-1), mesh), mesh, width)


@jax.jit
def _take(state: SamplerState, rows: jax.Array) -> SamplerState:
    return jax.tree.map(lambda x: jnp.take(x, rows, axis=0), state)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _exchange(state: SamplerState, pick: jax.Array, send: jax.Array, mesh: Mesh, width: int) -> SamplerState:
    specs = state_specs(state, mesh)

    def per_shard(block_state, pick, send):
        def one(x):
            if width:
                outgoing = jnp.take(x, send, axis=0)  # [width, ...]: the rows other shards need from this one
                incoming = jax.lax.all_gather(outgoing, BATCH_AXES, axis=0, tiled=True)  # [shards * width, ...]
                x = jnp.concatenate([x, incoming], axis=0)
            return jnp.take(x, pick, axis=0)

        return jax.tree.map(one, block_state)

    rows = P(BATCH_AXES)
    out = jax.shard_map(per_shard, mesh=mesh, in_specs=(specs, rows, rows), out_specs=specs)(state, pick, send)
    return constrain(out, mesh)


def concat_states(states: list[SamplerState]) -> tuple[SamplerState, list[int]]:
    """Rows of several states in one (capacities grown to the largest), for one batched fork; returns the
    merged state and, per state, the offset of its rows within each shard's block: row r of state k is
    merged row `merged_row(offsets[k], r, ...)`."""
    if len(states) == 1:
        return states[0], [0]
    if isinstance(states[0], PagedRows):
        return states[0].pool.concat(states)
    capacity = max(s.capacity for s in states)
    grown = [s if s.capacity == capacity else grow(s, capacity) for s in states]
    mesh = mesh_of(grown[0])
    shards = rows_multiple(mesh)
    blocks = [s.batch_size // shards for s in grown]
    bucket = batch_bucket(sum(s.batch_size for s in grown), shards)
    offsets = np.cumsum([0] + blocks[:-1]).tolist()
    return _concat(grown, mesh, shards, bucket // shards), offsets


def merged_row(offset: int, row: int, state_rows: int, merged_rows: int, mesh: Mesh | None) -> int:
    """Where row `row` of a state of `state_rows` rows sits in `concat_states`'s result."""
    shards = rows_multiple(mesh)
    per_state, per_merged = state_rows // shards, merged_rows // shards
    return (row // per_state) * per_merged + offset + row % per_state


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _concat(states: list[SamplerState], mesh: Mesh | None, shards: int, block: int) -> SamplerState:
    def merge(*xs):
        pieces = [x.reshape(shards, x.shape[0] // shards, *x.shape[1:]) for x in xs]
        merged = jnp.concatenate(pieces, axis=1)
        merged = jnp.pad(merged, [(0, 0), (0, block - merged.shape[1])] + [(0, 0)] * (merged.ndim - 2))
        return merged.reshape(shards * block, *merged.shape[2:])

    return constrain(jax.tree.map(merge, *states), mesh)
