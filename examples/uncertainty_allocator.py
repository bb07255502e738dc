"""A new allocator in one file: uncertainty sampling with a count bonus.

Each step it predicts every candidate prompt's success p with the trainer's shared predictor, scores
it by p(1 - p) (how uncertain the outcome is) + bonus / sqrt(1 + times chosen before), gives the B
best M/B rollouts each, and updates the predictor on their outcomes. Its per-prompt counts survive
restarts through `state()` / `restore()`. Registered as "uncertainty": import this module in a config file.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trace_jax.allocation.base import (ALLOCATORS, AllocationRecord, AllocatorConfig, AllocatorState,
                                       PredictorAllocator, StepOutcome, task_key)
from trace_jax.allocation.budget import spread
from trace_jax.allocation.predictor import featurize


@dataclasses.dataclass(frozen=True, kw_only=True)
class UncertaintyConfig(AllocatorConfig):
    """Attributes:
      bonus: weight of the exploration bonus for prompts chosen rarely.
    """

    bonus: float = 0.1

    def __post_init__(self):
        if self.bonus < 0:
            raise ValueError(f"allocator.bonus must be >= 0, got {self.bonus}")


@ALLOCATORS.register("uncertainty", config=UncertaintyConfig)
class Uncertainty(PredictorAllocator):
    chooses_prompts = True  # offered budget.candidates prompts, trains on budget.prompts of them
    advantage = "grpo"  # the estimator it trains with unless advantage.name says otherwise

    def __init__(self, config, budget, *, seed=0, predictor=None):
        super().__init__(config, budget, seed=seed, predictor=predictor)
        self.chosen: dict[str, int] = {}

    def allocate(self, engine, pool):
        b = self.budget
        candidates = engine.roots(pool)  # prefills the prompts: the predictor reads their hidden states
        p = self.predictor.predict(np.stack([featurize(t, t.root) for t in candidates]))
        n = np.array([self.chosen.get(str(task_key(t.task)), 0) for t in candidates])
        score = p * (1 - p) + self.config.bonus / np.sqrt(1 + n)
        best = sorted(np.argsort(-score, kind="stable")[: b.prompts].tolist())
        counts = spread(b.rollouts, len(best))
        engine.expand(candidates, [(i, 0, k) for i, k in zip(best, counts) if k])  # the ledger counts these
        trees = [candidates[i] for i in best]
        for tree in trees:
            self.chosen[str(task_key(tree.task))] = self.chosen.get(str(task_key(tree.task)), 0) + 1
        return StepOutcome(trees=trees, record=AllocationRecord(root_counts=tuple(counts),
                                                                predictor_loss=self.predictor.update(trees)))

    def state(self) -> AllocatorState:
        base = super().state()
        return dataclasses.replace(base, host={**base.host, "chosen": dict(self.chosen)})

    def restore(self, state: AllocatorState) -> None:
        super().restore(state)
        self.chosen = dict(state.host["chosen"])
