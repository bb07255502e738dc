"""The budget audit: a comparison is only valid when every run spent exactly the configured budget
(docs/design.md section 7). Reads each step's ledger from the run's `StepRecord`s and fails loudly otherwise.

Every step: rollouts started = finished = trained leaves + discarded, and the step spent the M it was
planned with (`record.allocation.rollout_budget`; dapo may stop early once it kept B mixed groups; TRACE, whose
budget_spent counts rollout-equivalents, spends M of them to within one, or with budget.unit="tokens"
spends to the step's measured-cost target, whatever M). With budget.unit="tokens" the
measured cost (`BudgetConfig.cost` of the engine's ledger) is audited too: after every step s the
run's total is within TOKEN_TOLERANCE (one step's cap) of s x budget.tokens (dapo may stay below).
"""

from __future__ import annotations

from trace_jax.allocation.budget import BudgetConfig
from trace_jax.config.schema import RunConfig
from trace_jax.rollout.tree import Ledger
from trace_jax.run.records import StepRecord

# Of one step's budget.tokens: how far the running total may drift from s x tokens. The meter's first
# step plans with budget.tokens / budget.rollouts per rollout; an allocator whose rollouts cost 1.5x
# GRPO's (PCL choosing long multi-hop prompts did) is half a step over before the meter has measured it.
TOKEN_TOLERANCE = 1.0


class BudgetAuditError(RuntimeError):
    """A run's ledger differs from the configured budget."""


def audit(name: str, run: RunConfig, steps: list[StepRecord]) -> Ledger:
    """Checks every RL step of one run (its records in step order); returns the run's ledger totals."""
    budget = run.budget
    if [r.step for r in steps] != list(range(1, run.rl.steps + 1)):
        raise BudgetAuditError(f"{name}: {len(steps)} RL steps logged, configured rl.steps={run.rl.steps}")
    dapo = run.allocator.name == "dapo"
    for record in steps:
        planned = budget.rollouts if record.allocation.rollout_budget is None else record.allocation.rollout_budget

        def fail(what: str):
            raise BudgetAuditError(f"{name}, step {record.step}: {what} (planned M={planned}, budget.rollouts="
                                   f"{budget.rollouts}, budget.unit={budget.unit!r}, allocator {run.allocator.name!r})")

        ledger, trees = record.ledger, record.trees
        started = ledger.rollouts_started
        if budget.unit == "rollouts" and planned != budget.rollouts:
            fail(f"planned with M={planned}")
        if ledger.rollouts_finished != started:
            fail(f"{started} rollouts started but {ledger.rollouts_finished} finished")
        if trees.leaves + ledger.rollouts_discarded != started:
            fail(f"{trees.leaves} trained leaves + {ledger.rollouts_discarded} discarded != {started} rollouts started")
        if dapo:  # may stop early, but only once it kept B mixed groups
            if started > planned or (started < planned and trees.trees < budget.prompts):
                fail(f"dapo started {started} rollouts and kept {trees.trees} groups")
        elif (spent := record.allocation.budget_spent) is not None and (budget.unit == "tokens" or spent != started):
            # priced in rollout-equivalents. unit="tokens": spent to the step's measured-cost target, so its M is
            # not audited, its cost is (below), also when its spend happens to equal the rollouts it started (a
            # step whose bare rollouts used the whole target and left stage 2 nothing: seen on a collapsing
            # policy, whose runs this branch used to fail as "18 rollouts started (planned M=34)")
            if budget.unit == "rollouts" and not planned - 1 < spent <= planned + 1e-6:
                fail(f"spent {spent} rollout-equivalents")
        elif started != planned:
            fail(f"{started} rollouts started")
    if budget.unit == "tokens":
        audit_cost(name, budget, [r.ledger for r in steps], may_underspend=dapo,
                   planned=[r.allocation.rollout_budget for r in steps])
    return sum((r.ledger for r in steps), Ledger())


def audit_cost(name: str, budget: BudgetConfig, ledgers: list[Ledger], *, may_underspend: bool = False,
               planned: list[int | None] | None = None) -> float:
    """budget.unit="tokens": after every step s the measured cost so far is within TOKEN_TOLERANCE of a
    step's budget.tokens from s x budget.tokens (below it is allowed where `may_underspend`). Returns the
    final drift, in steps' budget.tokens. `planned`: each step's M, named in the error."""
    total, drift, costs = 0.0, 0.0, []
    for step, ledger in enumerate(ledgers, start=1):
        costs.append(budget.cost(ledger))
        total += costs[-1]
        drift = (total - step * budget.tokens) / budget.tokens
        if drift > TOKEN_TOLERANCE or (drift < -TOKEN_TOLERANCE and not may_underspend):
            history = ", ".join(f"{c:.0f}" + ("" if planned is None else f" (M={planned[i]})")
                                for i, c in enumerate(costs))
            raise BudgetAuditError(f"{name}, step {step}: measured cost {total:.0f} after {step} steps is {drift:+.2f} "
                                   f"steps' budget.tokens={budget.tokens} off {step} x budget.tokens (generated + "
                                   f"{budget.prefill_weight} x prefilled); per step: {history}")
    return drift
