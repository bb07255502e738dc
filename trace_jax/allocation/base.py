"""The allocator interface (docs/design.md section 7): the registry, the base class, what a step returns,
and the moves every allocator shares (sample bare rollouts at roots, spend a leftover on roots).

An allocator receives the step's candidate prompts and a `RolloutEngine`, decides where the step's
rollout budget goes (which prompts, how many rollouts each, which prefixes to branch), and returns
the trees to train on; the engine's ledger records every rollout, token and tool call. State that
must survive a restart (posteriors, success rates, the predictor) is checkpointed.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
from collections.abc import Sequence

import numpy as np

from trace_jax.allocation.budget import BudgetConfig, TokenMeter, spread
from trace_jax.allocation.calibration import Calibration
from trace_jax.allocation.predictor import SuccessPredictor
from trace_jax.envs.protocol import Task
from trace_jax.registry import Registry
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.rollout.tree import RolloutTree

ALLOCATORS: Registry = Registry("allocator", "allocator")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AllocatorConfig:
    """Attributes:
      name: a registered allocator (its own options, if any, extend this class).
    """

    name: str = "trace"


@dataclasses.dataclass(frozen=True)
class PrefixOutcome:
    """One stage-2 anchor of a step: `tree`, its index in the step's trees; `depth`, its turn boundary;
    `prediction`, the shared predictor's success probability there; `outcome`, the mean success of the
    continuations sampled from it; `picked`: "chosen" (by the chooser's value: biased toward
    disagreement), "random" (the uniform chooser) or "holdout" (random, held out of the choice)."""

    tree: int
    depth: int
    prediction: float
    outcome: float
    picked: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class AllocationRecord:
    """What one allocator step reports about its own decisions (stored whole in `StepRecord.allocation`).

    Attributes:
      budget_spent: budget units spent (rollout-equivalents with unit="tokens"); None = rollouts started.
      groups_sampled: prompts rolled out before filtering (dapo); None where nothing is filtered.
      calibration: the predictor scored on the outcomes its own allocation caused (trace; biased:
        anchors are chosen where the prediction disagrees with the outcome seen).
      holdout_calibration: the predictor scored on random anchors held out from the choice (unbiased).
      root_counts: rollouts given to each chosen prompt at the root, when the allocator chose them.
      predictor_loss: the predictor's training loss after this step's update (trace).
      kappa: the prior strength of the posterior prefix chooser (trace, prefixes="posterior").
      rollout_budget: the M this step was planned with (budget.rollouts, or the token meter's M_s; set by
        `Allocator.step`).
    """

    budget_spent: float | None = None
    groups_sampled: int | None = None
    calibration: Calibration | None = None
    holdout_calibration: Calibration | None = None
    root_counts: tuple[int, ...] | None = None
    predictor_loss: float | None = None
    kappa: float | None = None
    rollout_budget: int | None = None

    @property
    def root_m_std(self) -> float | None:
        """Spread of stage 1's rollouts per chosen prompt (0: stage 1 gave every prompt the same m)."""
        return float(np.std(self.root_counts)) if self.root_counts else None


@dataclasses.dataclass(frozen=True)
class StepOutcome:
    """What one allocator step produced: `trees`, what the learner trains on; `record`, the step's own
    figures; `prefix_outcomes`, every stage-2 anchor with its tree, depth, prediction and outcome (trace), so a
    study can score the predictor within a prompt and see where branches land (`holdout_pairs` are the
    held-out ones' (prediction, outcome), for pooling over steps)."""

    trees: list[RolloutTree]
    record: AllocationRecord = AllocationRecord()
    prefix_outcomes: tuple[PrefixOutcome, ...] = ()

    @property
    def holdout_pairs(self) -> tuple[tuple[float, float], ...]:
        return tuple((p.prediction, p.outcome) for p in self.prefix_outcomes if p.picked == "holdout")


def make(config: AllocatorConfig | str, budget: BudgetConfig, *, seed: int = 0,
         predictor: SuccessPredictor | None = None) -> Allocator:
    """Builds a registered allocator (a name means its default config)."""
    if isinstance(config, str):
        config = ALLOCATORS.entry(config).config(name=config)
    return ALLOCATORS.make(config, budget=budget, seed=seed, predictor=predictor)


def default_advantage(name: str) -> str:
    """The advantage estimator the allocator registered as `name` trains with unless configured otherwise."""
    return ALLOCATORS.entry(name).build.advantage


def uses_predictor(name: str) -> bool:
    """Whether the allocator registered as `name` steers by a shared success predictor."""
    return ALLOCATORS.entry(name).build.uses_predictor


def task_key(task: Task) -> int:
    return int(hashlib.sha256(task.id.encode()).hexdigest()[:15], 16)


def leaf_success(tree: RolloutTree) -> tuple[int, int]:
    leaves = tree.leaves()
    return sum(n.success for n in leaves), len(leaves)


def sample_roots(engine: RolloutEngine, tasks: Sequence[Task], counts: Sequence[int]) -> list[RolloutTree]:
    """Bare rollouts: counts[i] from task i's root; returns the trees of the tasks with counts > 0."""
    trees = engine.roots(tasks)
    engine.expand(trees, [(i, 0, int(k)) for i, k in enumerate(counts) if k > 0])
    return [t for t, k in zip(trees, counts) if k > 0]


def spend_leftover(engine: RolloutEngine, trees: list[RolloutTree], rollouts: int) -> None:
    """Budget no branch point took goes to the roots, spread over the trees."""
    if rollouts > 0:
        engine.expand(trees, [(i, 0, k) for i, k in enumerate(spread(rollouts, len(trees))) if k])


@dataclasses.dataclass(frozen=True)
class AllocatorState:
    """An allocator's checkpointed state: `arrays` saved with orbax, `host` (JSON-able) in the checkpoint's record."""

    arrays: dict
    host: dict


class Allocator(abc.ABC):
    """Base of every allocator. Subclasses implement `allocate` (spend `self.budget` on a pool) and set
    `chooses_prompts` (offered C candidates, else B prompts), `uses_predictor` (built with the
    trainer's shared `SuccessPredictor`) and `advantage` (the estimator its method trains with, the
    default of the config's `advantage.name`). Callers call `step`, which under budget.unit="tokens" sets
    `self.budget.rollouts` from the token meter first and books the step's measured cost after."""

    chooses_prompts = False
    uses_predictor = False
    advantage = "grpo"

    def __init__(self, config: AllocatorConfig, budget: BudgetConfig, *, seed: int = 0,
                 predictor: SuccessPredictor | None = None):
        if self.uses_predictor and predictor is None:
            raise ValueError(f"the {config.name} allocator steers by a SuccessPredictor: pass predictor=...")
        self.config, self.rng = config, np.random.default_rng(seed)
        self.configured_budget = self.budget = budget
        self.meter = TokenMeter(budget) if budget.unit == "tokens" else None

    @property
    def pool_size(self) -> int:
        return self.budget.candidates if self.chooses_prompts else self.budget.prompts

    def step(self, engine: RolloutEngine, pool: Sequence[Task]) -> StepOutcome:
        """One step on `pool` with a fresh `engine` (its ledger counts this step alone)."""
        if self.meter is not None:
            self.budget = self.meter.step_budget()
        outcome = self.allocate(engine, pool)
        if self.meter is not None:
            spent = outcome.record.budget_spent
            spent = engine.ledger.rollouts_started if spent is None else spent
            self.meter.record(self.budget.cost(engine.ledger), spent)
        return dataclasses.replace(outcome, record=dataclasses.replace(outcome.record,
                                                                       rollout_budget=self.budget.rollouts))

    @abc.abstractmethod
    def allocate(self, engine: RolloutEngine, pool: Sequence[Task]) -> StepOutcome:
        """Spends `self.budget` on `pool` and returns the trees to train on."""

    def state(self) -> AllocatorState:
        """What a checkpoint keeps: arrays (e.g. the predictor's) and small JSON-able host state (RNG, token
        meter; subclasses add posteriors, success rates, held-out samples)."""
        return AllocatorState(arrays={}, host={"rng": self.rng.bit_generator.state,
                                               **({"meter": self.meter.state()} if self.meter else {})})

    def restore(self, state: AllocatorState) -> None:
        """Back to a `state()` (its host part possibly through JSON)."""
        self.rng.bit_generator.state = state.host["rng"]
        if self.meter is not None:
            if "meter" not in state.host:
                raise ValueError("the checkpoint has no token meter state: it was written under budget.unit="
                                 "'rollouts'")
            self.meter.load(state.host["meter"])

    def template(self, host: dict) -> dict:
        """The structure of `state().arrays` when `host` was saved: what orbax reads the arrays into."""
        return self.state().arrays


class PredictorAllocator(Allocator):
    """An allocator steered by the trainer's shared success predictor, checkpointed with it."""

    uses_predictor = True

    def __init__(self, config: AllocatorConfig, budget: BudgetConfig, *, seed: int = 0,
                 predictor: SuccessPredictor | None = None):
        super().__init__(config, budget, seed=seed, predictor=predictor)
        self.predictor = predictor

    def state(self) -> AllocatorState:
        base = super().state()
        return AllocatorState(arrays={**base.arrays, "predictor": self.predictor.state()},
                              host={**base.host, "predictor": self.predictor.host_state()})

    def restore(self, state: AllocatorState) -> None:
        super().restore(state)
        self.predictor.load_state(state.arrays["predictor"], state.host["predictor"])

    def template(self, host: dict) -> dict:
        return {"predictor": self.predictor.state_template(host["predictor"])}
