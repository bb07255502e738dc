"""The prefix table of one RL step: the sampler states a `RolloutEngine` holds, and for every anchor (a
tree's root or turn boundary) where its prefix's KV rows live and the env episode to fork at it.

The scheduler (`continuous.py`) and the engine (`agent_loop.py`) store states and anchors here through this
interface; trees hold data only."""

from __future__ import annotations

import dataclasses

import numpy as np

from trace_jax.envs.protocol import Episode
from trace_jax.rollout.tree import RolloutTree
from trace_jax.sampling.state import SamplerState


@dataclasses.dataclass(frozen=True)
class PrefixRef:
    """Where an anchor's prefix lives: the first `length` slots of row `row` of engine state `state`."""

    state: int
    row: int
    length: int


@dataclasses.dataclass(frozen=True)
class AnchorHandle:
    prefix: PrefixRef
    episode: Episode  # the env episode at the boundary (forked per continuation)


class PrefixTable:
    """Sampler states by id, and anchors by (tree, node id). A state id may be reserved before its state
    exists (anchors point at it while a call still runs) or never stored (`keep_prefixes=False`: those
    anchors are "dropped" and prefilled again when forked from)."""

    def __init__(self):
        self.states: dict[int, SamplerState] = {}
        self._next_state = 0
        self._anchors: dict[RolloutTree, dict[int, AnchorHandle]] = {}  # tree -> node id -> handle

    def reserve(self) -> int:
        """A new state id with nothing stored under it yet."""
        sid, self._next_state = self._next_state, self._next_state + 1
        return sid

    def store(self, state: SamplerState) -> int:
        sid = self.reserve()
        self.states[sid] = state
        return sid

    def put(self, sid: int, state: SamplerState) -> None:
        """Stores (or replaces) the state under a reserved id."""
        if sid >= self._next_state:
            raise KeyError(f"state id {sid} was never reserved")
        self.states[sid] = state

    def add_root(self, tree: RolloutTree, sid: int, row: int, length: int, episode: Episode) -> None:
        self._anchors[tree] = {0: AnchorHandle(PrefixRef(sid, row, length), episode)}

    def anchor(self, tree: RolloutTree, node_id: int, sid: int, row: int, length: int, hidden: np.ndarray,
               episode: Episode) -> None:
        """A new turn boundary: the tree records its prefix length and hidden state; the table where the
        prefix lives (row `row` of state `sid`) and a fork of the episode at that boundary."""
        tree.mark_anchor(node_id, prefix_length=length, hidden=hidden)
        self._anchors[tree][node_id] = AnchorHandle(PrefixRef(sid, row, length), episode.fork())

    def repoint(self, tree: RolloutTree, node_id: int, sid: int, row: int) -> None:
        """The anchor's prefix moved to row `row` of state `sid` (a slot's row archived before reuse)."""
        handle = self._anchors[tree][node_id]
        self._anchors[tree][node_id] = dataclasses.replace(handle, prefix=PrefixRef(sid, row, handle.prefix.length))

    def handle(self, tree: RolloutTree, node_id: int) -> AnchorHandle | None:
        return self._anchors.get(tree, {}).get(node_id)

    def dropped(self, tree: RolloutTree, node_id: int) -> bool:
        """Whether the anchor's prefix lives in a state that was never kept (it must be prefilled again)."""
        handle = self.handle(tree, node_id)
        return handle is not None and handle.prefix.state not in self.states
