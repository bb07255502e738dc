"""Advantage estimators behind a registry (docs/design.md section 6).

An estimator turns trees into training sequences: one per leaf path, each with the turn nodes it
trains and their advantages. `trace_tree` trains each turn once with
A(y) = [V(y) - V(x)] / (sigma_x + eps) + lambda_local [V(y) - V(a)]; `grpo` and `tree_grpo` are
trajectory-level (every turn of a path gets its leaf's advantage; shared prefixes duplicated).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trace_jax import ranges
from trace_jax.ranges import AT_LEAST_0, POSITIVE, ranged
from trace_jax.registry import Registry
from trace_jax.rollout.tree import RolloutTree


BASELINES = ("all_leaves", "root_rollouts")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdvantageConfig:
    """Attributes:
      name: registry key ("trace_tree", "grpo", "tree_grpo"); unset in a config file, the chosen
        allocator's own (trace: trace_tree; treepo, entropy_branch: tree_grpo; the others: grpo).
      lambda_local: weight of the local (anchor-contrast) term of trace_tree.
      scale: "std" divides the global term by the tree's leaf-success std, "none" does not.
      eps: added to the std.
      baseline: the leaves trace_tree's V(x) and sigma_x are taken over: "all_leaves" (every leaf of the
        tree) or "root_rollouts" (the bare rollouts sampled at the root only: stage-2 branches are placed
        where the predictor expects the outcome to flip, so their leaves pull V(x) toward 0.5 and widen
        sigma_x, as the predictor's root target already excludes them, `RolloutTree.root_rollout_value`).
        Where the bare rollouts agree (their std is 0) sigma_x falls back to the std over all leaves.
    """

    name: str = "trace_tree"
    lambda_local: float = ranged(0.5, AT_LEAST_0)
    scale: str = ranged("std", ("std", "none"))
    eps: float = ranged(1e-6, POSITIVE)
    baseline: str = ranged("all_leaves", BASELINES)

    def __post_init__(self):
        ranges.check(self, "advantage")


@dataclasses.dataclass(frozen=True)
class Sequence:
    """One leaf path to feed the learner: the nodes trained in it and their advantages."""

    tree: int
    leaf: int
    advantages: dict[int, float]  # node id -> advantage of every token of that turn


# name -> estimator(trees, config) -> list[Sequence]
ESTIMATORS: Registry = Registry("advantage estimator", "advantage")


def estimate(trees: list[RolloutTree], config: AdvantageConfig) -> list[Sequence]:
    return ESTIMATORS.entry(config.name).build(trees, config)


def nonzero_advantage_token_share(trees: list[RolloutTree], sequences: list[Sequence]) -> float:
    """Share of the trained tokens (each sequence's own turns) whose advantage is non-zero, under the
    estimator that made `sequences`."""
    total = nonzero = 0
    for seq in sequences:
        for node_id, a in seq.advantages.items():
            n = len(trees[seq.tree].nodes[node_id].tokens)
            total += n
            nonzero += n * bool(abs(a) > 1e-8)
    return nonzero / max(total, 1)


def _successes(tree: RolloutTree) -> np.ndarray:
    return np.array([float(n.success) for n in tree.leaves()])


def node_advantages(tree: RolloutTree, config: AdvantageConfig) -> np.ndarray:
    """trace_tree's A(y) for every node (0 at the root); V(x), sigma_x over `config.baseline`'s leaves."""
    values, _ = tree.values()
    everything = _successes(tree)
    bare = np.array([float(n.success) for n in tree.leaves() if n.origin == 0])
    baseline, sigma = values[0], everything.std()
    if config.baseline == "root_rollouts" and len(bare):
        baseline, sigma = bare.mean(), bare.std() or sigma
    sigma = sigma if config.scale == "std" else 1.0
    adv = np.zeros(len(tree.nodes))
    for node in tree.nodes[1:]:
        anchor = tree.anchor_of(node.id)
        adv[node.id] = ((values[node.id] - baseline) / (sigma + config.eps)
                        + config.lambda_local * (values[node.id] - values[anchor]))
    return adv


@ESTIMATORS.register("trace_tree", config=AdvantageConfig)
def trace_tree(trees, config):
    out = []
    for i, tree in enumerate(trees):
        adv = node_advantages(tree, config)
        trained: set[int] = set()
        for leaf in tree.leaves():
            own = {n.id: float(adv[n.id]) for n in tree.path(leaf.id)[1:] if n.id not in trained}
            trained.update(own)
            out.append(Sequence(i, leaf.id, own))
    return out


def _zscore(x: np.ndarray, config: AdvantageConfig) -> np.ndarray:
    scale = x.std() if config.scale == "std" else 1.0
    return (x - x.mean()) / (scale + config.eps)


@ESTIMATORS.register("grpo", config=AdvantageConfig)
def grpo(trees, config):
    out = []
    for i, tree in enumerate(trees):
        leaves = tree.leaves()
        adv = _zscore(_successes(tree), config)
        for leaf, a in zip(leaves, adv):
            out.append(Sequence(i, leaf.id, {n.id: float(a) for n in tree.path(leaf.id)[1:]}))
    return out


@ESTIMATORS.register("tree_grpo", config=AdvantageConfig)
def tree_grpo(trees, config):
    """Leaf success z-scored within its sub-tree (the bare rollout it branched from) plus across the
    prompt's whole tree, as Tree-GRPO's intra- and inter-tree advantages."""
    out = []
    for i, tree in enumerate(trees):
        leaves = tree.leaves()
        success = _successes(tree)
        inter = _zscore(success, config)
        group = np.array([tree.path(leaf.id)[1].id for leaf in leaves])  # the root child it descends from
        intra = np.zeros(len(leaves))
        for g in np.unique(group):
            intra[group == g] = _zscore(success[group == g], config)
        for leaf, a in zip(leaves, intra + inter):
            out.append(Sequence(i, leaf.id, {n.id: float(a) for n in tree.path(leaf.id)[1:]}))
    return out
