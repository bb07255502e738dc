"""The per-path layout of the learner (`learner.layout="paths"`, the default): one row per trained sequence, its
leaf path's whole context included (prompt, turns, observations), so a tree's shared turns are computed once per
leaf below them. Position t holds token t and predicts token t + 1."""

from __future__ import annotations

import numpy as np

from trace_jax.rl.advantages import Sequence
from trace_jax.rollout.tree import RolloutTree
from trace_jax.sampling.state import batch_bucket, length_bucket


def sequence_length(trees: list[RolloutTree], seq: Sequence) -> int:
    """Tokens of a sequence's row: its leaf path's turns and observations."""
    return sum(len(n.tokens) + len(n.observation) for n in trees[seq.tree].path(seq.leaf))


def padded_rows(sequences: int, micro_batch: int) -> int:
    """Rows of a batch of `sequences`: a power of two, at least and a multiple of one micro-batch."""
    return max(micro_batch, -(-batch_bucket(sequences) // micro_batch) * micro_batch)


def build(trees: list[RolloutTree], sequences: list[Sequence], micro_batch: int, *,
                length: int | None = None, rows: int | None = None) -> dict[str, np.ndarray]:
    """[num_micro, micro_batch, L] arrays. Position t holds token t and predicts token t + 1:
    `mask` is set where token t + 1 is a generated token trained in this sequence (observations and
    prompts never are), with its advantage and the sampler's log-prob. `length` and `rows` (a multiple of
    micro_batch) fix the shape (default: the buckets of these sequences)."""
    built = []
    for seq in sequences:
        tree = trees[seq.tree]
        ids, trained, adv, old = [], [], [], []
        for node in tree.path(seq.leaf):
            own = node.id in seq.advantages
            ids += node.tokens + node.observation
            trained += [own] * len(node.tokens) + [False] * len(node.observation)
            a = seq.advantages.get(node.id, 0.0)
            adv += [a] * len(node.tokens) + [0.0] * len(node.observation)
            lp = node.logprobs if node.id else [0.0] * len(node.tokens)
            old += list(lp) + [0.0] * len(node.observation)
        built.append((ids, trained, adv, old))
    longest = max((len(r[0]) for r in built), default=1)
    length = length_bucket(longest) if length is None else length
    n = padded_rows(len(built), micro_batch) if rows is None else rows
    if longest > length or len(built) > n or n % micro_batch:
        raise ValueError(f"{len(built)} sequences of up to {longest} tokens do not fit a batch of {n} rows x {length} "
                         f"tokens in micro-batches of {micro_batch}")
    out = {"tokens": np.zeros((n, length), np.int32), "valid": np.zeros((n, length), bool),
           "targets": np.zeros((n, length), np.int32), "mask": np.zeros((n, length), bool),
           "advantages": np.zeros((n, length), np.float32), "old_logprobs": np.zeros((n, length), np.float32)}
    for r, (ids, trained, adv, old) in enumerate(built):
        L = len(ids)
        out["tokens"][r, :L] = ids
        out["valid"][r, :L] = True
        out["targets"][r, : L - 1] = ids[1:]
        out["mask"][r, : L - 1] = trained[1:]
        out["advantages"][r, : L - 1] = adv[1:]
        out["old_logprobs"][r, : L - 1] = old[1:]
    return {k: v.reshape(n // micro_batch, micro_batch, length) for k, v in out.items()}


def step_batches(trees: list[RolloutTree], sequences: list[Sequence], groups: list[list[int]],
                 micro_batch: int) -> list[dict[str, np.ndarray]]:
    """One batch per group of `sequences` indices (a step's mini-batches), all of one shape."""
    length = length_bucket(max(sequence_length(trees, s) for s in sequences))
    rows = max(padded_rows(len(g), micro_batch) for g in groups)
    return [build(trees, [sequences[i] for i in g], micro_batch, length=length, rows=rows) for g in groups]
