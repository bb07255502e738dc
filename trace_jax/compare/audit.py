"""The budget audit: a comparison is only valid when every run spent exactly the configured budget
(METHOD.md section 7). Reads each step's ledger from the run's `StepRecord`s and fails loudly otherwise."""

from __future__ import annotations

from trace_jax.records import StepRecord
from trace_jax.rollout.tree import Ledger
from trace_jax.run_config import RunConfig


class BudgetAuditError(RuntimeError):
    """A run's ledger differs from the configured budget."""


def audit(name: str, run: RunConfig, steps: list[StepRecord]) -> Ledger:
    """Checks every RL step of one run (its records in step order); returns the run's ledger totals."""
    budget = run.budget
    if [r.step for r in steps] != list(range(1, run.rl.steps + 1)):
        raise BudgetAuditError(f"{name}: {len(steps)} RL steps logged, configured rl.steps={run.rl.steps}")
    for record in steps:
        def fail(what: str):
            raise BudgetAuditError(f"{name}, step {record.step}: {what} (budget.rollouts={budget.rollouts}, "
                                   f"budget.unit={budget.unit!r}, allocator {run.allocator.name!r})")

        ledger, trees = record.ledger, record.trees
        started = ledger.rollouts_started
        if ledger.rollouts_finished != started:
            fail(f"{started} rollouts started but {ledger.rollouts_finished} finished")
        if trees.leaves + ledger.rollouts_discarded != started:
            fail(f"{trees.leaves} trained leaves + {ledger.rollouts_discarded} discarded != {started} rollouts started")
        if budget.unit == "tokens":
            spent = record.budget_spent
            if spent is None or not budget.rollouts - 1 < spent <= budget.rollouts + 1e-6:
                fail(f"spent {spent} rollout-equivalents")
        elif run.allocator.name == "dapo":  # may stop early, but only once it kept B mixed groups
            if started > budget.rollouts or (started < budget.rollouts and trees.trees < budget.prompts):
                fail(f"dapo started {started} rollouts and kept {trees.trees} groups")
        elif started != budget.rollouts:
            fail(f"{started} rollouts started")
    return sum((r.ledger for r in steps), Ledger())
