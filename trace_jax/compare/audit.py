"""The budget audit: a comparison is only valid when every run spent exactly the configured budget
(METHOD.md section 7). Reads each step's ledger from the run's metrics and fails loudly otherwise."""

from __future__ import annotations

from trace_jax.run_config import RunConfig


class BudgetAuditError(RuntimeError):
    """A run's ledger differs from the configured budget."""


def audit(name: str, run: RunConfig, steps: list[dict]) -> dict[str, float]:
    """Checks every RL step of one run; returns the run's ledger totals.

    steps: one dict per RL step with the `train/...` metrics the trainer logs."""
    budget = run.budget
    if len(steps) != run.rl.steps:
        raise BudgetAuditError(f"{name}: {len(steps)} RL steps logged, configured rl.steps={run.rl.steps}")
    totals: dict[str, float] = {}
    for i, m in enumerate(steps, start=1):
        def fail(what: str):
            raise BudgetAuditError(f"{name}, step {i}: {what} (budget.rollouts={budget.rollouts}, "
                                   f"budget.unit={budget.unit!r}, allocator {run.allocator.name!r})")

        started, finished = m["train/ledger/rollouts_started"], m["train/ledger/rollouts_finished"]
        discarded = m["train/ledger/rollouts_discarded"]
        leaves = round(m["train/leaves_per_tree"] * m["train/trees"]) if m["train/trees"] else 0
        if finished != started:
            fail(f"{started:.0f} rollouts started but {finished:.0f} finished")
        if leaves + discarded != started:
            fail(f"{leaves} trained leaves + {discarded:.0f} discarded != {started:.0f} rollouts started")
        if budget.unit == "tokens":
            spent = m.get("train/budget_spent")
            if spent is None or not budget.rollouts - 1 < spent <= budget.rollouts + 1e-6:
                fail(f"spent {spent} rollout-equivalents")
        elif run.allocator.name == "dapo":  # may stop early, but only once it kept B mixed groups
            if started > budget.rollouts or (started < budget.rollouts and m["train/trees"] < budget.prompts):
                fail(f"dapo started {started:.0f} rollouts and kept {m['train/trees']:.0f} groups")
        elif started != budget.rollouts:
            fail(f"{started:.0f} rollouts started")
        for key, value in m.items():
            if key.startswith("train/ledger/"):
                totals[key.removeprefix("train/ledger/")] = totals.get(key.removeprefix("train/ledger/"), 0) + value
    return totals
