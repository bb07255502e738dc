"""Allocation solvers (docs/design.md sections 4-5).

Stage 1 chooses rollouts per prompt m_i in {0} U [m_min, m_max] under a total budget and a cap
on the number of prompts, maximizing a per-prompt value table (for TRACE the probability that
m samples are mixed, 1 - v^m - (1-v)^m). It is a multiple-choice knapsack: `solve_dp` is exact,
`root_greedy` is the fast version (a first unit of m_min rollouts, then marginal gains).
Stage 2 gives k continuations to prefix anchors by a concave value table (the paper's 1 - q^k,
`agreement_values`, or the noise-aware Beta-posterior version, `posterior_values`), so greedy on
marginal gain per unit cost (`prefix_greedy_values`) is optimal for uniform costs.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np


def root_values(v: np.ndarray, m_max: int) -> np.ndarray:
    """[C, m_max + 1] table of 1 - v^m - (1 - v)^m: the chance m samples have mixed outcomes."""
    m = np.arange(m_max + 1)[None, :]
    v = np.clip(np.asarray(v, np.float64), 0.0, 1.0)[:, None]
    table = 1.0 - v ** m - (1.0 - v) ** m
    table[:, 0] = 0.0
    return table


def solve_dp(values: np.ndarray, budget: int, *, m_min: int, m_max: int, max_items: int) -> np.ndarray:
    """Exact multiple-choice knapsack: m_i in {0} U [m_min, m_max], sum m_i <= budget, at most
    max_items non-zero; maximizes sum values[i, m_i]. values: [C, >= m_max + 1]. Returns m [C]."""
    C = values.shape[0]
    max_items = min(max_items, C)
    choices = np.arange(m_min, m_max + 1)
    neg = -np.inf
    best = np.full((max_items + 1, budget + 1), neg)
    best[0, :] = 0.0  # best[c, b]: best value with c items opened and at most b spent
    pick = np.zeros((C, max_items + 1, budget + 1), np.int16)
    for i in range(C):
        new = best + values[i, 0]  # prompt i left out
        for m in choices:
            if m > budget:
                break
            cand = np.full_like(best, neg)
            cand[1:, m:] = best[:-1, : budget + 1 - m] + values[i, m]
            better = cand > new
            new = np.where(better, cand, new)
            pick[i][better] = m
        best = new
    c, b = np.unravel_index(np.argmax(best), best.shape)
    out = np.zeros(C, int)
    for i in reversed(range(C)):
        m = int(pick[i, c, b])
        if m:
            out[i] = m
            c, b = c - 1, b - m
    return out


def brute_force(values: np.ndarray, budget: int, *, m_min: int, m_max: int, max_items: int) -> np.ndarray:
    """Exhaustive search (tests only: tiny instances)."""
    options = [0] + list(range(m_min, m_max + 1))
    best, arg = -np.inf, None
    for combo in itertools.product(options, repeat=values.shape[0]):
        if sum(combo) <= budget and sum(1 for m in combo if m) <= max_items:
            total = sum(values[i, m] for i, m in enumerate(combo))
            if total > best:
                best, arg = total, combo
    return np.asarray(arg)


def objective(values: np.ndarray, m: np.ndarray) -> float:
    return float(sum(values[i, int(k)] for i, k in enumerate(m)))


def root_greedy(v: np.ndarray, budget: int, *, m_min: int, m_max: int, max_items: int,
                spend_all: bool = True) -> np.ndarray:
    """Greedy stage-1 allocation on gain per rollout: opening a prompt costs m_min rollouts and
    gains 1 - v^m_min - (1-v)^m_min; each further rollout gains v^m (1-v) + (1-v)^m v.
    With `spend_all`, budget left when every candidate is saturated goes to the prompts with the
    highest next marginal gain (beyond m_max)."""
    v = np.clip(np.asarray(v, np.float64), 0.0, 1.0)
    C = len(v)
    m = np.zeros(C, int)
    opened, spent = 0, 0

    def gain(i, k):  # value of going from k to k + 1 rollouts (k >= 1)
        return v[i] ** k * (1 - v[i]) + (1 - v[i]) ** k * v[i]

    first = 1.0 - v ** m_min - (1.0 - v) ** m_min
    heap = [(-first[i] / m_min, 0, i) for i in range(C)]  # (-gain per rollout, kind 0=open 1=add, prompt)
    heapq.heapify(heap)
    while heap:
        neg_ratio, kind, i = heapq.heappop(heap)
        if kind == 0:
            if opened >= max_items or spent + m_min > budget:
                continue
            m[i], opened, spent = m_min, opened + 1, spent + m_min
        else:
            if spent + 1 > budget:
                break
            m[i] += 1
            spent += 1
        if m[i] < m_max:
            heapq.heappush(heap, (-gain(i, m[i]), 1, i))
    if spend_all and spent < budget and opened:
        chosen = np.flatnonzero(m)
        extra = [(-gain(i, m[i]), i) for i in chosen]
        heapq.heapify(extra)
        while spent < budget:
            _, i = heapq.heappop(extra)
            m[i] += 1
            spent += 1
            heapq.heappush(extra, (-gain(i, m[i]), i))
    return m


def prefix_greedy_values(values: np.ndarray, cost: np.ndarray, budget: float) -> np.ndarray:
    """Stage 2: k_j continuations per anchor maximizing sum_j values[j, k_j] with sum k_j cost_j <= budget.
    values [J, K + 1] is concave in k (values[:, 0] = 0): greedy on marginal gain per unit cost is then
    optimal for uniform costs."""
    values = np.asarray(values, np.float64)
    cost = np.asarray(cost, np.float64)
    if np.any(cost <= 0):
        raise ValueError("prefix costs must be positive")
    k_max = values.shape[1] - 1
    k = np.zeros(len(values), int)
    heap = [(-(values[j, 1] - values[j, 0]) / cost[j], j) for j in range(len(values)) if k_max > 0]
    heapq.heapify(heap)
    spent = 0.0
    while heap:
        _, j = heapq.heappop(heap)
        if spent + cost[j] > budget + 1e-9:
            continue  # a cheaper anchor may still fit
        k[j] += 1
        spent += cost[j]
        if k[j] < k_max:
            heapq.heappush(heap, (-(values[j, k[j] + 1] - values[j, k[j]]) / cost[j], j))
    return k


def agreement_values(q: np.ndarray, k_max: int = 16) -> np.ndarray:
    """The paper's V_pref(k) = 1 - q^k for k = 0..k_max, q the chance a continuation agrees with the
    outcome already seen through the anchor."""
    q = np.clip(np.asarray(q, np.float64), 0.0, 1.0)
    return 1.0 - q[:, None] ** np.arange(k_max + 1)[None, :]


def posterior_values(u: np.ndarray, successes: np.ndarray, leaves: np.ndarray, kappa: float,
                     k_max: int = 16) -> np.ndarray:
    """Noise-aware V_pref(k): the chance that k new continuations make the anchor's subtree mixed, with
    the anchor's success rate p ~ Beta(kappa u, kappa (1 - u)) updated by the `successes` of the
    `leaves` already below it (the observed outcome is one draw of p, not p itself). For an all-success
    subtree it is 1 - E[p^k], for an all-failure one 1 - E[(1 - p)^k] (Beta moments); a subtree that is
    already mixed gains nothing. kappa -> infinity with one leaf gives the paper's 1 - q^k."""
    u = np.clip(np.asarray(u, np.float64), 1e-6, 1 - 1e-6)
    s, n = np.asarray(successes, np.float64), np.asarray(leaves, np.float64)
    a, b = kappa * u + s, kappa * (1 - u) + n - s
    agree_a = np.where(s >= n, a, b)  # the side that repeats the observed outcome
    i = np.arange(k_max)[None, :]
    ratios = (agree_a[:, None] + i) / ((a + b)[:, None] + i)  # E[p^(k+1)] / E[p^k] under Beta(a, b)
    values = 1.0 - np.concatenate([np.ones((len(u), 1)), np.cumprod(ratios, axis=1)], axis=1)
    mixed = (s > 0) & (s < n)
    values[mixed] = 0.0
    return values


def prefix_greedy(q: np.ndarray, cost: np.ndarray, budget: float, *, k_max: int = 16) -> np.ndarray:
    """The paper's stage 2: k_j maximizing sum 1 - q_j^k_j with sum k_j cost_j <= budget."""
    return prefix_greedy_values(agreement_values(q, k_max), cost, budget)


def agreement(success: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """q = r u + (1 - r)(1 - u): chance a continuation from the anchor repeats the observed outcome r."""
    r = np.asarray(success, np.float64)
    u = np.asarray(predicted, np.float64)
    return r * u + (1 - r) * (1 - u)


def fit_kappa(u: np.ndarray, successes: np.ndarray, leaves: np.ndarray, outcomes: np.ndarray,
              grid: np.ndarray = np.geomspace(0.25, 256.0, 41)) -> float:
    """The prior strength kappa that best predicts fresh outcomes at anchors: maximum likelihood over
    `grid` of y ~ Bernoulli(E[p]) with p ~ Beta(kappa u + s, kappa (1 - u) + n - s), from anchors
    (prediction u, s successes among the n leaves seen below) and their next continuation's outcome y.
    Small kappa trusts the observed outcome, large kappa the predictor."""
    u = np.clip(np.asarray(u, np.float64), 1e-6, 1 - 1e-6)[:, None]
    s, n = np.asarray(successes, np.float64)[:, None], np.asarray(leaves, np.float64)[:, None]
    y = np.asarray(outcomes, np.float64)[:, None]
    k = np.asarray(grid, np.float64)[None, :]
    p = np.clip((k * u + s) / (k + n), 1e-9, 1 - 1e-9)
    loglik = np.sum(y * np.log(p) + (1 - y) * np.log(1 - p), axis=0)
    return float(grid[int(np.argmax(loglik))])
