"""Turn-boundary anchors of rollout trees: where a tree can branch, what a branch costs in tokens, and anchors
picked at random; shared by TRACE's stage 2 (`allocation/trace/`) and the branching baselines
(`tree_allocators.py`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trace_jax.rollout.tree import RolloutTree

Anchor = tuple[int, int, int]  # (tree index, node id, continuations k)


def branch_points(trees: list[RolloutTree]) -> list[tuple[int, int]]:
    """Every non-terminal turn boundary (tree index, node id): the candidate anchors of stage 2."""
    return [(i, n.id) for i, t in enumerate(trees) for n in t.nodes[1:] if t.is_anchor(n.id)]


def expected_remaining_tokens(trees: list[RolloutTree]) -> Callable[[int], float]:
    """depth t -> mean tokens a continuation from a depth-t boundary generated, relative to a whole
    rollout's (the `unit="tokens"` cost of a branch)."""
    totals, after = [], {}
    for tree in trees:
        for leaf in tree.leaves():
            path = tree.path(leaf.id)[1:]
            lengths = [len(n.tokens) for n in path]
            totals.append(sum(lengths))
            for t in range(len(path)):
                after.setdefault(t, []).append(sum(lengths[t:]))
    full = max(np.mean(totals) if totals else 1.0, 1.0)
    return lambda depth: max(np.mean(after.get(depth, [full])) / full, 0.05)


def fill(ranked: list[tuple[int, int]], budget: float, k: int) -> list[Anchor]:
    """k continuations to each anchor in rank order (the last one fewer) until the budget is spent."""
    anchors, left = [], int(budget)
    for tree, node in ranked:
        if left <= 0:
            break
        anchors.append((tree, node, min(k, left)))
        left -= min(k, left)
    return anchors


def random_anchors(trees: list[RolloutTree], rng: np.random.Generator, budget: float, k: int) -> list[Anchor]:
    """Uniformly random turn boundaries, k continuations each, within the budget (rollout units)."""
    points = branch_points(trees)
    return fill([points[i] for i in rng.permutation(len(points))], budget, k)
