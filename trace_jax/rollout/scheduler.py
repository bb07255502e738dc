"""The slot table of continuous batching: which branch each decoding row (slot) holds, how far its current turn
has got, the pieces of that turn decoded so far, the turn boundaries anchored in it, and the branches waiting
for a slot. Host bookkeeping only: it never touches the sampler state or the prefix table (the loop in
`continuous.py` moves rows; the engine writes anchors). The loop drives it through two methods, `admit` (fill
free slots from the queue) and `advance` (take a decoded chunk, hand back the turns that ended), plus `retire`
and `compact` where a turn's tools finished or the tail shrinks; `counters` says what it did (read by its tests;
the engine counts slot utilisation itself).
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from trace_jax.sampling import Generation


@dataclasses.dataclass(frozen=True)
class SlotCounters:
    """placed: branches placed into a slot (the first wave included); compactions: times the live rows were
    gathered into a smaller table; chunks: decoded chunks recorded; turns: turns that ended. (Slot utilisation,
    tokens per row-step computed, is the engine's: `RolloutEngine.count_decode`.)"""

    placed: int
    compactions: int
    chunks: int
    turns: int


class SlotTable:
    """`slots` rows; branches 0..width-1 start in `rows`, the rest of `branches` wait in order."""

    def __init__(self, slots: int, rows, branches: int, limit: int):
        width = len(rows)
        self.occupant = np.full(slots, -1)  # the branch each slot decodes, -1 when free
        self.previous = np.full(slots, -1)  # the finished branch whose row a free slot still holds
        self.occupant[np.asarray(rows, int)] = np.arange(width)
        self.position = np.zeros(slots, np.int32)  # tokens of the current turn each slot holds
        self.pieces: dict[int, list[Generation]] = collections.defaultdict(list)  # slot -> this turn's chunks
        self.anchors: dict[int, list[tuple[object, int]]] = collections.defaultdict(list)  # slot -> (tree, node)
        self.pending = collections.deque(range(width, branches))
        self.limit = limit
        self._counts = dict(placed=width, compactions=0, chunks=0, turns=0)

    @property
    def slots(self) -> int:
        return len(self.occupant)

    @property
    def busy(self) -> np.ndarray:
        return self.occupant >= 0

    def held_rows(self, slots) -> list[int]:
        """Of these free slots, those whose row still holds a finished branch with anchors in it (to archive)."""
        return [int(s) for s in slots if self.occupant[s] < 0 and self.anchors.get(int(s))]

    def free(self) -> np.ndarray:
        """The free slots the queue can fill now."""
        return np.flatnonzero(self.occupant < 0)[:len(self.pending)]

    def admit(self, free: np.ndarray) -> list[int]:
        """Places the next queued branches into `free` (their rows hold nothing to keep); returns them."""
        taken = [self.pending.popleft() for _ in free]
        self.occupant[free], self.position[free] = taken, 0
        self._counts["placed"] += len(taken)
        return taken

    def live_fit(self, bucket) -> np.ndarray | None:
        """The live slots, once the queue is dry and they fit a row bucket a quarter of the table or smaller."""
        busy = self.busy
        if self.pending or 4 * bucket(int(busy.sum())) > self.slots:
            return None
        return np.flatnonzero(busy)

    def compact(self, live: np.ndarray, slots: int) -> dict[int, int]:
        """The live slots move to rows 0..len(live)-1 of a `slots`-row table; returns old slot -> new slot."""
        moved = {int(old): new for new, old in enumerate(live)}

        def move(values, fill):
            out = np.full(slots, fill, values.dtype)
            out[: len(live)] = values[live]
            return out

        self.occupant, self.position = move(self.occupant, -1), move(self.position, 0)
        self.previous = np.full(slots, -1)
        self.pieces = collections.defaultdict(list, {moved[old]: c for old, c in self.pieces.items()})
        self.anchors = collections.defaultdict(list, {moved[old]: self.anchors.pop(old) for old in moved
                                                      if old in self.anchors})
        self._counts["compactions"] += 1
        return moved

    def advance(self, gen: Generation, decoding: np.ndarray) -> tuple[list[int], list[list[Generation]]]:
        """Records one decoded chunk of the `decoding` slots; returns the slots whose turn ended (a stop, or
        max_new_tokens) and each one's pieces, in order (their positions start a new turn)."""
        for s in np.flatnonzero(decoding):
            self.pieces[s].append(gen.take([s]))
        self.position += gen.lengths.astype(np.int32)
        ended = [int(s) for s in np.flatnonzero(decoding & (gen.stopped | (self.position >= self.limit)))]
        self.position[ended] = 0
        self._counts["chunks"] += 1
        self._counts["turns"] += len(ended)
        return ended, [self.pieces.pop(s) for s in ended]

    def retire(self, slots) -> None:
        """These slots' branches reached a terminal state: the slots are free, their rows kept until reused."""
        for s in slots:
            self.previous[s], self.occupant[s] = self.occupant[s], -1

    def counters(self) -> SlotCounters:
        return SlotCounters(**self._counts)
