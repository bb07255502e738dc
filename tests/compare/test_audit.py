"""The budget audit passes exact ledgers and fails loudly, naming run and step, on any mismatch."""

import pytest

from configs import quickstart
from trace_jax.compare.audit import BudgetAuditError, audit
from trace_jax.config.files import from_config_dict
from trace_jax.testing import step_record


def _run(**sections):
    c = quickstart.get_config().to_dict()
    c["rl"]["steps"] = 3
    for dotted, value in sections.items():
        section, key = dotted.split("__")
        c[section][key] = value
    return from_config_dict(c)


def _steps(*steps):
    """Step records numbered 1, 2, ... from keyword dicts of `step_record`."""
    return [step_record(i, **kw) for i, kw in enumerate(steps, start=1)]


def test_exact_ledgers_pass_and_are_totalled():
    totals = audit("grpo seed 0", _run(allocator__name="grpo"), _steps({}, {}, {}))
    assert totals.rollouts_started == 96 and totals.tokens_generated == 300


@pytest.mark.parametrize("steps,match", [
    (_steps({}, {}), "2 RL steps logged"),
    (_steps({}, {}, {})[:1] + _steps({}, {}, {})[2:], "2 RL steps logged"),
    (_steps({}, dict(started=31), {}), "step 2: 31 rollouts started"),
    (_steps({}, {}, dict(finished=30)), "step 3: 32 rollouts started but 30 finished"),
    (_steps({}, dict(leaves=24), {}), "step 2: 24 trained leaves"),
])
def test_mismatches_fail_naming_run_and_step(steps, match):
    with pytest.raises(BudgetAuditError, match=f"grpo seed 0.*{match}"):
        audit("grpo seed 0", _run(allocator__name="grpo"), steps)


def test_dapo_may_stop_early_only_with_b_mixed_groups():
    run = _run(allocator__name="dapo")
    audit("dapo", run, _steps(dict(started=32, discarded=8, trees=6), dict(started=24, trees=6 + 2), {}))
    with pytest.raises(BudgetAuditError, match="dapo started 24 rollouts and kept 6 groups"):
        audit("dapo", run, _steps({}, dict(started=24, trees=6), {}))


def test_rollout_equivalents_are_audited_in_the_rollout_unit_and_measured_cost_in_the_token_unit():
    """TRACE prices continuations in rollout-equivalents: with unit="rollouts" it spends M of them to within
    one; with unit="tokens" its stage 2 spends to the step's cost target, so only the cost is audited."""
    steps = _steps(dict(started=40, spent=31.6), dict(started=40, spent=30.5), dict(spent=32))
    audit("trace", _run(budget__unit="rollouts"), _steps(*[dict(started=40, spent=31.6)] * 3))
    with pytest.raises(BudgetAuditError, match="spent 30.5"):
        audit("trace", _run(budget__unit="rollouts"), steps)
    audit("trace", _run(budget__unit="tokens", budget__tokens=100), steps)  # 100 tokens a step, as capped
    # a step whose bare rollouts used the whole cost target: 18 started and spent, M planned 34 (a collapsing
    # policy's long rollouts in the decisive screen): at the cost target, so it passes
    audit("trace", _run(budget__unit="tokens", budget__tokens=100),
          _steps(dict(started=18, spent=18, planned=34), dict(started=40, spent=30.5), dict(spent=32)))
    with pytest.raises(BudgetAuditError, match="step 1: 18 rollouts started"):  # grpo has no such excuse
        audit("grpo", _run(allocator__name="grpo", budget__unit="tokens", budget__tokens=100),
              _steps(dict(started=18, planned=34), {}, {}))
    with pytest.raises(BudgetAuditError, match=r"step 2: measured cost 200 after 2 steps is \+2.00"):
        audit("trace", _run(budget__unit="tokens", budget__tokens=50), steps)


def test_token_unit_audits_the_measured_cost_against_the_cap():
    """The meter may plan any M per step; the running measured cost must track s x budget.tokens."""
    run = _run(allocator__name="grpo", budget__unit="tokens", budget__tokens=1000, budget__prefill_weight=0.5)
    audit("grpo", run, _steps(dict(started=32, tokens=1900, planned=32), dict(started=20, tokens=300, planned=20),
                              dict(started=40, tokens=700, prefilled=200, planned=40)))
    with pytest.raises(BudgetAuditError, match=r"step 2: measured cost 3100 after 2 steps is \+1.10.*"
                                                r"per step: 1700 \(M=32\), 1400 \(M=32\)$"):
        audit("grpo", run, _steps(dict(started=32, tokens=1700, planned=32), dict(started=32, tokens=1400, planned=32),
                                  dict(planned=32)))
    with pytest.raises(BudgetAuditError, match=r"step 3: .* is -1.10"):  # prefill counts at its weight
        audit("grpo", run, _steps(dict(started=32, tokens=800, planned=32), dict(started=32, tokens=800, planned=32),
                                  dict(started=32, tokens=100, prefilled=400, planned=32)))
    with pytest.raises(BudgetAuditError, match="step 1: 31 rollouts started"):
        audit("grpo", run, _steps(dict(started=31, tokens=1000, planned=32), {}, {}))


def test_rollout_unit_refuses_a_step_planned_with_another_m():
    with pytest.raises(BudgetAuditError, match="step 2: planned with M=40"):
        audit("grpo", _run(allocator__name="grpo"), _steps({}, dict(started=40, planned=40), {}))
