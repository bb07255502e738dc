"""The per-step rollout budget every allocator spends (METHOD.md sections 4, 5 and 7), and the
integer arithmetic of spreading it."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class BudgetConfig:
    """The per-step budget every allocator spends.

    Attributes:
      rollouts: M, rollouts per step (or rollout-equivalents of tokens with unit="tokens").
      prompts: B, prompts trained per step (at most).
      candidates: C, candidate prompts offered to allocators that choose prompts.
      m_min, m_max: rollouts per chosen prompt at the root.
      root_fraction: M1 / M for the tree allocators (the rest branches at prefixes).
      rounds: L, prefix-expansion rounds.
      unit: "rollouts" (each continuation costs 1) or "tokens" (costs its expected remaining tokens).
      branch_k: continuations per branch point for tree_random / entropy_branch.
      solver: "greedy" or "dp" for TRACE's stage 1.
    """

    rollouts: int = 32
    prompts: int = 8
    candidates: int = 32
    m_min: int = 2
    m_max: int = 8
    root_fraction: float = 0.5
    rounds: int = 1
    unit: str = "rollouts"
    branch_k: int = 2
    solver: str = "greedy"

    def __post_init__(self):
        if self.unit not in ("rollouts", "tokens"):
            raise ValueError(f"budget.unit must be 'rollouts' or 'tokens', got {self.unit!r}")
        if self.solver not in ("greedy", "dp"):
            raise ValueError(f"budget.solver must be 'greedy' or 'dp', got {self.solver!r}")
        if not 0.0 < self.root_fraction <= 1.0:
            raise ValueError(f"budget.root_fraction must be in (0, 1], got {self.root_fraction}")
        if self.prompts < 1:
            raise ValueError(f"budget.prompts must be >= 1, got {self.prompts}")
        if self.prompts * self.m_min > self.rollouts:
            raise ValueError(f"budget.rollouts={self.rollouts} cannot give budget.prompts={self.prompts} prompts "
                             f"budget.m_min={self.m_min} rollouts each")
        if self.candidates < self.prompts:
            raise ValueError(f"budget.candidates={self.candidates} must be >= budget.prompts={self.prompts}")
        if not 1 <= self.m_min <= self.m_max:
            raise ValueError(f"need 1 <= budget.m_min <= budget.m_max, got {self.m_min}, {self.m_max}")
        if self.rounds < 0 or self.branch_k < 1:
            raise ValueError(f"need budget.rounds >= 0 and budget.branch_k >= 1, got {self.rounds}, {self.branch_k}")

    @property
    def root_budget(self) -> int:
        return max(self.prompts * self.m_min, int(round(self.rollouts * self.root_fraction)))


def spread(total: int, parts: int) -> list[int]:
    """total split into `parts` near-equal integers (the first ones get the remainder)."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]
