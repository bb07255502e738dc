"""The branching baselines: bare chains at the roots, then L rounds of branching at turn boundaries
chosen without a predictor: `treepo` (random tree nodes, as the TRACE paper's TreePO baseline; called
`tree_random` before) and `entropy_branch` (ARPO-like)."""

from __future__ import annotations

import abc

import numpy as np

from trace_jax.allocation.anchors import Anchor, branch_points, fill, random_anchors
from trace_jax.allocation.base import ALLOCATORS, Allocator, AllocatorConfig, StepOutcome, sample_roots, spend_leftover
from trace_jax.allocation.budget import spread
from trace_jax.rollout.tree import RolloutTree

class TreeAllocator(Allocator):
    """Shared shape of the branching baselines: m bare chains per prompt, then L rounds of branching;
    trained with Tree-GRPO's intra- plus inter-tree advantages."""

    advantage = "tree_grpo"

    def allocate(self, engine, pool):
        b = self.budget
        tasks = list(pool[: b.prompts])
        trees = sample_roots(engine, tasks, spread(b.root_budget, len(tasks)))
        remaining = b.rollouts - b.root_budget
        for r in range(b.rounds):
            round_budget = remaining // (b.rounds - r)
            anchors = self.choose(trees, round_budget)
            remaining -= sum(k for _, _, k in anchors)
            engine.expand(trees, anchors)
        spend_leftover(engine, trees, remaining)
        return StepOutcome(trees=trees)

    @abc.abstractmethod
    def choose(self, trees: list[RolloutTree], budget: int) -> list[Anchor]:
        """(tree, node, k) anchors with sum k <= budget."""


@ALLOCATORS.register("treepo", config=AllocatorConfig)
class TreePO(TreeAllocator):
    """TreePO / Tree-GRPO-like: branch uniformly random non-terminal turn boundaries."""

    def choose(self, trees, budget):
        return random_anchors(trees, self.rng, budget, self.budget.branch_k)


@ALLOCATORS.register("entropy_branch", config=AllocatorConfig)
class EntropyBranch(TreeAllocator):
    """ARPO-like: branch after the tool observations where the next turn's token entropy rises most
    over the turn before it."""

    window = 8

    def choose(self, trees, budget):
        scored = []
        for tree_index, node_id in branch_points(trees):
            tree = trees[tree_index]
            node = tree.nodes[node_id]
            child = tree.nodes[node.children[0]] if node.children else None
            if child is None or not child.entropy or not node.entropy:
                continue
            rise = float(np.mean(child.entropy[: self.window]) - np.mean(node.entropy))
            scored.append((rise, tree_index, node_id))
        scored.sort(key=lambda s: -s[0])
        return fill([(t, n) for _, t, n in scored], budget, self.budget.branch_k)
