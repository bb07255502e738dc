"""The packed tree layout of the learner (`learner.layout="packed"`): every node of a tree that lies on a
trained sequence's path is laid out once, depth-first, and several trees share a row, so a shared prefix
is computed once in the forward and backward pass instead of once per leaf below it.

Per token of a row: its id, `positions` (its place on its own path, so RoPE sees what the per-path layout
shows it) and `enter` / `exit` (the row positions where its node starts and where that node's subtree
ends): key t is visible to query s iff t <= s and enter[t] <= enter[s] < exit[t] (`models/attention.py`
`CausalMask`, built block by block, never as an [S, S] array). Losses are over target entries [rows, E]:
each trained generated token once per sequence that trains it (a trajectory-level estimator that lists a
shared turn in two sequences trains it twice, as the per-path layout does), read at its `sources` position
(the token before it on its path: for a node's first token, its parent's last one, which thus predicts
every child), with its advantage, the sampler's log-prob and, for sequence-mean losses, 1 / the trained
tokens of its sequence. With the same trees and sequences the loss, log-probs and gradients equal the
per-path layout's (`tests/rl/batches/test_packed.py`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from trace_jax.rl.advantages import Sequence
from trace_jax.rl.batches.paths import padded_rows, sequence_length
from trace_jax.rollout.tree import RolloutTree
from trace_jax.sampling.state import length_bucket


@dataclasses.dataclass
class Unit:
    """One tree's nodes on the given sequences' paths, laid out depth-first from position 0."""

    tokens: list[int]
    positions: list[int]
    enter: list[int]
    exit: list[int]
    # per target entry: (source position, target token id, advantage, sampler log-prob, sequence weight)
    entries: list[tuple[int, int, float, float, float]]


def tree_unit(tree: RolloutTree, sequences: list[Sequence]) -> Unit:
    """The layout of `tree`'s nodes on `sequences`' leaf paths (all of one tree), children in id order."""
    needed = {node.id for seq in sequences for node in tree.path(seq.leaf)}
    order, stack = [], [0]
    while stack:  # preorder
        node_id = stack.pop()
        order.append(node_id)
        stack += sorted((c for c in tree.nodes[node_id].children if c in needed), reverse=True)
    start, path_length, last = {}, {}, {}
    tokens, positions, enter = [], [], []
    for node_id in order:
        node = tree.nodes[node_id]
        ids = node.tokens + node.observation
        parent = node.parent
        path_length[node_id] = 0 if parent is None else path_length[parent] + len(tree.nodes[parent].tokens) + len(
            tree.nodes[parent].observation)
        start[node_id] = len(tokens)
        last[node_id] = len(tokens) + len(ids) - 1 if ids else (-1 if parent is None else last[parent])
        tokens += ids
        positions += range(path_length[node_id], path_length[node_id] + len(ids))
        enter += [start[node_id]] * len(ids)
    end = {}
    for node_id in reversed(order):  # a subtree ends where its last descendant's tokens end
        node = tree.nodes[node_id]
        end[node_id] = max([start[node_id] + len(node.tokens) + len(node.observation)]
                           + [end[c] for c in node.children if c in needed])
    exit_ = [0] * len(tokens)
    for node_id in order:
        node = tree.nodes[node_id]
        for p in range(start[node_id], start[node_id] + len(node.tokens) + len(node.observation)):
            exit_[p] = end[node_id]
    entries = []
    for seq in sequences:
        own = []
        for node in tree.path(seq.leaf):
            if node.id not in seq.advantages:
                continue
            logprobs = node.logprobs if node.id else [0.0] * len(node.tokens)
            for j, token in enumerate(node.tokens):
                source = start[node.id] + j - 1 if j else (-1 if node.parent is None else last[node.parent])
                if source >= 0:  # the first token of a row is no target in the per-path layout either
                    own.append((source, token, float(seq.advantages[node.id]), float(logprobs[j])))
        entries += [(*e, 1.0 / len(own)) for e in own]
    return Unit(tokens, positions, enter, exit_, entries)


def units(trees: list[RolloutTree], sequences: list[Sequence]) -> list[Unit]:
    """One unit per tree, in the order the trees first appear in `sequences` (their sequences' order kept)."""
    by_tree: dict[int, list[Sequence]] = {}
    for seq in sequences:
        by_tree.setdefault(seq.tree, []).append(seq)
    return [tree_unit(trees[t], seqs) for t, seqs in by_tree.items()]


def pack(layouts: list[Unit], length: int) -> list[list[Unit]]:
    """Rows of at most `length` tokens: units longest first, each into the first row with room."""
    rows: list[list[Unit]] = []
    room: list[int] = []
    for unit in sorted(layouts, key=lambda u: -len(u.tokens)):
        if len(unit.tokens) > length:
            raise ValueError(f"a tree of {len(unit.tokens)} tokens does not fit a row of {length}")
        row = next((r for r, free in enumerate(room) if free >= len(unit.tokens)), None)
        if row is None:
            rows.append([])
            room.append(length)
            row = len(rows) - 1
        rows[row].append(unit)
        room[row] -= len(unit.tokens)
    return rows


def shape(groups: list[list[Unit]], micro_batch: int, path_length: int) -> tuple[int, int, int, int]:
    """(micro rows, length, rows, entries): one batch shape for every group of units (the updates of one step).
    A packed row is as long as the longest tree, not the longest path, so a micro-batch holds fewer rows:
    as many as keep its tokens within the per-path layout's (`micro_batch` rows of `path_length`), so the
    activations one micro-batch holds are no larger than the per-path layout's."""
    length = length_bucket(max((len(u.tokens) for g in groups for u in g), default=1))
    micro = max(1, 1 << max(0, (micro_batch * path_length // length).bit_length() - 1))  # a power of two
    packed = [pack(g, length) for g in groups]
    rows = max(padded_rows(len(p), micro) for p in packed)
    entries = length_bucket(max((sum(len(u.entries) for u in row) for p in packed for row in p), default=1))
    return micro, length, rows, entries


def batch(layouts: list[Unit], micro_batch: int, length: int, rows: int, entries: int) -> dict[str, np.ndarray]:
    """[num_micro, micro_batch, length] position arrays and [num_micro, micro_batch, entries] entry arrays."""
    packed = pack(layouts, length)
    widest = max((sum(len(u.entries) for u in row) for row in packed), default=0)
    if len(packed) > rows or rows % micro_batch or widest > entries:
        raise ValueError(f"{len(packed)} packed rows of up to {widest} target entries do not fit {rows} rows x "
                         f"{entries} entries in micro-batches of {micro_batch}")
    out = {"tokens": np.zeros((rows, length), np.int32), "valid": np.zeros((rows, length), bool),
           "positions": np.zeros((rows, length), np.int32), "enter": np.zeros((rows, length), np.int32),
           "exit": np.zeros((rows, length), np.int32), "sources": np.zeros((rows, entries), np.int32),
           "targets": np.zeros((rows, entries), np.int32), "mask": np.zeros((rows, entries), bool),
           "advantages": np.zeros((rows, entries), np.float32),
           "old_logprobs": np.zeros((rows, entries), np.float32),
           "sequence_weights": np.zeros((rows, entries), np.float32)}
    for r, row in enumerate(packed):
        at, e = 0, 0
        for unit in row:
            n, k = len(unit.tokens), len(unit.entries)
            out["tokens"][r, at:at + n] = unit.tokens
            out["valid"][r, at:at + n] = True
            out["positions"][r, at:at + n] = unit.positions
            out["enter"][r, at:at + n] = np.asarray(unit.enter) + at
            out["exit"][r, at:at + n] = np.asarray(unit.exit) + at
            if k:
                source, target, advantage, old, weight = (np.asarray(c) for c in zip(*unit.entries))
                out["sources"][r, e:e + k] = source + at
                out["targets"][r, e:e + k] = target
                out["mask"][r, e:e + k] = True
                out["advantages"][r, e:e + k] = advantage
                out["old_logprobs"][r, e:e + k] = old
                out["sequence_weights"][r, e:e + k] = weight
            at, e = at + n, e + k
    return {k: v.reshape(rows // micro_batch, micro_batch, v.shape[1]) for k, v in out.items()}


def build(trees: list[RolloutTree], sequences: list[Sequence], micro_batch: int) -> dict[str, np.ndarray]:
    """The packed batch of `sequences` at its own buckets (`paths.build`'s counterpart)."""
    layouts = units(trees, sequences)
    path_length = length_bucket(max(sequence_length(trees, s) for s in sequences))
    return batch(layouts, *shape([layouts], micro_batch, path_length))


def step_batches(trees: list[RolloutTree], sequences: list[Sequence], groups: list[list[int]],
                 micro_batch: int) -> list[dict[str, np.ndarray]]:
    """One packed batch per group of `sequences` indices (a step's mini-batches), all of one shape."""
    path_length = length_bucket(max(sequence_length(trees, s) for s in sequences))
    layouts = [units(trees, [sequences[i] for i in g]) for g in groups]
    return [batch(g, *shape(layouts, micro_batch, path_length)) for g in layouts]
