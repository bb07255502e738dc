"""TRACE's stage 2 on its own (docs/design.md section 5): the prefix choosers and the stage-2 budget modes, each a
small strategy object in a registry (as stage 1's root policies are, `roots.py`), and what a chosen anchor's
continuations showed. The allocator (`allocator.py`) runs them: a budget mode says how the stage-2 budget is split
into rounds and groups of trees, a chooser how a group's budget goes to its anchors.

Choosers (`allocator.prefixes`): "agreement" (the paper's 1 - q^k), "posterior" (noise-aware: the prefix's success
rate Beta(kappa u, kappa (1 - u)) updated by the outcomes below it), "uniform" (random boundaries; the predictor
is scored there, not used) and "none" (no stage 2: the whole budget at the roots).
Budget modes (`allocator.prefix_budget`): "global" (one pool of M - M1 over all trees, `budget.rounds` rounds) and
"local" (the paper's reading: prompt i spends its own m_i * branch_n continuations on its own prefixes, one round,
so M1 = M / (1 + branch_n))."""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

import numpy as np

from trace_jax.allocation import solvers
from trace_jax.allocation.anchors import branch_points
from trace_jax.rollout.tree import RolloutTree

K_MAX = 16  # continuations one anchor can get in one round


@dataclasses.dataclass(frozen=True)
class Agreement:
    """The paper's chooser: k continuations from an anchor are worth 1 - q^k, q the chance one agrees with the
    outcome already seen below it (`solvers.agreement`)."""

    random = False  # chooses by the predictor
    uses_kappa = False

    def values(self, u: np.ndarray, observed: np.ndarray, leaves: np.ndarray, kappa: Callable[[], float]) -> np.ndarray:
        return solvers.agreement_values(solvers.agreement(observed, u), K_MAX)


@dataclasses.dataclass(frozen=True)
class Posterior:
    """The noise-aware chooser: the prefix's success rate has a Beta(kappa u, kappa (1 - u)) prior, updated by
    the successes among the leaves below it; k continuations are worth the chance they are not all alike."""

    random = False
    uses_kappa = True

    def values(self, u: np.ndarray, observed: np.ndarray, leaves: np.ndarray, kappa: Callable[[], float]) -> np.ndarray:
        return solvers.posterior_values(u, np.round(observed * leaves), leaves, kappa(), K_MAX)


@dataclasses.dataclass(frozen=True)
class Uniform:
    """Random turn boundaries (`anchors.random_anchors`): stage 2 without the predictor's choice."""

    random = True
    uses_kappa = False


PREFIX_CHOOSERS = {"agreement": Agreement(), "posterior": Posterior(), "uniform": Uniform(), "none": None}

Groups = list[tuple[list[int], float]]  # (indices of the trees one choice ranges over, its budget in rollouts)


@dataclasses.dataclass(frozen=True)
class GlobalBudget:
    """One pool over every tree: what stage 1 left of M, split evenly over `budget.rounds` rounds (a round's
    outcomes are seen before the next round chooses)."""

    def root_budget(self, budget, config) -> int:
        return budget.root_budget

    def rounds(self, trees: list[RolloutTree], counts: np.ndarray, left: Callable[[], float], budget, config
               ) -> Iterator[Groups]:
        for r in range(budget.rounds):
            if not branch_points(trees):
                return
            yield [(list(range(len(trees))), left() / (budget.rounds - r))]


@dataclasses.dataclass(frozen=True)
class LocalBudget:
    """The paper's reading: one round in which prompt i spends m_i * branch_n continuations on its own prefixes
    (`local_budgets`), so M1 = M / (1 + branch_n), at least B m_min."""

    def root_budget(self, budget, config) -> int:
        return max(budget.prompts * budget.m_min, budget.rollouts // (1 + config.branch_n))

    def rounds(self, trees: list[RolloutTree], counts: np.ndarray, left: Callable[[], float], budget, config
               ) -> Iterator[Groups]:
        yield [([i], max(x, 0.0)) for i, x in enumerate(local_budgets(counts, config.branch_n, left()))]


PREFIX_BUDGETS = {"global": GlobalBudget(), "local": LocalBudget()}


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
