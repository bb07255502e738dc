"""The budget audit passes exact ledgers and fails loudly, naming run and step, on any mismatch."""

import pytest

from configs import quickstart
from trace_jax.compare.audit import BudgetAuditError, audit
from trace_jax.run_config import from_config_dict


def _run(**sections):
    c = quickstart.get_config().to_dict()
    c["rl"]["steps"] = 3
    for dotted, value in sections.items():
        section, key = dotted.split("__")
        c[section][key] = value
    return from_config_dict(c)


def _step(started=32, finished=None, discarded=0, trees=8, spent=None):
    leaves = started - discarded
    out = {"train/ledger/rollouts_started": started, "train/ledger/rollouts_finished": started if finished is None
           else finished, "train/ledger/rollouts_discarded": discarded, "train/ledger/tokens_generated": 100,
           "train/trees": trees, "train/leaves_per_tree": leaves / trees if trees else 0.0}
    if spent is not None:
        out["train/budget_spent"] = spent
    return out


def test_exact_ledgers_pass_and_are_totalled():
    totals = audit("grpo seed 0", _run(allocator__name="grpo"), [_step()] * 3)
    assert totals["rollouts_started"] == 96 and totals["tokens_generated"] == 300


@pytest.mark.parametrize("steps,match", [
    ([_step()] * 2, "2 RL steps logged"),
    ([_step(), _step(started=31, trees=8), _step()], "step 2: 31 rollouts started"),
    ([_step(), _step(), _step(finished=30)], "step 3: 32 rollouts started but 30 finished"),
    ([_step(), {**_step(), "train/leaves_per_tree": 3.0}, _step()], "step 2: 24 trained leaves"),
])
def test_mismatches_fail_naming_run_and_step(steps, match):
    with pytest.raises(BudgetAuditError, match=f"grpo seed 0.*{match}"):
        audit("grpo seed 0", _run(allocator__name="grpo"), steps)


def test_dapo_may_stop_early_only_with_b_mixed_groups():
    run = _run(allocator__name="dapo")
    audit("dapo", run, [_step(started=32, discarded=8, trees=6), _step(started=24, trees=6 + 2), _step()])
    with pytest.raises(BudgetAuditError, match="dapo started 24 rollouts and kept 6 groups"):
        audit("dapo", run, [_step(), _step(started=24, trees=6), _step()])


def test_token_unit_audits_the_rollout_equivalents_spent():
    run = _run(budget__unit="tokens")
    audit("trace", run, [_step(started=40, spent=31.6)] * 3)
    with pytest.raises(BudgetAuditError, match="spent 30.5"):
        audit("trace", run, [_step(started=40, spent=31.6), _step(started=40, spent=30.5), _step(spent=32)])
