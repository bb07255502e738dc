"""TRACE (METHOD.md sections 4 and 5): one shared success predictor steers a root policy (stage 1)
and a prefix chooser (stage 2). The ablations of the paper's uniform/active table are other choices
of the two parts: `roots="uniform"` (the pool's first B prompts, as grpo and tree_random take them)
and `prefixes="none"` (the whole budget spent at the roots).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trace_jax.allocation import solvers
from trace_jax.allocation.base import ALLOCATORS, Allocator, AllocatorConfig, StepOutcome, spend_leftover
from trace_jax.allocation.budget import BudgetConfig, spread
from trace_jax.allocation.calibration import calibration
from trace_jax.allocation.predictor import SuccessPredictor, featurize
from trace_jax.allocation.tree_allocators import Anchor, branch_points, expected_remaining_tokens
from trace_jax.rollout.tree import RolloutTree


def predicted_roots(v: np.ndarray, budget: BudgetConfig, root_budget: int) -> np.ndarray:
    """Stage 1: m_i in {0} U [m_min, m_max] maximizing sum_i 1 - v_i^m - (1 - v_i)^m (knapsack)."""
    b = budget
    if b.solver == "dp":
        return solvers.solve_dp(solvers.root_values(v, b.m_max), root_budget, m_min=b.m_min, m_max=b.m_max,
                                max_items=b.prompts)
    return solvers.root_greedy(v, root_budget, m_min=b.m_min, m_max=b.m_max, max_items=b.prompts)


def uniform_roots(v: np.ndarray, budget: BudgetConfig, root_budget: int) -> np.ndarray:
    """The pool's first B prompts, the root budget spread evenly over them (predictions unused)."""
    m = np.zeros(len(v), int)
    m[: budget.prompts] = spread(root_budget, min(budget.prompts, len(v)))
    return m


ROOT_POLICIES = {"predicted": predicted_roots, "uniform": uniform_roots}


@dataclasses.dataclass(frozen=True)
class PrefixChoice:
    """One round of stage 2: the anchors, the predictions they were chosen on, and the spend."""

    candidates: int  # turn boundaries that could have been chosen
    anchors: list[Anchor]
    predictions: list[float]  # u of each chosen anchor (before its continuations were seen)
    spent: float  # budget units


def agreement_prefixes(trees: list[RolloutTree], predictor: SuccessPredictor, budget: BudgetConfig,
                       round_budget: float) -> PrefixChoice:
    """Stage 2: k continuations per turn boundary by greedy on 1 - q^k, q = r u + (1 - r)(1 - u) the
    chance a continuation agrees with the outcome r already seen through the prefix (u predicted)."""
    points = branch_points(trees)
    if not points:
        return PrefixChoice(0, [], [], 0.0)
    nodes = [(trees[i], trees[i].nodes[j]) for i, j in points]
    u = predictor.predict(np.stack([featurize(t, n) for t, n in nodes]))
    observed = np.array([t.values()[0][n.id] for t, n in nodes])
    q = solvers.agreement(observed, u)
    if budget.unit == "tokens":
        remaining_tokens = expected_remaining_tokens(trees)
        cost = np.array([remaining_tokens(n.depth) for _, n in nodes])
    else:
        cost = np.ones(len(nodes))
    k = solvers.prefix_greedy(q, cost, round_budget)
    chosen = np.flatnonzero(k)
    return PrefixChoice(len(points), [(*points[c], int(k[c])) for c in chosen], [float(u[c]) for c in chosen],
                        float(np.sum(k * cost)))


PREFIX_CHOOSERS = {"agreement": agreement_prefixes, "none": None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceConfig(AllocatorConfig):
    """Attributes:
      roots: stage 1's root policy: "predicted" (knapsack on the predicted mixed chance) or "uniform".
      prefixes: stage 2's chooser: "agreement" (branch where a continuation likely disagrees) or
        "none" (no stage 2: the whole budget goes to the roots).
    """

    roots: str = "predicted"
    prefixes: str = "agreement"

    def __post_init__(self):
        if self.roots not in ROOT_POLICIES:
            raise ValueError(f"allocator.roots must be one of {sorted(ROOT_POLICIES)}, got {self.roots!r}")
        if self.prefixes not in PREFIX_CHOOSERS:
            raise ValueError(f"allocator.prefixes must be one of {sorted(PREFIX_CHOOSERS)}, got {self.prefixes!r}")


def new_success(tree: RolloutTree, node_id: int, new_leaves: list[int]) -> float:
    """Mean success of the given new leaves that descend from node_id."""
    below = [leaf for leaf in new_leaves if node_id in {n.id for n in tree.path(leaf)}]
    return float(np.mean([tree.nodes[leaf].success for leaf in below])) if below else float("nan")


@ALLOCATORS.register("trace", config=TraceConfig)
class TRACE(Allocator):
    """Stage 1: roots by the predicted chance of mixed outcomes; stage 2: prefixes by the chance a
    continuation disagrees with the outcome already seen through them; one shared predictor."""

    chooses_prompts = True
    uses_predictor = True

    def __init__(self, config: TraceConfig, budget, *, seed=0, predictor=None):
        super().__init__(config, budget, seed=seed, predictor=predictor)
        self.predictor = predictor
        self.choose_roots = ROOT_POLICIES[config.roots]
        self.choose_prefixes = PREFIX_CHOOSERS[config.prefixes]

    def step(self, engine, pool):
        b = self.budget
        candidates = engine.roots(pool)
        v = self.predictor.predict(np.stack([featurize(t, t.root) for t in candidates]))
        m = self.choose_roots(v, b, b.root_budget if self.choose_prefixes else b.rollouts)
        bare = engine.expand(candidates, [(i, 0, int(k)) for i, k in enumerate(m) if k > 0])
        trees = [t for t, k in zip(candidates, m) if k > 0]
        # (prediction, outcome) pairs, the outcome being the mean success of the continuations sampled
        # because of that prediction (not of leaves seen before it was made)
        outcomes = [(float(v[i]), new_success(candidates[i], 0, [leaf for t, leaf in bare if t == i]))
                    for i in np.flatnonzero(m)]
        remaining = b.rollouts - int(m.sum())
        rounds = b.rounds if self.choose_prefixes else 0
        for r in range(rounds):
            choice = self.choose_prefixes(trees, self.predictor, b, remaining / (rounds - r))
            if not choice.candidates:
                break
            remaining -= choice.spent
            new = engine.expand(trees, choice.anchors)
            outcomes += [(p, new_success(trees[i], j, [leaf for t, leaf in new if t == i]))
                         for p, (i, j, _) in zip(choice.predictions, choice.anchors)]
        leftover = int(np.floor(remaining + 1e-9))  # whole rollouts (cost 1 in either unit) to the roots
        spend_leftover(engine, trees, leftover)
        pred = np.array([p for p, _ in outcomes])
        return StepOutcome(trees=trees, calibration=calibration(pred, np.array([o for _, o in outcomes])),
                           budget_spent=b.rollouts - remaining + max(leftover, 0),
                           predictor_loss=self.predictor.update(trees))

    def state(self):
        return {"predictor": self.predictor.state()}

    def host_state(self):
        return {**super().host_state(), "predictor": self.predictor.host_state()}

    def state_template(self, host):
        return {"predictor": self.predictor.state_template(host["predictor"])}

    def load_state(self, state, host=None):
        self.predictor.load_state(state["predictor"], None if host is None else host["predictor"])
