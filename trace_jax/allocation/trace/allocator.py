"""The registered TRACE allocator: one shared success predictor steers a root policy (stage 1, `roots.py`:
"predicted", the knapsack on the predicted chance of mixed outcomes, or "uniform", the pool's first B prompts)
and a prefix chooser under a stage-2 budget mode (stage 2, `prefixes.py`: "agreement", "posterior", "uniform"
or "none"; "global" or "local"), each chosen by name from its registry (`TraceConfig`).
The 2x2 Uniform/Active stage ablation is roots x {uniform, agreement|posterior} prefixes.
With budget.unit="tokens" stage 2 spends to the step's measured-cost target (`budget.tokens` of the
step's budget): what stage 1 left of it, in this step's measured cost per bare rollout, so a step whose
chosen prompts run long or short does not carry the error of the meter's M into the next step.
`holdout` random anchors get one continuation each before the choice: the predictor is scored on
them without the selection bias of the chosen anchors (which are chosen where it disagrees with
the outcome seen, so their in-loop AUC is biased low).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trace_jax import ranges
from trace_jax.allocation import solvers
from trace_jax.allocation.anchors import Anchor, branch_points, expected_remaining_tokens, random_anchors
from trace_jax.allocation.base import (ALLOCATORS, AllocationRecord, AllocatorConfig, AllocatorState,
                                       PredictorAllocator, PrefixOutcome, StepOutcome, spend_leftover)
from trace_jax.allocation.calibration import calibration
from trace_jax.allocation.predictor import featurize
from trace_jax.allocation.trace.prefixes import PREFIX_BUDGETS, PREFIX_CHOOSERS, new_success
from trace_jax.allocation.trace.roots import ROOT_POLICIES
from trace_jax.ranges import AT_LEAST_0, AT_LEAST_1, ranged
from trace_jax.rollout.tree import RolloutTree
NOISE_WINDOW = 1024  # held-out anchors kept for fitting kappa (recent ones: the policy drifts)
NOISE_MIN_SAMPLES = 16  # fewer than this: the cold-start kappa
KAPPA_COLD_START = 4.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceConfig(AllocatorConfig):
    """Attributes:
      roots: stage 1's root policy: "predicted" or "uniform".
      prefixes: stage 2's chooser: "agreement", "posterior", "uniform" or "none".
      prefix_budget: "global" (one pool, budget.rounds rounds) or "local" (m_i * branch_n per prompt).
      branch_n: N, continuations per bare rollout in the local mode.
      kappa: strength of the predictor's prior in the posterior chooser (pseudo-observations); 0 fits
        it each step, by maximum likelihood, to the held-out anchors' outcomes so far (needs holdout > 0).
      holdout: random anchors per step given one continuation each to score the predictor unbiasedly.
      prefix_cost: what a continuation costs stage 2's greedy under budget.unit="tokens": "tokens" (its
        expected remaining tokens relative to a whole rollout's, so late anchors are cheap and the greedy
        buys many final-answer branches) or "rollouts" (1 each, as under unit="rollouts": anchors compete on
        the chance of a mixed outcome alone). The meter charges measured tokens either way; what a cheaper
        branch leaves unspent goes to the next round or, in the last, to whole rollouts at the roots.
    """

    roots: str = ranged("predicted", tuple(ROOT_POLICIES))
    prefixes: str = ranged("agreement", tuple(PREFIX_CHOOSERS))
    prefix_budget: str = ranged("global", tuple(PREFIX_BUDGETS))
    branch_n: int = ranged(2, AT_LEAST_1)
    kappa: float = ranged(4.0, AT_LEAST_0)
    holdout: int = ranged(0, AT_LEAST_0)
    prefix_cost: str = ranged("tokens", ("tokens", "rollouts"))

    def __post_init__(self):
        ranges.check(self, "allocator")
        if self.kappa == 0 and self.holdout == 0:
            raise ValueError("allocator.kappa=0 fits kappa to held-out anchors: set allocator.holdout > 0")


@ALLOCATORS.register("trace", config=TraceConfig)
class TRACE(PredictorAllocator):
    """Stage 1: roots by the predicted chance of mixed outcomes; stage 2: prefixes by the chance a
    continuation disagrees with the outcome already seen through them; one shared predictor."""

    chooses_prompts = True
    advantage = "trace_tree"

    def __init__(self, config: TraceConfig, budget, *, seed=0, predictor=None):
        super().__init__(config, budget, seed=seed, predictor=predictor)
        self.choose_roots = ROOT_POLICIES[config.roots]
        self.chooser, self.prefix_budget = PREFIX_CHOOSERS[config.prefixes], PREFIX_BUDGETS[config.prefix_budget]
        self.noise_samples: list[list[float]] = []  # held-out anchors: [u, successes below, leaves below, outcome]

    @property
    def kappa(self) -> float:
        """The prior strength in use: the configured one, or fitted to the held-out anchors so far."""
        if self.config.kappa > 0:
            return self.config.kappa
        if len(self.noise_samples) < NOISE_MIN_SAMPLES:
            return KAPPA_COLD_START
        return solvers.fit_kappa(*np.asarray(self.noise_samples, np.float64).T)

    def state(self) -> AllocatorState:
        base = super().state()
        return dataclasses.replace(base, host={**base.host, "noise_samples": self.noise_samples})

    def restore(self, state: AllocatorState) -> None:
        super().restore(state)
        self.noise_samples = [list(x) for x in state.host.get("noise_samples", [])]

    def _root_budget(self) -> int:
        if self.chooser is None:
            return self.budget.rollouts
        return self.prefix_budget.root_budget(self.budget, self.config)

    def allocate(self, engine, pool):
        b, c = self.budget, self.config
        candidates = engine.roots(pool)
        v = self.predictor.predict(np.stack([featurize(t, t.root) for t in candidates]))
        m = self.choose_roots(v, b, self._root_budget())
        before = b.cost(engine.ledger)
        bare = engine.expand(candidates, [(i, 0, int(k)) for i, k in enumerate(m) if k > 0])
        per_rollout = max((b.cost(engine.ledger) - before) / max(int(m.sum()), 1), 1.0)
        trees = [t for t, k in zip(candidates, m) if k > 0]
        # (prediction, outcome) pairs, the outcome being the mean success of the continuations sampled
        # because of that prediction (not of leaves seen before it was made)
        chosen = [(float(v[i]), new_success(candidates[i], 0, [leaf for t, leaf in bare if t == i]))
                  for i in np.flatnonzero(m)]
        anchored = self._holdout(engine, trees) if self.chooser is not None else []  # every stage-2 anchor, in order
        held_out = [(a.prediction, a.outcome) for a in anchored]
        spent = float(m.sum() + len(held_out))

        def left() -> float:  # budget units still to spend; unit="tokens": measured, in this step's bare rollouts
            if b.unit == "tokens":
                return max(b.tokens - b.cost(engine.ledger), 0.0) / per_rollout
            return b.rollouts - spent

        if self.chooser is not None:  # each round's groups are made after the previous round spent
            for groups in self.prefix_budget.rounds(trees, m[m > 0], left, b, c):
                units, pairs = self._expand_prefixes(engine, trees, groups, anchored)
                spent += units
                chosen += pairs
        leftover = max(int(np.floor(left() + 1e-9)), 0)  # whole rollouts (cost 1 in either unit) to the roots
        spend_leftover(engine, trees, leftover)
        record = AllocationRecord(
            calibration=_calibration(chosen), holdout_calibration=_calibration(held_out), budget_spent=spent + leftover,
            root_counts=tuple(int(k) for k in m[m > 0]), predictor_loss=self.predictor.update(trees),
            kappa=self.kappa if self.chooser is not None and self.chooser.uses_kappa else None)
        return StepOutcome(trees=trees, record=record, prefix_outcomes=tuple(anchored))

    def _holdout(self, engine, trees) -> list[PrefixOutcome]:
        """One continuation from each of `holdout` uniformly random turn boundaries."""
        points = branch_points(trees)
        picked = [points[i] for i in sorted(self.rng.permutation(len(points))[: self.config.holdout])]
        if not picked:
            return []
        u = self.predictor.predict(np.stack([featurize(trees[i], trees[i].nodes[j]) for i, j in picked]))
        below = []  # (successes, leaves) below each anchor before its held-out continuation
        for i, j in picked:
            values, counts = trees[i].values()
            below.append((float(round(values[j] * counts[j])), float(counts[j])))
        new = engine.expand(trees, [(i, j, 1) for i, j in picked])
        pairs = [(float(p), new_success(trees[i], j, [leaf for t, leaf in new if t == i]))
                 for p, (i, j) in zip(u, picked)]
        samples = [[p, s, n, y] for (p, y), (s, n) in zip(pairs, below)]
        self.noise_samples = (self.noise_samples + samples)[-NOISE_WINDOW:]
        return [PrefixOutcome(i, trees[i].nodes[j].depth, p, y, "holdout") for (p, y), (i, j) in zip(pairs, picked)]

    def _expand_prefixes(self, engine, trees, groups, anchored: list[PrefixOutcome]) -> tuple[float, list[tuple[float, float]]]:
        """One round of stage 2: each group (tree indices, budget) chooses among its own trees' prefixes;
        all choices are sampled in one batch. Returns (budget units spent, (u, outcome) pairs of the chosen
        anchors; the uniform chooser's predict nothing) and appends every anchor to `anchored`."""
        anchors, predictions, spent = [], [], 0.0
        uniform = self.chooser.random
        for which, budget in groups:
            which = list(which)
            subset = [trees[i] for i in which]
            if uniform:
                chosen = random_anchors(subset, self.rng, budget, self.budget.branch_k)
                cost = float(sum(k for _, _, k in chosen))
                # scored, not used: random anchors are where the predictor's within-prompt ranking is unbiased
                u = [float(x) for x in self.predictor.predict(
                    np.stack([featurize(subset[t], subset[t].nodes[j]) for t, j, _ in chosen]))] if chosen else []
            else:
                chosen, u, cost = self._choose(subset, budget)
            anchors += [(which[t], j, k) for t, j, k in chosen]
            predictions += u
            spent += cost
        new = engine.expand(trees, anchors)
        outcomes = [new_success(trees[i], j, [leaf for t, leaf in new if t == i]) for i, j, _ in anchors]
        anchored += [PrefixOutcome(i, trees[i].nodes[j].depth, p, o, "random" if uniform else "chosen")
                     for p, o, (i, j, _) in zip(predictions, outcomes, anchors)]
        return spent, [] if uniform else list(zip(predictions, outcomes))

    def _choose(self, trees: list[RolloutTree], budget: float) -> tuple[list[Anchor], list[float], float]:
        """Stage 2's choice over `trees`: anchors (tree index in `trees`, node, k), their u, the spend."""
        points = branch_points(trees)
        if not points or budget <= 0:
            return [], [], 0.0
        nodes = [(trees[i], trees[i].nodes[j]) for i, j in points]
        u = self.predictor.predict(np.stack([featurize(t, n) for t, n in nodes]))
        backed_up = {i: trees[i].values() for i in {i for i, _ in points}}  # (V, n) per node, once per tree
        observed = np.array([backed_up[i][0][j] for i, j in points])  # mean success of the leaves below
        leaves = np.array([backed_up[i][1][j] for i, j in points])
        values = self.chooser.values(u, observed, leaves, lambda: self.kappa)
        if self.budget.unit == "tokens" and self.config.prefix_cost == "tokens":
            remaining_tokens = expected_remaining_tokens(trees)
            cost = np.array([remaining_tokens(n.depth) for _, n in nodes])
        else:
            cost = np.ones(len(nodes))
        k = solvers.prefix_greedy_values(values, cost, budget)
        picked = np.flatnonzero(k)
        return ([(*points[p], int(k[p])) for p in picked], [float(u[p]) for p in picked],
                float(np.sum(k * cost)))


def _calibration(pairs: list[tuple[float, float]]):
    return calibration(np.array([p for p, _ in pairs]), np.array([o for _, o in pairs])) if pairs else None
