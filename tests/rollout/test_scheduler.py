"""The slot table (rollout/scheduler.py) on its own: the queue fills free slots in order, a decoded chunk ends
the turns that stopped or ran out of tokens (positions carry across chunks), retired slots keep the finished
branch for the archive, compaction moves every per-slot record with its slot, and the counters add up. (The
whole schedule against the turn-synchronous reference: tests/rollout/test_continuous.py.)"""

import numpy as np

from trace_jax.rollout.scheduler import SlotCounters, SlotTable
from trace_jax.sampling import Generation


def _chunk(lengths, stopped) -> Generation:
    n, width = len(lengths), max(max(lengths), 1)
    tokens = np.arange(n * width, dtype=np.int32).reshape(n, width)
    return Generation(tokens=tokens, logprobs=np.zeros((n, width), np.float32), entropy=None,
                      lengths=np.asarray(lengths, np.int64), stopped=np.asarray(stopped, bool),
                      hidden=np.zeros((n, 0), np.float32))


def test_the_queue_fills_free_slots_in_order_and_turns_end_at_a_stop_or_the_token_limit():
    table = SlotTable(4, rows=[0, 2], branches=5, limit=6)  # branches 0, 1 start in slots 0, 2; 2-4 wait
    assert table.occupant.tolist() == [0, -1, 1, -1] and list(table.pending) == [2, 3, 4]
    free = table.free()
    assert free.tolist() == [1, 3] and table.admit(free) == [2, 3] and table.occupant.tolist() == [0, 2, 1, 3]
    decoding = table.busy.copy()
    ended, pieces = table.advance(_chunk([4, 4, 2, 4], [False, False, True, False]), decoding)
    assert ended == [2] and len(pieces) == 1 and int(pieces[0][0].lengths[0]) == 2  # slot 2 stopped
    assert table.position.tolist() == [4, 4, 0, 4]
    ended, pieces = table.advance(_chunk([2, 1, 0, 2], [False, False, False, False]), decoding)
    assert ended == [0, 3] and [len(p) for p in pieces] == [2, 2]  # 6 tokens: the turn's limit
    assert table.position.tolist() == [0, 5, 0, 0]
    table.retire([2])
    assert table.occupant[2] == -1 and table.previous[2] == 1 and table.free().tolist() == [2]
    assert table.counters() == SlotCounters(placed=4, compactions=0, chunks=2, turns=3)


def test_compaction_moves_each_slot_record_with_its_slot_and_waits_for_a_dry_queue():
    table = SlotTable(8, rows=range(8), branches=9, limit=100)
    assert table.live_fit(lambda n: n) is None  # a branch still waits
    table.admit(np.array([], int))
    table.retire([0, 1, 2, 3, 4, 6, 7])  # only slot 5 decodes
    assert table.live_fit(lambda n: 8) is None  # its bucket would not be a quarter of the table
    table.pending.clear()
    table.anchors[5].append(("tree", 3))
    table.anchors[1].append(("tree", 1))  # a finished branch's anchors: archived before compaction, not moved
    table.pieces[5].append(_chunk([1], [False]))
    table.position[5] = 7
    live = table.live_fit(lambda n: n)
    assert live.tolist() == [5]
    table.anchors.pop(1)  # the loop archives it first
    moved = table.compact(live, 2)
    assert moved == {5: 0} and table.occupant.tolist() == [5, -1] and table.position.tolist() == [7, 0]
    assert dict(table.anchors) == {0: [("tree", 3)]} and list(table.pieces) == [0]
    assert table.previous.tolist() == [-1, -1] and table.counters().compactions == 1
