"""The per-step rollout budget every allocator spends (docs/design.md sections 4, 5 and 7), and the
integer arithmetic of spreading it, and the token meter that turns a cap on measured tokens into
each step's rollout budget."""

from __future__ import annotations

import dataclasses

import numpy as np

from trace_jax import ranges
from trace_jax.ranges import AT_LEAST_0, AT_LEAST_1, Range, ranged
from trace_jax.rollout.tree import Ledger

MAX_ROLLOUT_SCALE = 4  # unit="tokens": a step's rollout budget is at most this many times budget.rollouts


@dataclasses.dataclass(frozen=True, kw_only=True)
class BudgetConfig:
    """The per-step budget every allocator spends.

    Attributes:
      rollouts: M, rollouts per step; with unit="tokens" only the first step's plan (the token meter
        sets each later step's M from the measured cost per rollout).
      prompts: B, prompts trained per step (at most).
      candidates: C, candidate prompts offered to allocators that choose prompts.
      m_min, m_max: rollouts per chosen prompt at the root.
      root_fraction: M1 / M for the tree allocators (the rest branches at prefixes).
      rounds: L, prefix-expansion rounds.
      unit: "rollouts" (every step spends exactly M rollouts) or "tokens" (every step spends `tokens` of
        measured cost: generated tokens + prefill_weight x prefilled tokens, counted by the engine's
        ledger; the running total is kept within a step of steps x tokens, and TRACE prices a
        continuation by its expected remaining tokens).
      tokens: with unit="tokens", the measured cost each step spends (in the budget an allocator is handed
        for one step: that step's target, the share plus what earlier steps under- or over-spent).
      prefill_weight: what one prefilled token costs relative to a generated one (0: the budget is
        generated tokens alone; prefill and tool calls are still counted and reported).
      branch_k: continuations per branch point for treepo / entropy_branch.
      solver: "greedy" or "dp" for TRACE's stage 1.
    """

    rollouts: int = ranged(32, AT_LEAST_1)
    prompts: int = ranged(8, AT_LEAST_1)
    candidates: int = ranged(32, AT_LEAST_1)
    m_min: int = ranged(2, AT_LEAST_1)
    m_max: int = ranged(8, AT_LEAST_1)
    root_fraction: float = ranged(0.5, Range(0, 1, low_open=True))
    rounds: int = ranged(1, AT_LEAST_0)
    unit: str = ranged("rollouts", ("rollouts", "tokens"))
    tokens: int = ranged(0, AT_LEAST_0)
    prefill_weight: float = ranged(0.0, Range(0, high_open=True))
    branch_k: int = ranged(2, AT_LEAST_1)
    solver: str = ranged("greedy", ("greedy", "dp"))

    def __post_init__(self):
        ranges.check(self, "budget")
        if self.unit == "tokens" and self.tokens <= 0:
            raise ValueError(f"budget.unit='tokens' needs budget.tokens > 0 (the measured cost per step), "
                             f"got {self.tokens}")
        if self.prompts * self.m_min > self.rollouts:
            raise ValueError(f"budget.rollouts={self.rollouts} cannot give budget.prompts={self.prompts} prompts "
                             f"budget.m_min={self.m_min} rollouts each")
        if self.candidates < self.prompts:
            raise ValueError(f"budget.candidates={self.candidates} must be >= budget.prompts={self.prompts}")
        if self.m_min > self.m_max:
            raise ValueError(f"need budget.m_min <= budget.m_max, got {self.m_min}, {self.m_max}")

    @property
    def root_budget(self) -> int:
        return max(self.prompts * self.m_min, int(round(self.rollouts * self.root_fraction)))

    def cost(self, ledger: Ledger) -> float:
        """The measured cost of a ledger in the token unit: generated + prefill_weight x prefilled."""
        return ledger.tokens_generated + self.prefill_weight * ledger.tokens_prefilled


class TokenMeter:
    """unit="tokens": each step's rollout budget M_s from the cap on measured cost.

    M_s = (s x tokens - cost spent so far) / (measured cost per budget unit), the latter a running
    average starting at tokens / rollouts. Paying back what a step over- or under-spent keeps the
    run's total within about a step's cost of steps x tokens, whatever the allocator's rollouts
    cost (branches from turn prefixes are shorter than whole rollouts, so a tree allocator gets more
    of them for the same tokens). The audit (`compare/audit.py`) holds every run to one step's cap."""

    def __init__(self, budget: BudgetConfig):
        self.budget = budget
        self.steps, self.spent, self.cost_per_unit = 0, 0.0, budget.tokens / budget.rollouts

    def target(self) -> float:
        """The measured cost the next step should spend: its share plus what earlier steps under- or
        over-spent (never below 0)."""
        return max((self.steps + 1) * self.budget.tokens - self.spent, 0.0)

    def rollouts(self) -> int:
        """M for the next step."""
        b = self.budget
        return int(np.clip(round(self.target() / self.cost_per_unit), b.prompts * b.m_min,
                           MAX_ROLLOUT_SCALE * b.rollouts))

    def step_budget(self) -> BudgetConfig:
        """The next step's budget: M from the meter, `tokens` its cost target (an allocator that measures
        as it goes, TRACE's stage 2, spends to the target rather than to M)."""
        return dataclasses.replace(self.budget, rollouts=self.rollouts(), tokens=max(int(round(self.target())), 1))

    def record(self, cost: float, units: float) -> None:
        """Books a finished step: its measured cost and the budget units it spent."""
        self.steps, self.spent = self.steps + 1, self.spent + cost
        if units > 0 and cost > 0:
            observed = cost / units
            self.cost_per_unit = observed if self.steps == 1 else 0.5 * (self.cost_per_unit + observed)

    def state(self) -> dict:
        return {"steps": self.steps, "spent": self.spent, "cost_per_unit": self.cost_per_unit}

    def load(self, state: dict) -> None:
        self.steps, self.spent, self.cost_per_unit = int(state["steps"]), float(state["spent"]), float(
            state["cost_per_unit"])


def spread(total: int, parts: int) -> list[int]:
    """total split into `parts` near-equal integers (the first ones get the remainder)."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]
