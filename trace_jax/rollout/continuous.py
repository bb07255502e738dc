"""Continuous batching at turn granularity: the slot table and the loop that keeps its slots busy.

Every `RolloutEngine.expand` runs here. The sampler state is a table of `slots` rows, decoded `chunk` tokens
at a time (a whole turn by default):

- after each chunk, the rows whose turn ended (a stop id, or max_new_tokens) leave: their turns are
  parsed and their tools run (`RolloutEngine.step_envs`) before the next chunk, or, with `overlap_tools`, in
  a worker thread while the device decodes the next chunk of the other rows (the main thread only waits on
  the device meanwhile, so the two never touch the trees at once); then their observations are prefilled
  into those rows only (`extend_rows`, a sub-batch) and they rejoin, while the other rows carry on from
  where they were;
- a slot whose branch reached a terminal state takes the next pending branch (`place_rows`: a fork from
  its anchor's row into the slot, cut to the anchor's boundary). Before a slot is reused, its row (the
  finished branch's whole history, where its turn boundaries' prefixes live) is copied into the call's
  archive state (one row per branch) and those anchors re-pointed, so stage 2 can still fork from them;
- once no branch is pending and the live rows fit a row bucket a quarter of the table or smaller, they are
  gathered into one (the tail of a call decodes fewer rows instead of idle ones; by quarters, not halves, so
  the tail compiles fewer decode programs).

With whole-turn chunks (the default) and one slot per branch, this is the turn-synchronous schedule (every
live row decodes its turn, the tools run, the observations are prefilled), with observations prefilled into
the rows that have one only and the tail gathered into fewer rows; smaller chunks let a row whose turn ended
early rejoin sooner instead of waiting, as padding, for the longest turn of the call.
Row r's randomness at the t-th token of a turn is the synchronous loop's (same row id, `positions`
carry t across chunks), so with the same numerics every schedule samples the same tokens as the
turn-synchronous reference (`tests/rollout/sync_reference.py`; tested at temperature 1 and greedy). Slot
utilisation (decoded tokens / slot-steps computed) is counted on the engine.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Protocol

import numpy as np

from trace_jax.parallel.host import to_host
from trace_jax.rollout.prefixes import PrefixTable
from trace_jax.rollout.scheduler import SlotTable
from trace_jax.sampling import decode
from trace_jax.sampling.decoding import Generation, fork_rows
from trace_jax.sampling.prefill import host_lengths
from trace_jax.sampling.fork import concat_states, gather_rows, merged_row, plan_fork
from trace_jax.sampling.rows import copy_rows, extend_rows, place_rows
from trace_jax.sampling.state import (SamplerState, batch_bucket, empty_state, grow, mesh_of, row_processes,
                                      rows_multiple)


class RolloutEngine(Protocol):
    """The public pieces of `agent_loop.RolloutEngine` this scheduler drives (it never imports that module:
    the engine imports this one)."""

    policy: object  # agent_loop.Policy
    seed: int
    prefixes: PrefixTable

    def step_envs(self, trees, branches, gen, live, leaves, owners): ...

    def row_ids(self, branches, trees) -> list[int]: ...

    def count_placed(self, rows, batch: int, mesh, *, cross_shard: int) -> None: ...

    def count_decode(self, gen, batch: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class Batching:
    """How `RolloutEngine.expand` schedules decoding.

    Attributes:
      chunk: decode steps per call (capped at max_new_tokens); 0: a whole turn per call (a row whose turn
        ended early waits, as padding, until the call's longest turn ends).
      slots: the rows decoding at once (rounded up to a row bucket); further branches wait for a slot.
        0: one slot per branch of the `expand` call (no queue).
      overlap_tools: the env steps (parsing, tool calls) of the rows whose turn ended in a
        chunk run in a worker thread while the device decodes the next chunk of the other rows; those rows
        rejoin one chunk later (worth it when tools take time). False (default): before the next chunk.
      keep_prefixes: True (default): every finished branch's cache row stays on the device (the archive),
        so a later `expand` forks from its turn boundaries without prefilling them again. False: rows are
        dropped when their branch ends; a later fork prefills its anchor's prefix again (counted in
        `Ledger.tokens_reprefilled`), in waves of at most `slots` anchors, so the live cache is the slot
        table plus one wave of prefixes instead of every rollout of the step.
    """

    chunk: int = 0
    slots: int = 0
    overlap_tools: bool = False
    keep_prefixes: bool = True

    def __post_init__(self):
        if self.chunk < 0 or self.slots < 0:
            raise ValueError(f"Batching(chunk={self.chunk}, slots={self.slots}): both must be >= 0")


def _turns(pieces: list[list[Generation]], width: int) -> Generation:
    """Finished turns, each the concatenation of its one-row pieces (one per chunk), as one Generation."""
    n = len(pieces)
    tokens, logprobs = np.zeros((n, width), np.int32), np.zeros((n, width), np.float32)
    entropy = np.zeros((n, width), np.float32)
    lengths, stopped = np.zeros(n, np.int64), np.zeros(n, bool)
    for i, turn in enumerate(pieces):
        at = 0
        for piece in turn:
            k = int(piece.lengths[0])
            tokens[i, at:at + k], logprobs[i, at:at + k] = piece.tokens[0, :k], piece.logprobs[0, :k]
            if piece.entropy is not None:
                entropy[i, at:at + k] = piece.entropy[0, :k]
            at += k
            stopped[i] |= bool(piece.stopped[0])
        lengths[i] = at
    return Generation(tokens=tokens, logprobs=logprobs, entropy=entropy, lengths=lengths, stopped=stopped,
                      hidden=np.zeros((n, 0), np.float32))


def run_continuous(engine: RolloutEngine, trees, branches, sources, leaves: list[tuple[int, int]]) -> None:
    """Runs every branch (its anchor in `sources`) to a terminal state, appending the leaves it creates."""
    p = engine.policy
    limit = p.sampling.max_new_tokens
    chunk = min(p.batching.chunk or limit, limit)
    final = engine.prefixes.reserve()  # the slot table's own id: anchors in it point here until archived
    used = sorted({ref.state for ref in sources})
    merged, offsets = concat_states([engine.prefixes.states[s] for s in used])
    offset, mesh = dict(zip(used, offsets)), mesh_of(merged)
    parents = [merged_row(offset[r.state], r.row, engine.prefixes.states[r.state].batch_size, merged.batch_size, mesh)
               for r in sources]
    width = len(branches) if not p.batching.slots else min(len(branches), p.batching.slots)
    plan = plan_fork(parents[:width], merged.batch_size, mesh)
    state = fork_rows(p.config, p.params, merged, plan, [r.length for r in sources[:width]])
    table = SlotTable(state.batch_size, plan.rows, len(branches), limit)
    engine.count_placed(plan.rows, table.slots, mesh, cross_shard=plan.cross_shard)
    loop = _Loop(engine, trees, branches, leaves, sources, merged, parents, mesh, final,
                 _Archive(engine, len(branches)), table)
    ended: _Ended | None = None  # turns that ended in the last chunk whose tools have not run yet
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tools") as tools:
        while True:
            state = loop.fill(state)
            if not table.busy.any():
                break
            state, ended = loop.shrink(state, ended)
            decoding = table.busy.copy()
            if ended is not None:
                decoding[ended.slots] = False
            row_ids = np.zeros(table.slots, np.int64)
            row_ids[decoding] = engine.row_ids([branches[j] for j in table.occupant[decoding]], trees)
            stepped = None
            if ended is not None:  # their tools run in the worker thread while this thread only decodes
                stepped = tools.submit(engine.step_envs, trees, ended.branches, ended.turn,
                                       [True] * len(ended.slots), leaves, ended.owners)
            gen = None
            if decoding.any():
                gen, state = decode(p.config, p.params, state, p.sampling, seed=engine.seed, row_ids=row_ids.tolist(),
                                    active=decoding, positions=table.position.tolist(), steps=chunk, reserve=limit)
            if stepped is not None:
                state, ended = loop.rejoin(state, ended, stepped.result()), None
            if gen is None:
                continue
            engine.count_decode(gen, table.slots)
            finished, pieces = table.advance(gen, decoding)
            if not finished:
                continue
            ended = _Ended(finished, [branches[table.occupant[s]] for s in finished], _turns(pieces, limit),
                           row_processes(table.slots, mesh)[finished])
            if not p.batching.overlap_tools:  # tools now, before the next chunk
                state = loop.rejoin(state, ended, engine.step_envs(trees, ended.branches, ended.turn,
                                                                   [True] * len(finished), leaves, ended.owners))
                ended = None
    if p.batching.keep_prefixes:
        engine.prefixes.put(final, state)


@dataclasses.dataclass(frozen=True)
class _Ended:
    """Slots whose turn just ended, their branches, the finished turns (one row each, in slot order) and the
    process whose devices decoded each (it runs that turn's tools)."""

    slots: list[int]
    branches: list
    turn: Generation
    owners: np.ndarray


@dataclasses.dataclass
class _Loop:
    """What `run_continuous` moves between the sampler state, the slot table and the prefix table (writes to the
    prefix table go through its methods: `anchor`, `repoint`, `put`)."""

    engine: RolloutEngine
    trees: list
    branches: list
    leaves: list
    sources: list  # each branch's anchor (`PrefixRef`)
    merged: SamplerState  # the anchors' states in one, branches are forked from
    parents: list[int]  # each branch's anchor row in `merged`
    mesh: object
    final: int  # the slot table's state id in the prefix table
    archive: _Archive
    table: SlotTable

    def fill(self, state: SamplerState) -> SamplerState:
        """Queued branches into the free slots (a finished branch's row archived first, where anchors live)."""
        table, p, merged, parents = self.table, self.engine.policy, self.merged, self.parents
        free = table.free()
        if not len(free):
            return state
        state = self.archive.keep(state, table.held_rows(free), table)
        taken = table.admit(free)
        state = place_rows(p.config, p.params, state, merged, [parents[j] for j in taken], free.tolist(),
                           [self.sources[j].length for j in taken])
        shards = rows_multiple(self.mesh)
        crossing = sum((s * shards // table.slots) != (parents[j] * shards // merged.batch_size)
                       for s, j in zip(free, taken))
        self.engine.count_placed(free, table.slots, self.mesh, cross_shard=int(crossing))
        return state

    def shrink(self, state: SamplerState, ended: _Ended | None) -> tuple[SamplerState, _Ended | None]:
        """Once the queue is dry and the live rows fit a quarter of the table: they are gathered into fewer rows."""
        table, shards = self.table, rows_multiple(self.mesh)
        live = table.live_fit(lambda n: batch_bucket(n, shards))
        if live is None:
            return state, ended
        state = self.archive.keep(state, table.held_rows(range(table.slots)), table)
        slots = batch_bucket(len(live), shards)
        state = gather_rows(state, np.resize(live, slots))  # rows past the live ones: scratch copies
        moved = table.compact(live, slots)
        for new, held in table.anchors.items():
            for tree, node_id in held:
                self.engine.prefixes.repoint(tree, node_id, self.final, new)
        if ended is not None:
            ended = dataclasses.replace(ended, slots=[moved[s] for s in ended.slots])
        return state, ended

    def rejoin(self, state: SamplerState, ended: _Ended, stepped) -> SamplerState:
        """After the ended turns' env steps: observations prefilled into their rows (which rejoin decoding), new
        turn boundaries anchored in the slot table (state `final`), slots of finished episodes retired."""
        p = self.engine.policy
        observations, boundaries, dropped = stepped
        rows = [ended.slots[i] for i in boundaries]
        cut = None
        if any(dropped.get(i) for i in boundaries):  # a turn stopped at a stop string (rare): read the lengths then
            lengths = host_lengths(state)
            cut = [int(lengths[ended.slots[i]]) - dropped[i] if dropped.get(i) else None for i in boundaries]
        state = extend_rows(p.config, p.params, state, rows, [observations[i] for i in boundaries], cut=cut,
                            reserve=p.sampling.max_new_tokens)
        hidden, lengths = to_host((state.hidden, state.cache.lengths))
        for i, node in boundaries.items():
            slot, branch = ended.slots[i], ended.branches[i]
            self.engine.prefixes.anchor(self.trees[branch.tree], node.id, self.final, slot, int(lengths[slot]),
                                        np.asarray(hidden[slot]), branch.episode)
            self.table.anchors[slot].append((self.trees[branch.tree], node.id))
        self.table.retire([s for i, s in enumerate(ended.slots) if i not in boundaries])
        return state


class _Archive:
    """One state with a row per branch of the `expand` call: a finished branch's row is copied to row
    `branch` before its slot is reused, and the anchors in it re-pointed there (with keep_prefixes=False,
    nothing is copied: those anchors are prefilled again when a later call forks from them)."""

    def __init__(self, engine: RolloutEngine, branches: int):
        self.engine, self.branches = engine, branches
        self.sid: int | None = None

    def keep(self, state: SamplerState, slots: list[int], table: SlotTable) -> SamplerState:
        """Copies rows `slots` (finished branches with anchors in them) here; returns `state` (maybe grown)."""
        if not slots:
            return state
        engine = self.engine
        if not engine.policy.batching.keep_prefixes:  # the anchors keep pointing at a state never stored
            for slot in slots:
                table.anchors.pop(slot)
            return state
        if self.sid is None:
            mesh = mesh_of(state)
            pool, config = engine.policy.pages, engine.policy.config
            self.sid = engine.prefixes.store(
                pool.empty(self.branches, state.capacity) if pool is not None else
                empty_state(config, batch_bucket(self.branches, rows_multiple(mesh)), state.capacity, mesh))
        archive = engine.prefixes.states[self.sid]
        if archive.capacity < state.capacity:
            archive = grow(archive, state.capacity)
        elif state.capacity < archive.capacity:
            state = grow(state, archive.capacity)
        rows = [int(table.previous[s]) for s in slots]
        engine.prefixes.put(self.sid, copy_rows(archive, state, slots, rows))
        for slot, row in zip(slots, rows):
            for tree, node_id in table.anchors.pop(slot):
                engine.prefixes.repoint(tree, node_id, self.sid, row)
        return state
