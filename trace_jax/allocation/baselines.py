"""The allocators that choose prompts or rollouts per prompt but never branch: `grpo`, `dapo`,
`mopps`, `knapsack`, `pcl` (docs/design.md section 7)."""

from __future__ import annotations

import dataclasses

import numpy as np

from trace_jax.allocation import solvers
from trace_jax.allocation.base import (ALLOCATORS, AllocationRecord, Allocator, AllocatorConfig, AllocatorState,
                                       PredictorAllocator, StepOutcome, leaf_success, sample_roots, task_key)
from trace_jax.allocation.budget import spread
from trace_jax.allocation.predictor import featurize


@ALLOCATORS.register("grpo", config=AllocatorConfig)
class GRPO(Allocator):
    """B prompts as given, M/B rollouts each."""

    def allocate(self, engine, pool):
        b = self.budget
        return StepOutcome(trees=sample_roots(engine, pool[: b.prompts], spread(b.rollouts, b.prompts)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DAPOConfig(AllocatorConfig):
    """Attributes:
      oversample: groups DAPO can afford per kept group: the group size is M / (oversample B) (at least
        m_min), so dropped all-equal groups can be refilled within the step's budget (at 1 the first
        round spends everything and nothing is ever refilled).
    """

    oversample: float = 2.0

    def __post_init__(self):
        if self.oversample < 1:
            raise ValueError(f"allocator.oversample must be >= 1, got {self.oversample}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MoPPSConfig(AllocatorConfig):
    """Attributes:
      discount: lambda, how much of a prompt's past evidence survives each update (Beta counts decay
        toward the prior, so the posterior follows a policy that keeps changing; 1 = no decay).
    """

    discount: float = 0.9

    def __post_init__(self):
        if not 0 < self.discount <= 1:
            raise ValueError(f"allocator.discount must be in (0, 1], got {self.discount}")


@ALLOCATORS.register("dapo", config=DAPOConfig)
class DAPO(Allocator):
    """Dynamic sampling: roll groups of M / (oversample B), drop groups with all-equal outcomes, refill
    from the pool until B mixed groups are kept or the budget is spent. Discarded rollouts count."""

    chooses_prompts = True

    def allocate(self, engine, pool):
        b = self.budget
        group = max(b.m_min, b.rollouts // max(1, round(self.config.oversample * b.prompts)))
        kept, spent, index = [], 0, 0
        while len(kept) < b.prompts and spent + group <= b.rollouts and index < len(pool):
            n = min(b.prompts - len(kept), (b.rollouts - spent) // group, len(pool) - index)
            sizes = [group] * n
            left = b.rollouts - spent - n * group
            if 0 < left < group:  # no further group fits: these take the remainder instead of leaving it unspent
                sizes = spread(n * group + left, n)
            trees = sample_roots(engine, pool[index:index + n], sizes)
            index, spent = index + n, spent + sum(sizes)
            for tree, size in zip(trees, sizes):
                if tree.is_mixed():
                    kept.append(tree)
                else:
                    engine.ledger.rollouts_discarded += size
        return StepOutcome(trees=kept, record=AllocationRecord(groups_sampled=index))


class _PerPromptHistory(Allocator):
    """An allocator that keeps one small JSON-able record per prompt it has seen (`self.history`)."""

    history_key = "history"

    def __init__(self, config, budget, **kwargs):
        super().__init__(config, budget, **kwargs)
        self.history: dict[int, list[float]] = {}

    def state(self) -> AllocatorState:
        base = super().state()
        history = [[k, *v] for k, v in sorted(self.history.items())]
        return dataclasses.replace(base, host={**base.host, self.history_key: history})

    def restore(self, state: AllocatorState) -> None:
        super().restore(state)
        self.history = {int(k): [float(x) for x in v] for k, *v in state.host[self.history_key]}


@ALLOCATORS.register("mopps", config=MoPPSConfig)
class MoPPS(_PerPromptHistory):
    """Per-prompt Beta posteriors (prior Beta(1, 1)) with discounted evidence; Thompson-sample the pool,
    keep the B samples closest to 0.5; update with the observed successes. `history`: key -> [a, b]."""

    chooses_prompts = True
    history_key = "posterior"

    def allocate(self, engine, pool):
        b = self.budget
        params = np.array([self.history.get(task_key(t), [1.0, 1.0]) for t in pool])
        draws = self.rng.beta(params[:, 0], params[:, 1])
        chosen = np.argsort(np.abs(draws - 0.5), kind="stable")[: b.prompts]
        tasks = [pool[i] for i in chosen]
        trees = sample_roots(engine, tasks, spread(b.rollouts, len(tasks)))
        for task, tree in zip(tasks, trees):
            s, n = leaf_success(tree)
            a, bb = self.history.get(task_key(task), [1.0, 1.0])
            keep = self.config.discount  # decay the old evidence toward the Beta(1, 1) prior
            self.history[task_key(task)] = [1.0 + keep * (a - 1.0) + s, 1.0 + keep * (bb - 1.0) + n - s]
        return StepOutcome(trees=trees)


def knapsack_values(p: np.ndarray, n_max: int) -> np.ndarray:
    """Knapsack-RL value of N rollouts: P(mixed) x p (1 - p)^2 (zero for N < 2)."""
    n = np.arange(n_max + 1)[None, :]
    p = np.asarray(p, np.float64)[:, None]
    values = (1 - p ** n - (1 - p) ** n) * p * (1 - p) ** 2
    values[:, :2] = 0.0
    return values


@ALLOCATORS.register("knapsack", config=AllocatorConfig)
class KnapsackRL(_PerPromptHistory):
    """Rollouts per prompt by an exact knapsack DP over N in [2, N_max] on each prompt's last observed
    success rate (unseen: 0.5); budget left unvalued is spread over the batch. `history`: key -> [rate]."""

    history_key = "success_rate"

    def allocation(self, pool) -> np.ndarray:
        b = self.budget
        p = np.array([self.history.get(task_key(t), [0.5])[0] for t in pool[: b.prompts]])
        values = knapsack_values(p, b.m_max)
        m = solvers.solve_dp(values, b.rollouts, m_min=max(2, b.m_min), m_max=b.m_max, max_items=b.prompts)
        left = b.rollouts - int(m.sum())
        order = np.argsort(-values[np.arange(len(m)), np.maximum(m, 2)], kind="stable")
        i = 0
        while left > 0:  # spend what the DP could not value, keeping every count >= m_min
            j = order[i % len(order)]
            add = max(1, b.m_min - m[j]) if m[j] == 0 else 1
            if add <= left:
                m[j] += add
                left -= add
            i += 1
        return m

    def allocate(self, engine, pool):
        tasks = list(pool[: self.budget.prompts])
        m = self.allocation(tasks)
        trees = sample_roots(engine, tasks, m)
        for task, tree in zip([t for t, k in zip(tasks, m) if k > 0], trees):
            s, n = leaf_success(tree)
            self.history[task_key(task)] = [s / n]
        return StepOutcome(trees=trees)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PCLConfig(AllocatorConfig):
    """Attributes:
      target: the predicted success rate PCL wants its prompts at (0.5: the most informative).
    """

    target: float = 0.5

    def __post_init__(self):
        if not 0 < self.target < 1:
            raise ValueError(f"allocator.target must be in (0, 1), got {self.target}")


@ALLOCATORS.register("pcl", config=PCLConfig)
class PCL(PredictorAllocator):
    """Prompt Curriculum Learning: a value model (the shared success predictor, on the prompt alone)
    predicts each candidate's success; the B prompts predicted nearest `target` get M/B rollouts each;
    the value model then learns from their outcomes. No tree, no per-prompt knapsack."""

    chooses_prompts = True

    def allocate(self, engine, pool):
        b = self.budget
        candidates = engine.roots(pool)
        v = self.predictor.predict(np.stack([featurize(t, t.root) for t in candidates]))
        chosen = sorted(np.argsort(np.abs(v - self.config.target), kind="stable")[: b.prompts])
        counts = np.zeros(len(candidates), int)
        counts[chosen] = spread(b.rollouts, len(chosen))
        engine.expand(candidates, [(i, 0, int(k)) for i, k in enumerate(counts) if k > 0])
        trees = [candidates[i] for i in chosen]
        return StepOutcome(trees=trees, record=AllocationRecord(root_counts=tuple(int(counts[i]) for i in chosen),
                                                                predictor_loss=self.predictor.update(trees)))
