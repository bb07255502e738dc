"""Where the rollout budget goes: the shared success predictor, the solvers, the allocators.

`make(name_or_config, budget, seed=..., predictor=...)` builds any registered allocator; importing
this package registers all of them (baselines, tree baselines, TRACE)."""

from trace_jax.allocation import baselines, trace, tree_allocators  # noqa: F401  (register the allocators)
from trace_jax.allocation.base import (ALLOCATORS, AllocationRecord, Allocator, AllocatorConfig, StepOutcome,
                                      default_advantage, make, uses_predictor)
from trace_jax.allocation.budget import BudgetConfig

__all__ = ["ALLOCATORS", "AllocationRecord", "Allocator", "AllocatorConfig", "BudgetConfig", "StepOutcome",
           "default_advantage", "make", "uses_predictor"]
