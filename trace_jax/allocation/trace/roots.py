"""TRACE's stage 1: which prompts get rollouts at the root, and how many (docs/design.md section 4). A root policy
maps the shared predictor's success probabilities v of the candidate prompts to rollouts per prompt."""

from __future__ import annotations

import numpy as np

from trace_jax.allocation import solvers
from trace_jax.allocation.budget import BudgetConfig, spread


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
