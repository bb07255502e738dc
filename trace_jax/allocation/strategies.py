"""Allocators (METHOD.md section 7) behind one registry and one interface, all at equal budget.

An allocator receives the step's candidate prompts and a `RolloutEngine`, decides where the
step's rollout budget goes (which prompts, how many rollouts each, which prefixes to branch),
and returns the trees to train on; the engine's ledger records every rollout, token and tool
call. State that must survive a restart (posteriors, success rates, the predictor) is a pytree.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
from collections.abc import Callable, Sequence

import numpy as np

from trace_jax.allocation import solvers
from trace_jax.allocation.predictor import NUM_SCALARS, PredictorConfig, SuccessPredictor, calibration, featurize
from trace_jax.envs.protocol import Task
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.rollout.tree import RolloutTree


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
        if self.prompts * self.m_min > self.rollouts:
            raise ValueError(f"budget.rollouts={self.rollouts} cannot give budget.prompts={self.prompts} prompts "
                             f"budget.m_min={self.m_min} rollouts each")
        if self.candidates < self.prompts:
            raise ValueError(f"budget.candidates={self.candidates} must be >= budget.prompts={self.prompts}")
        if not 1 <= self.m_min <= self.m_max:
            raise ValueError(f"need 1 <= budget.m_min <= budget.m_max, got {self.m_min}, {self.m_max}")

    @property
    def root_budget(self) -> int:
        return max(self.prompts * self.m_min, int(round(self.rollouts * self.root_fraction)))


@dataclasses.dataclass
class StepOutcome:
    trees: list[RolloutTree]  # what the learner trains on
    stats: dict[str, float]


REGISTRY: dict[str, Callable[..., Allocator]] = {}


def register(name: str):
    def wrap(cls):
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return wrap


def make(name: str, budget: BudgetConfig, *, seed: int = 0, feature_dim: int = 0, **kwargs) -> Allocator:
    if name not in REGISTRY:
        raise KeyError(f"unknown allocator {name!r}; registered: {sorted(REGISTRY)}")
    return REGISTRY[name](budget, seed=seed, feature_dim=feature_dim, **kwargs)


def task_key(task: Task) -> int:
    return int(hashlib.sha256(task.id.encode()).hexdigest()[:15], 16)


def spread(total: int, parts: int) -> list[int]:
    """total split into `parts` near-equal integers (the first ones get the remainder)."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def leaf_success(tree: RolloutTree) -> tuple[int, int]:
    leaves = tree.leaves()
    return sum(n.success for n in leaves), len(leaves)


class Allocator(abc.ABC):
    name = "allocator"
    chooses_prompts = False  # True: the trainer offers `candidates` prompts, else `prompts`

    def __init__(self, budget: BudgetConfig, *, seed: int = 0, feature_dim: int = 0):
        self.budget, self.rng = budget, np.random.default_rng(seed)

    @property
    def pool_size(self) -> int:
        return self.budget.candidates if self.chooses_prompts else self.budget.prompts

    @abc.abstractmethod
    def step(self, engine: RolloutEngine, pool: Sequence[Task]) -> StepOutcome:
        """Spends the step's budget on `pool` and returns the trees to train on."""

    def state(self) -> dict:
        """Array state to checkpoint with orbax (e.g. the predictor)."""
        return {}

    def load_state(self, state: dict, host: dict | None = None) -> None:
        pass

    def host_state(self) -> dict:
        """Small JSON-able state to checkpoint (RNG, posteriors, success rates)."""
        return {"rng": self.rng.bit_generator.state}

    def load_host_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]

    def state_template(self, host: dict) -> dict:
        """The array structure of `state()` as checkpointed with this host state."""
        return self.state()

    def _roots_with(self, engine: RolloutEngine, tasks: Sequence[Task], counts: Sequence[int]):
        trees = engine.roots(tasks)
        engine.expand(trees, [(i, 0, int(k)) for i, k in enumerate(counts) if k > 0])
        return [t for t, k in zip(trees, counts) if k > 0]


@register("grpo")
class GRPO(Allocator):
    """B prompts as given, M/B rollouts each."""

    def step(self, engine, pool):
        b = self.budget
        return StepOutcome(self._roots_with(engine, pool[: b.prompts], spread(b.rollouts, b.prompts)), {})


@register("dapo")
class DAPO(Allocator):
    """Dynamic sampling: roll groups of M/B, drop groups with all-equal outcomes, refill from the pool
    until B mixed groups or the budget is spent. Discarded rollouts still count."""

    chooses_prompts = True

    def step(self, engine, pool):
        b = self.budget
        group = max(b.m_min, b.rollouts // b.prompts)
        kept, spent, index = [], 0, 0
        while len(kept) < b.prompts and spent + group <= b.rollouts and index < len(pool):
            n = min(b.prompts - len(kept), (b.rollouts - spent) // group, len(pool) - index)
            trees = self._roots_with(engine, pool[index:index + n], [group] * n)
            index, spent = index + n, spent + n * group
            for tree in trees:
                if tree.is_mixed():
                    kept.append(tree)
                else:
                    engine.ledger.rollouts_discarded += group
        return StepOutcome(kept, {"dapo_groups_sampled": index})


@register("mopps")
class MoPPS(Allocator):
    """Per-prompt Beta posteriors (prior Beta(1, 1)); Thompson-sample the pool, keep the B samples
    closest to 0.5; update with the observed successes."""

    chooses_prompts = True

    def __init__(self, budget, *, seed=0, feature_dim=0):
        super().__init__(budget, seed=seed)
        self.posterior: dict[int, list[float]] = {}

    def step(self, engine, pool):
        b = self.budget
        params = np.array([self.posterior.get(task_key(t), [1.0, 1.0]) for t in pool])
        draws = self.rng.beta(params[:, 0], params[:, 1])
        chosen = np.argsort(np.abs(draws - 0.5), kind="stable")[: b.prompts]
        tasks = [pool[i] for i in chosen]
        trees = self._roots_with(engine, tasks, spread(b.rollouts, len(tasks)))
        for task, tree in zip(tasks, trees):
            s, n = leaf_success(tree)
            a, bb = self.posterior.get(task_key(task), [1.0, 1.0])
            self.posterior[task_key(task)] = [a + s, bb + n - s]
        return StepOutcome(trees, {})

    def host_state(self):
        return {**super().host_state(), "posterior": [[k, a, b] for k, (a, b) in sorted(self.posterior.items())]}

    def load_host_state(self, state):
        super().load_host_state(state)
        self.posterior = {int(k): [float(a), float(b)] for k, a, b in state["posterior"]}


def knapsack_values(p: np.ndarray, n_max: int) -> np.ndarray:
    """Knapsack-RL value of N rollouts: P(mixed) x p (1 - p)^2 (zero for N < 2)."""
    n = np.arange(n_max + 1)[None, :]
    p = np.asarray(p, np.float64)[:, None]
    values = (1 - p ** n - (1 - p) ** n) * p * (1 - p) ** 2
    values[:, :2] = 0.0
    return values


@register("knapsack")
class KnapsackRL(Allocator):
    """Rollouts per prompt by an exact knapsack DP over N in [2, N_max] on each prompt's last observed
    success rate (unseen: 0.5); budget left unvalued is spread over the batch."""

    def __init__(self, budget, *, seed=0, feature_dim=0):
        super().__init__(budget, seed=seed)
        self.success_rate: dict[int, float] = {}

    def allocation(self, pool) -> np.ndarray:
        b = self.budget
        p = np.array([self.success_rate.get(task_key(t), 0.5) for t in pool[: b.prompts]])
        values = knapsack_values(p, b.m_max)
        m = solvers.solve_dp(values, b.rollouts, m_min=max(2, b.m_min), m_max=b.m_max, max_items=b.prompts)
        left = b.rollouts - int(m.sum())
        order = np.argsort(-values[np.arange(len(m)), np.maximum(m, 2)], kind="stable")
        i = 0
        while left > 0:  # spend what the DP could not value, keeping every count >= m_min
            j = order[i % len(order)]
            add = max(1, b.m_min - m[j]) if m[j] == 0 else 1
            if add <= left:
                m[j] += add
                left -= add
            i += 1
        return m

    def step(self, engine, pool):
        tasks = list(pool[: self.budget.prompts])
        m = self.allocation(tasks)
        trees = self._roots_with(engine, tasks, m)
        for task, tree in zip([t for t, k in zip(tasks, m) if k > 0], trees):
            s, n = leaf_success(tree)
            self.success_rate[task_key(task)] = s / n
        return StepOutcome(trees, {})

    def host_state(self):
        return {**super().host_state(), "success_rate": [[k, r] for k, r in sorted(self.success_rate.items())]}

    def load_host_state(self, state):
        super().load_host_state(state)
        self.success_rate = {int(k): float(r) for k, r in state["success_rate"]}


def branch_points(trees: list[RolloutTree]) -> list[tuple[int, int]]:
    """Every non-terminal turn boundary (tree index, node id): the candidate anchors of stage 2."""
    return [(i, n.id) for i, t in enumerate(trees) for n in t.nodes[1:] if not n.terminal and n.boundary]


def expected_remaining_tokens(trees: list[RolloutTree]) -> Callable[[int], float]:
    """depth t -> mean tokens a continuation from a depth-t boundary generated, relative to a whole
    rollout's (the `unit="tokens"` cost of a branch)."""
    totals, after = [], {}
    for tree in trees:
        for leaf in tree.leaves():
            path = tree.path(leaf.id)[1:]
            lengths = [len(n.tokens) for n in path]
            totals.append(sum(lengths))
            for t in range(len(path)):
                after.setdefault(t, []).append(sum(lengths[t:]))
    full = max(np.mean(totals) if totals else 1.0, 1.0)
    return lambda depth: max(np.mean(after.get(depth, [full])) / full, 0.05)


class _TreeAllocator(Allocator):
    """Shared shape of the branching allocators: m bare chains per prompt, then L rounds of branching."""

    def step(self, engine, pool):
        b = self.budget
        tasks = list(pool[: b.prompts])
        trees = self._roots_with(engine, tasks, spread(b.root_budget, len(tasks)))
        remaining = b.rollouts - b.root_budget
        for r in range(b.rounds):
            round_budget = remaining // (b.rounds - r)
            anchors = self.choose(trees, round_budget)
            remaining -= sum(k for _, _, k in anchors)
            engine.expand(trees, anchors)
        if remaining > 0:  # no branch points left: the rest goes to the roots
            engine.expand(trees, [(i, 0, k) for i, k in enumerate(spread(remaining, len(trees))) if k])
        return StepOutcome(trees, {})

    @abc.abstractmethod
    def choose(self, trees: list[RolloutTree], budget: int) -> list[tuple[int, int, int]]:
        """(tree, node, k) anchors with sum k <= budget."""

    def _fill(self, ranked: list[tuple[int, int]], budget: int) -> list[tuple[int, int, int]]:
        anchors, left = [], budget
        for tree, node in ranked:
            if left <= 0:
                break
            k = min(self.budget.branch_k, left)
            anchors.append((tree, node, k))
            left -= k
        return anchors


@register("tree_random")
class TreeRandom(_TreeAllocator):
    """Tree-GRPO-like: branch uniformly random non-terminal turn boundaries."""

    def choose(self, trees, budget):
        points = branch_points(trees)
        order = self.rng.permutation(len(points))
        return self._fill([points[i] for i in order], budget)


@register("entropy_branch")
class EntropyBranch(_TreeAllocator):
    """ARPO-like: branch after the tool observations where the next turn's token entropy rises most
    over the turn before it."""

    window = 8

    def choose(self, trees, budget):
        scored = []
        for tree_index, node_id in branch_points(trees):
            tree = trees[tree_index]
            node = tree.nodes[node_id]
            child = tree.nodes[node.children[0]] if node.children else None
            if child is None or not child.entropy or not node.entropy:
                continue
            rise = float(np.mean(child.entropy[: self.window]) - np.mean(node.entropy))
            scored.append((rise, tree_index, node_id))
        scored.sort(key=lambda s: -s[0])
        return self._fill([(t, n) for _, t, n in scored], budget)


def new_success(tree: RolloutTree, node_id: int, new_leaves: list[int]) -> float:
    """Mean success of the given new leaves that descend from node_id."""
    below = [leaf for leaf in new_leaves if node_id in {n.id for n in tree.path(leaf)}]
    return float(np.mean([tree.nodes[leaf].success for leaf in below])) if below else float("nan")


TRACE_STAGES = ("both", "roots", "prefixes")  # ablations: stage 1 + 2, stage 1 only, stage 2 only


@register("trace")
class TRACE(Allocator):
    """Stage 1: roots by the predicted chance of mixed outcomes; stage 2: prefixes by the chance a
    continuation disagrees with the outcome already seen through them; one shared predictor.
    `stages="roots"` spends the whole budget in stage 1; `stages="prefixes"` takes the pool's first B
    prompts with uniform root rollouts (as grpo / tree_random do) and keeps stage 2."""

    chooses_prompts = True

    def __init__(self, budget, *, seed=0, feature_dim=0, predictor: PredictorConfig = PredictorConfig(),
                 stages: str = "both"):
        super().__init__(budget, seed=seed)
        if feature_dim <= NUM_SCALARS:
            raise ValueError("the trace allocator needs feature_dim = model hidden size + scalar features")
        if stages not in TRACE_STAGES:
            raise ValueError(f"allocator.stages must be one of {TRACE_STAGES}, got {stages!r}")
        self.stages = stages
        self.predictor = SuccessPredictor(feature_dim, predictor, seed=seed)

    def _root_counts(self, v: np.ndarray) -> np.ndarray:
        """Stage 1 (or, for stages="prefixes", uniform roots: the pool's first B prompts)."""
        b = self.budget
        if self.stages == "prefixes":
            m = np.zeros(len(v), int)
            m[: b.prompts] = spread(b.root_budget, min(b.prompts, len(v)))
            return m
        root_budget = b.rollouts if self.stages == "roots" else b.root_budget
        if b.solver == "dp":
            return solvers.solve_dp(solvers.root_values(v, b.m_max), root_budget, m_min=b.m_min, m_max=b.m_max,
                                    max_items=b.prompts)
        return solvers.root_greedy(v, root_budget, m_min=b.m_min, m_max=b.m_max, max_items=b.prompts)

    def step(self, engine, pool):
        b = self.budget
        candidates = engine.roots(pool)
        v = self.predictor.predict(np.stack([featurize(t, t.root) for t in candidates]))
        m = self._root_counts(v)
        bare = engine.expand(candidates, [(i, 0, int(k)) for i, k in enumerate(m) if k > 0])
        trees = [t for t, k in zip(candidates, m) if k > 0]
        # (prediction, outcome) pairs, the outcome being the mean success of the continuations sampled
        # because of that prediction (not of leaves seen before it was made)
        outcomes = [(float(v[i]), new_success(candidates[i], 0, [leaf for t, leaf in bare if t == i]))
                    for i in np.flatnonzero(m)]
        remaining = b.rollouts - int(m.sum())
        rounds = 0 if self.stages == "roots" else b.rounds
        for r in range(rounds):
            round_budget = remaining / (rounds - r)
            points = branch_points(trees)
            if not points:
                break
            nodes = [(trees[i], trees[i].nodes[j]) for i, j in points]
            u = self.predictor.predict(np.stack([featurize(t, n) for t, n in nodes]))
            observed = np.array([t.values()[0][n.id] for t, n in nodes])
            q = solvers.agreement(observed, u)
            if b.unit == "tokens":
                remaining_tokens = expected_remaining_tokens(trees)
                cost = np.array([remaining_tokens(n.depth) for _, n in nodes])
            else:
                cost = np.ones(len(nodes))
            k = solvers.prefix_greedy(q, cost, round_budget)
            anchors = [(i, j, int(kk)) for (i, j), kk in zip(points, k) if kk > 0]
            remaining -= float(np.sum(k * cost))
            new = engine.expand(trees, anchors)
            outcomes += [(float(p), new_success(trees[i], j, [leaf for t, leaf in new if t == i]))
                         for p, (i, j), kk in zip(u, points, k) if kk > 0]
        leftover = int(np.floor(remaining + 1e-9))  # whole rollouts (cost 1 in either unit) to the roots
        if leftover > 0:
            engine.expand(trees, [(i, 0, kk) for i, kk in enumerate(spread(leftover, len(trees))) if kk])
        pred = np.array([p for p, _ in outcomes])
        stats = {f"predictor_{k}": v for k, v in calibration(pred, np.array([o for _, o in outcomes])).items()}
        stats["budget_spent"] = b.rollouts - remaining + leftover  # in budget units (rollout-equivalents)
        stats["predictor_loss"] = self.predictor.update(trees)
        return StepOutcome(trees, stats)

    def state(self):
        return {"predictor": self.predictor.state()}

    def host_state(self):
        return {**super().host_state(), "predictor": self.predictor.host_state()}

    def state_template(self, host):
        return {"predictor": self.predictor.state_template(host["predictor"])}

    def load_state(self, state, host=None):
        self.predictor.load_state(state["predictor"], None if host is None else host["predictor"])

    def load_host_state(self, state):
        super().load_host_state(state)
