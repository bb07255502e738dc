"""Solvers against brute force and against each other."""

import itertools

import numpy as np
import pytest

from trace_jax.allocation import solvers


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    C, m_min, m_max = int(rng.integers(2, 5)), int(rng.integers(1, 3)), 4
    values = solvers.root_values(rng.random(C), m_max) if seed % 2 else rng.random((C, m_max + 1))
    budget, max_items = int(rng.integers(0, C * m_max + 1)), int(rng.integers(1, C + 1))
    kw = dict(m_min=m_min, m_max=m_max, max_items=max_items)
    dp = solvers.solve_dp(values, budget, **kw)
    brute = solvers.brute_force(values, budget, **kw)
    assert dp.sum() <= budget and np.count_nonzero(dp) <= max_items
    assert all(m == 0 or m_min <= m <= m_max for m in dp)
    assert solvers.objective(values, dp) == pytest.approx(solvers.objective(values, brute), abs=1e-12)


def test_greedy_is_within_one_percent_of_dp_on_realistic_instances():
    rng = np.random.default_rng(0)
    worst = 1.0
    for _ in range(20):
        C, B = 64, 16
        v = rng.beta(0.6, 0.6, size=C)  # many near-0/1 prompts, as in practice
        budget = int(rng.integers(B * 2, B * 8))
        kw = dict(m_min=2, m_max=8, max_items=B)
        table = solvers.root_values(v, 64)
        dp = solvers.objective(table, solvers.solve_dp(table, budget, **kw))
        greedy_m = solvers.root_greedy(v, budget, spend_all=False, **kw)
        assert greedy_m.sum() <= budget and np.count_nonzero(greedy_m) <= B
        worst = min(worst, solvers.objective(table, greedy_m) / dp)
    print(f"worst greedy/DP ratio over 20 instances: {worst:.5f}")
    assert worst >= 0.99


def test_greedy_spends_the_whole_budget_when_asked():
    v = np.array([0.0, 1.0, 0.5, 0.45])
    m = solvers.root_greedy(v, 30, m_min=2, m_max=4, max_items=4)
    assert m.sum() == 30 and m[2] > 0 and m[3] > 0


def test_root_value_is_probability_of_mixed_outcomes():
    table = solvers.root_values(np.array([0.3]), 3)
    assert table[0, 0] == table[0, 1] == 0.0
    assert table[0, 2] == pytest.approx(2 * 0.3 * 0.7)
    assert table[0, 3] == pytest.approx(1 - 0.3 ** 3 - 0.7 ** 3)


@pytest.mark.parametrize("seed", range(6))
def test_prefix_greedy_is_optimal_for_uniform_cost(seed):
    rng = np.random.default_rng(seed)
    q = rng.random(3)
    budget = int(rng.integers(0, 7))
    k = solvers.prefix_greedy(q, np.ones(3), budget)
    best = max(sum(1 - q[j] ** kk[j] for j in range(3))
               for kk in itertools.product(range(budget + 1), repeat=3) if sum(kk) <= budget)
    assert k.sum() <= budget
    assert sum(1 - q[j] ** k[j] for j in range(3)) == pytest.approx(best)


def test_prefix_greedy_respects_costs():
    q = np.array([0.5, 0.5])
    k = solvers.prefix_greedy(q, np.array([1.0, 0.25]), budget=1.0)
    assert k[1] >= 3 and (k * np.array([1.0, 0.25])).sum() <= 1.0
    with pytest.raises(ValueError, match="positive"):
        solvers.prefix_greedy(q, np.array([1.0, 0.0]), 1.0)


def test_agreement():
    assert solvers.agreement(np.array([1.0, 0.0]), np.array([0.8, 0.8])) == pytest.approx([0.8, 0.2])


def test_posterior_values_are_beta_moments_and_tend_to_the_papers_formula():
    u, s, n = np.array([0.8, 0.3, 0.6]), np.array([1, 0, 1]), np.array([1, 1, 2])
    values = solvers.posterior_values(u, s, n, kappa=2.0, k_max=3)
    # all-success: Beta(1.6 + 1, 0.4) -> 1 - E[p^k]; all-failure: Beta(0.6, 1.4 + 1) -> 1 - E[(1-p)^k]
    a, b = 2.6, 0.4
    assert values[0, 2] == pytest.approx(1 - a / (a + b) * (a + 1) / (a + b + 1))
    a, b = 0.6, 2.4
    assert values[1, 1] == pytest.approx(1 - b / (a + b))
    assert (values[2] == 0).all()  # already mixed below: nothing to buy
    assert (np.diff(values[:2], 2, axis=1) <= 1e-12).all()  # concave in k
    paper = solvers.agreement_values(solvers.agreement(s[:2], u[:2]), k_max=3)
    np.testing.assert_allclose(solvers.posterior_values(u[:2], s[:2], n[:2], kappa=1e9, k_max=3), paper, atol=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_value_table_greedy_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    values = solvers.posterior_values(rng.random(4), rng.integers(0, 2, 4), np.ones(4), kappa=3.0, k_max=4)
    budget = 6
    k = solvers.prefix_greedy_values(values, np.ones(4), budget)
    best = max((sum(values[j, c[j]] for j in range(4)), c) for c in itertools.product(range(5), repeat=4)
               if sum(c) <= budget)[0]
    assert sum(values[j, k[j]] for j in range(4)) == pytest.approx(best) and k.sum() <= budget


def test_fit_kappa_recovers_how_much_the_observed_outcome_matters():
    """Anchors whose true success rate sits between the predictor's u and the one outcome seen:
    data drawn with p = E[Beta(k u + s, k (1 - u) + 1 - s)] for k = 4 is fitted near 4, and
    data where the outcome seen says nothing (p = u) is fitted at a large kappa."""
    rng = np.random.default_rng(0)
    u, s = rng.uniform(0.1, 0.9, 20000), rng.integers(0, 2, 20000).astype(float)
    n = np.ones(20000)
    y = (rng.random(20000) < (4 * u + s) / (4 + 1)).astype(float)
    assert 2.5 <= solvers.fit_kappa(u, s, n, y) <= 6.5
    y = (rng.random(20000) < u).astype(float)
    assert solvers.fit_kappa(u, s, n, y) >= 64
