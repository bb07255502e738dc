"""TRACE's stage 2 on its own: the prefix choosers' names, what a chosen anchor's continuations showed, and how
the paper's local mode splits the stage-2 budget over prompts (docs/design.md section 5). The choice itself, which
needs the allocator's predictor and noise model, is `TRACE._choose` (`allocator.py`)."""

from __future__ import annotations

import numpy as np

from trace_jax.rollout.tree import RolloutTree

PREFIX_CHOOSERS = ("agreement", "posterior", "uniform", "none")


def new_success(tree: RolloutTree, node_id: int, new_leaves: list[int]) -> float:
    """Mean success of the given new leaves that descend from node_id."""
    below = [leaf for leaf in new_leaves if node_id in {n.id for n in tree.path(leaf)}]
    return float(np.mean([tree.nodes[leaf].success for leaf in below])) if below else float("nan")


def local_budgets(counts: np.ndarray, n: int, available: float) -> list[float]:
    """Prompt i's own stage-2 budget m_i * N; when M1 + sum m_i N exceeds M (M1 rounded up to B m_min,
    or the holdout took some), the available rollouts are split in proportion to m_i instead."""
    want = counts * n
    if want.sum() <= available:
        return [float(w) for w in want]
    share = np.floor(available * counts / counts.sum())
    share[: int(available - share.sum())] += 1
    return [float(x) for x in share]
