"""Every registered allocator spends exactly the configured budget and keeps its own bookkeeping right;
TRACE's ablations are its root policy and prefix chooser swapped."""

import json

import numpy as np
import pytest

from trace_jax import allocation
from trace_jax.allocation import ALLOCATORS, BudgetConfig, solvers
from trace_jax.allocation.base import AllocatorState, task_key
from trace_jax.allocation.baselines import knapsack_values
from trace_jax.allocation.predictor import SuccessPredictor, feature_width
from trace_jax.allocation.trace import TraceConfig
from trace_jax.registry import RegistryError
from trace_jax.rollout.agent_loop import RolloutEngine

BUDGET = BudgetConfig(rollouts=12, prompts=3, candidates=6, m_min=2, m_max=4, root_fraction=0.5)


def _predictor(tiny_setup, seed=0):
    return SuccessPredictor(feature_width(tiny_setup.config.hidden_size), seed=seed)


def _through_json(state: AllocatorState) -> AllocatorState:
    """The state as a checkpoint keeps it: the host part through JSON (the arrays go to orbax as they are)."""
    return AllocatorState(state.arrays, json.loads(json.dumps(state.host)))


def _make(tiny_setup, config, budget=BUDGET, seed=0):
    name = config if isinstance(config, str) else config.name
    predictor = _predictor(tiny_setup, seed) if allocation.uses_predictor(name) else None
    return allocation.make(config, budget, seed=seed, predictor=predictor)


def _run(tiny_setup, name, budget=BUDGET, seed=0):
    alloc = _make(tiny_setup, name, budget, seed)
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=seed)
    pool = tiny_setup.source.tasks("train")[: alloc.pool_size]
    return alloc, engine, alloc.step(engine, pool)


@pytest.mark.parametrize("name", ALLOCATORS.names())
def test_ledger_matches_the_budget_and_trees_are_complete(tiny_setup, name):
    _, engine, outcome = _run(tiny_setup, name)
    ledger = engine.ledger
    assert ledger.rollouts_started == ledger.rollouts_finished == BUDGET.rollouts
    assert ledger.tokens_generated == sum(len(n.tokens) for t in outcome.trees for n in t.nodes[1:]) \
        or name == "dapo"
    for tree in outcome.trees:
        assert tree.open_nodes() == []
        assert all(n.terminal == (not n.children) for n in tree.nodes[1:])


def test_dapo_counts_what_it_discards(tiny_setup):
    _, engine, outcome = _run(tiny_setup, "dapo")
    kept = sum(len(t.leaves()) for t in outcome.trees)
    assert engine.ledger.rollouts_discarded == BUDGET.rollouts - kept
    assert all(t.is_mixed() for t in outcome.trees)


def test_mopps_posterior_is_the_beta_update(tiny_setup):
    alloc, _, outcome = _run(tiny_setup, "mopps")
    for tree in outcome.trees:
        s = sum(n.success for n in tree.leaves())
        n = len(tree.leaves())
        assert alloc.history[task_key(tree.task)] == [1.0 + s, 1.0 + n - s]
    restored = allocation.make("mopps", BUDGET)
    restored.restore(_through_json(alloc.state()))
    assert restored.history == alloc.history


def test_knapsack_allocation_is_its_dp():
    alloc = allocation.make("knapsack", BudgetConfig(rollouts=10, prompts=4, candidates=4, m_min=2, m_max=4))
    pool = [type("T", (), {"id": f"t{i}"})() for i in range(4)]
    rates = [0.5, 0.1, 0.9, 0.3]
    alloc.history = {task_key(t): [r] for t, r in zip(pool, rates)}
    m = alloc.allocation(pool)
    table = knapsack_values(np.array(rates), 4)
    best = solvers.brute_force(table, 10, m_min=2, m_max=4, max_items=4)
    assert m.sum() == 10
    assert solvers.objective(table, m) == pytest.approx(solvers.objective(table, best))


def test_trace_state_round_trips(tiny_setup):
    alloc, _, outcome = _run(tiny_setup, "trace")
    assert outcome.record.calibration is not None and outcome.record.calibration.n > 0
    other = _make(tiny_setup, "trace", seed=3)
    other.restore(alloc.state())
    x = np.random.default_rng(0).normal(size=(4, feature_width(tiny_setup.config.hidden_size)))
    np.testing.assert_allclose(other.predictor.predict(x), alloc.predictor.predict(x))


@pytest.mark.parametrize("bad,field", [
    (dict(unit="seconds"), "unit"), (dict(solver="magic"), "solver"), (dict(root_fraction=0.0), "root_fraction"),
    (dict(rollouts=4, prompts=3), "rollouts"), (dict(candidates=2), "candidates"), (dict(m_min=5), "m_min"),
])
def test_bad_budget_names_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        BudgetConfig(**{**dict(rollouts=12, prompts=3, candidates=6, m_min=2, m_max=4), **bad})


def test_unknown_allocator_is_named():
    with pytest.raises(RegistryError, match="nope"):
        allocation.make("nope", BUDGET)


def test_an_allocator_that_steers_by_a_predictor_requires_one():
    with pytest.raises(ValueError, match="trace allocator steers by a SuccessPredictor"):
        allocation.make("trace", BUDGET)


def test_trace_stage1_only_spends_everything_at_the_roots(tiny_setup):
    alloc = _make(tiny_setup, TraceConfig(prefixes="none"))
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=0)
    outcome = alloc.step(engine, tiny_setup.source.tasks("train")[: alloc.pool_size])
    assert engine.ledger.rollouts_started == BUDGET.rollouts == outcome.record.budget_spent
    assert sum(len(t.root.children) for t in outcome.trees) == BUDGET.rollouts  # no prefix was branched
    assert all(len(n.children) <= 1 for t in outcome.trees for n in t.nodes[1:])


def test_trace_stage2_only_takes_uniform_roots_then_branches(tiny_setup):
    alloc = _make(tiny_setup, TraceConfig(roots="uniform"))
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=0)
    pool = tiny_setup.source.tasks("train")[: alloc.pool_size]
    outcome = alloc.step(engine, pool)
    assert [t.task.id for t in outcome.trees] == [t.id for t in pool[: BUDGET.prompts]]
    assert engine.ledger.rollouts_started == BUDGET.rollouts
    first_chains = [sum(1 for c in t.root.children) for t in outcome.trees]
    assert sum(first_chains) >= BUDGET.root_budget  # roots got spread(root_budget, B) (+ any leftover)
    with pytest.raises(ValueError, match="allocator.roots"):
        TraceConfig(roots="neither")


def test_stage1_varies_m_on_a_heterogeneous_pool_when_the_root_budget_leaves_room():
    """With M1 = 24 > B m_min = 16 and prompts of different predicted success, the ones near v = 0.5
    get more rollouts: stage 1 is a knapsack, not "B prompts at m_min". (Offered many candidates near
    0.5 it opens B similar ones and gives them equal m: that is the optimum, not a degeneracy.)"""
    from trace_jax.allocation.trace import predicted_roots
    budget = BudgetConfig(rollouts=32, prompts=8, candidates=8, m_min=2, m_max=8, root_fraction=0.75)
    v = np.array([0.5, 0.45, 0.3, 0.7, 0.1, 0.9, 0.05, 0.97])
    m = predicted_roots(v, budget, budget.root_budget)
    assert m.sum() == 24 and np.std(m[m > 0]) > 0  # here [4, 4, 5, 5, 3, 3, 0, 0]
    assert m[0] > m[4] > m[6] and m[-1] == 0  # v = 0.5 over v = 0.1 over the near-certain ones


@pytest.mark.parametrize("config", [
    TraceConfig(prefix_budget="local", branch_n=2),
    TraceConfig(prefixes="posterior", holdout=2),
    TraceConfig(prefix_budget="local", prefixes="posterior", holdout=1),
    TraceConfig(prefixes="uniform"),
], ids=["local-agreement", "global-posterior-holdout", "local-posterior-holdout", "active-roots-uniform-prefixes"])
def test_trace_modes_spend_exactly_the_budget_and_log_what_they_did(tiny_setup, config):
    budget = BudgetConfig(rollouts=16, prompts=3, candidates=6, m_min=2, m_max=4)
    alloc = _make(tiny_setup, config, budget)
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=1)
    outcome = alloc.step(engine, tiny_setup.source.tasks("train")[: alloc.pool_size])
    assert engine.ledger.rollouts_started == engine.ledger.rollouts_finished == budget.rollouts
    assert sum(len(t.leaves()) for t in outcome.trees) == budget.rollouts
    assert outcome.record.root_counts and sum(outcome.record.root_counts) <= budget.rollouts
    if config.prefix_budget == "local":  # M1 = M / (1 + N), at least B m_min
        assert sum(outcome.record.root_counts) == max(budget.prompts * budget.m_min, budget.rollouts // 3)
    if config.holdout:
        assert outcome.record.holdout_calibration is None or outcome.record.holdout_calibration.n <= config.holdout
    branched = [n for t in outcome.trees for n in t.nodes[1:] if n.origin != 0]
    assert branched or config.prefixes == "uniform"  # continuations from turn prefixes were bought
    # every stage-2 anchor is recorded with its tree, depth, prediction and outcome, labelled by how it was picked
    want = {"holdout"} if config.holdout else set()
    want |= {"random" if config.prefixes == "uniform" else "chosen"} if branched else set()
    assert {p.picked for p in outcome.prefix_outcomes} <= want | {"holdout"}
    assert sum(p.picked == "holdout" for p in outcome.prefix_outcomes) == len(outcome.holdout_pairs)
    for p in outcome.prefix_outcomes:
        tree = outcome.trees[p.tree]
        assert 1 <= p.depth <= max(n.depth for n in tree.nodes) and 0 < p.prediction < 1 and 0 <= p.outcome <= 1


def test_local_stage2_spends_each_prompts_budget_on_its_own_prefixes(tiny_setup):
    budget = BudgetConfig(rollouts=18, prompts=3, candidates=3, m_min=2, m_max=2)
    alloc = _make(tiny_setup, TraceConfig(prefix_budget="local", branch_n=2), budget)
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=2)
    outcome = alloc.step(engine, tiny_setup.source.tasks("train")[:3])
    for tree in outcome.trees:  # 2 bare rollouts, 2 x 2 continuations (prefixes, or the root if none left)
        assert len(tree.leaves()) == 6


def _tasks(n):
    return [type("T", (), {"id": f"t{i}"})() for i in range(n)]


def test_dapo_over_samples_small_groups_and_refills_within_the_cap(tiny_setup):
    """Oversample 2: groups of M / 2B = 2, so after dropping all-equal groups it can refill; GRPO's
    allocation (B prompts x M/B, nothing dropped, nothing refilled) is not what it does."""
    budget = BudgetConfig(rollouts=12, prompts=3, candidates=6, m_min=2, m_max=4)
    alloc, engine, outcome = _run(tiny_setup, "dapo", budget)
    assert all(len(t.leaves()) == 2 for t in outcome.trees)  # GRPO would give 4 each
    assert outcome.record.groups_sampled * 2 == engine.ledger.rollouts_started <= budget.rollouts
    assert outcome.record.groups_sampled > len(outcome.trees) or len(outcome.trees) == budget.prompts


def test_dapo_spends_an_odd_budget_unless_it_kept_b_groups(tiny_setup):
    """M = 13 with groups of 2: the remainder goes to the last groups instead of being left unspent (the token
    meter's M is often odd; the powered math grid's audit stopped on DAPO leaving 1 of M=35 unspent)."""
    budget = BudgetConfig(rollouts=13, prompts=6, candidates=12, m_min=2, m_max=4)
    for seed in range(3):
        _, engine, outcome = _run(tiny_setup, "dapo", budget, seed=seed)
        assert engine.ledger.rollouts_started == 13 or len(outcome.trees) == budget.prompts, seed
        assert engine.ledger.rollouts_discarded + sum(len(t.leaves()) for t in outcome.trees) == \
            engine.ledger.rollouts_started


def test_mopps_discounts_old_evidence_and_prefers_prompts_near_one_half(tiny_setup):
    budget = BudgetConfig(rollouts=8, prompts=2, candidates=6, m_min=2, m_max=4)
    alloc = allocation.make("mopps", budget)
    pool = tiny_setup.source.tasks("train")[:6]
    # much evidence: pool[0:2] always solved, pool[2:4] never, pool[4:6] half the time
    prior = [[40.0, 1.0], [40.0, 1.0], [1.0, 40.0], [1.0, 40.0], [20.0, 20.0], [20.0, 20.0]]
    alloc.history = {task_key(t): list(ab) for t, ab in zip(pool, prior)}
    outcome = alloc.step(RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=0), pool)
    assert {t.task.id for t in outcome.trees} == {pool[4].id, pool[5].id}  # not GRPO's first B of the pool
    for tree in outcome.trees:
        s, n = sum(leaf.success for leaf in tree.leaves()), len(tree.leaves())
        assert alloc.history[task_key(tree.task)] == pytest.approx([1 + 0.9 * 19 + s, 1 + 0.9 * 19 + n - s])


def test_knapsack_with_histories_does_not_reproduce_grpos_uniform_split():
    alloc = allocation.make("knapsack", BudgetConfig(rollouts=16, prompts=4, candidates=4, m_min=2, m_max=8))
    pool = _tasks(4)
    alloc.history = {task_key(t): [r] for t, r in zip(pool, [0.5, 0.3, 0.95, 0.1])}
    m = alloc.allocation(pool)
    assert m.sum() == 16 and sorted(m) != [4, 4, 4, 4]


def test_pcl_takes_the_b_prompts_predicted_nearest_its_target(tiny_setup, monkeypatch):
    budget = BudgetConfig(rollouts=8, prompts=2, candidates=6, m_min=2, m_max=4)
    alloc = _make(tiny_setup, "pcl", budget)
    monkeypatch.setattr(alloc.predictor, "predict", lambda x: np.array([0.9, 0.1, 0.55, 0.0, 0.45, 1.0])[: len(x)])
    pool = tiny_setup.source.tasks("train")[:6]
    outcome = alloc.step(RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=0), pool)
    assert [t.task.id for t in outcome.trees] == [pool[2].id, pool[4].id] and outcome.record.root_counts == (4, 4)


def test_trace_fits_kappa_to_its_held_out_anchors_and_checkpoints_them(tiny_setup):
    with pytest.raises(ValueError, match="holdout > 0"):
        TraceConfig(prefixes="posterior", kappa=0)
    config = TraceConfig(prefixes="posterior", kappa=0, holdout=3)
    alloc = _make(tiny_setup, config, BudgetConfig(rollouts=16, prompts=3, candidates=6, m_min=2, m_max=4))
    assert alloc.kappa == 4.0  # cold start
    outcome = alloc.step(RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=3),
                         tiny_setup.source.tasks("train")[:6])
    assert len(alloc.noise_samples) == outcome.record.holdout_calibration.n == len(outcome.holdout_pairs) <= 3
    alloc.noise_samples = [[0.5, 1.0, 1.0, 1.0]] * 40  # outcomes always repeat the one seen: trust it
    assert alloc.kappa <= 0.5
    restored = _make(tiny_setup, config, BudgetConfig(rollouts=16, prompts=3, candidates=6, m_min=2, m_max=4))
    restored.restore(_through_json(alloc.state()))
    assert restored.noise_samples == alloc.noise_samples and restored.kappa == alloc.kappa
