"""The typed records one stage hands the next, and their JSON form.

`StepRecord`: what one RL step measured (budget ledger, tree statistics, the allocator's own
figures, learner metrics, timings). The trainer returns it and writes it as one JSONL line; the
budget audit, the comparison report and resumed runs read it back through `StepRecord.from_json`.
`CheckpointRecord`: the JSON stored beside a checkpoint's arrays (step, data position, the held-out
result after SFT, the allocator's host state, the settings it was made under).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import numpy as np

from trace_jax.allocation.calibration import Calibration
from trace_jax.rl.learner import LearnerMetrics
from trace_jax.rollout.tree import Ledger

STEPS_FILE = "steps.jsonl"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TreeStats:
    """Attributes:
      trees, leaves: trees trained on and their leaves (rollouts that finished in them).
      effective_ratio: share of trees with both a successful and a failed leaf.
      expanded_mixed_share: share of expanded prefixes whose subtree is mixed.
      nonzero_advantage_token_share: share of trained tokens with a non-zero advantage, under the run's own
        advantage estimator (a token shared by several sequences counts once per sequence that trains it;
        records before 2026-12-05 computed trace_tree's for every arm).
      useful_rollout_share: leaves in mixed trees per rollout bought (discarded ones included).
      reward: mean leaf reward.
      prompts_mixed: trees (distinct prompts trained; `trees` counts them all) with mixed outcomes.
      root_groups_mixed: trees whose bare rollouts (sampled at the root) alone are mixed.
      branch_leaf_share: share of leaves that are branches from turn prefixes (stage 2, holdout anchors).
      anchor_depths: branch leaves per anchor depth (index 0: from the first turn boundary).
      (The last four are None in records written before they existed.)
    """

    trees: int
    leaves: int
    effective_ratio: float
    expanded_mixed_share: float
    nonzero_advantage_token_share: float
    useful_rollout_share: float
    reward: float
    prompts_mixed: int | None = None
    root_groups_mixed: int | None = None
    branch_leaf_share: float | None = None
    anchor_depths: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timings:
    """Attributes: rollout_s (allocation and rollouts), step_s (the whole step), tokens_per_s (generated),
    reshard_s (params into the sampling layout, on a mesh)."""

    rollout_s: float
    step_s: float
    tokens_per_s: float
    reshard_s: float = 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One RL step (`step` counts from 1).

    Attributes:
      ledger: the budget ledger, counted by the engine.
      trees: statistics of the trees trained on.
      timings: wall-clock figures.
      learner: the learner step's metrics (None when no tree gave a training sequence).
      budget_spent: budget units spent, as the allocator counts them (unit="tokens": rollout-equivalents).
      groups_sampled: prompts rolled out before filtering (dapo).
      calibration: the predictor on the outcomes its own allocation caused (trace; biased low).
      holdout_calibration: the predictor on random anchors held out from the choice (trace, unbiased).
      root_counts: stage-1 rollouts per chosen prompt (allocators that choose them).
      predictor_loss: the predictor's training loss this step (trace).
      kappa: the posterior prefix chooser's prior strength after this step (trace, fitted or configured).
      rollout_budget: the M the step was planned with (budget.rollouts; with unit="tokens" the meter's M_s).
      tool_errors: error observations by kind (`envs.protocol.ERROR_KINDS`: malformed actions, tools'
        own errors, tool crashes caught at the environment boundary).
      cross_shard_rows: forked rows the sampler copied from another shard (on a mesh; `sampling/fork.py`).
      rollouts_by_process: rollouts started whose rows each process's devices decoded (multi-host split).
      turns_by_process: environment turns (parsing, tool call, scoring) each process ran: those of the rows
        its devices decoded; the other processes receive the results (`parallel/exchange.py`).
      slot_utilisation: sampled tokens per row-step the decode loop computed (1: no row ever waited for a
        slower one; `rl.decode_chunk` > 0 schedules continuously).
    """

    step: int
    ledger: Ledger
    trees: TreeStats
    timings: Timings
    learner: LearnerMetrics | None = None
    budget_spent: float | None = None
    groups_sampled: int | None = None
    calibration: Calibration | None = None
    holdout_calibration: Calibration | None = None
    root_counts: tuple[int, ...] | None = None
    predictor_loss: float | None = None
    kappa: float | None = None
    rollout_budget: int | None = None
    tool_errors: dict[str, int] = dataclasses.field(default_factory=dict)
    cross_shard_rows: int = 0
    rollouts_by_process: tuple[int, ...] | None = None
    turns_by_process: tuple[int, ...] | None = None
    slot_utilisation: float | None = None

    @property
    def root_m_std(self) -> float | None:
        """Spread of stage 1's rollouts per chosen prompt (0: stage 1 gave every prompt the same m)."""
        return float(np.std(self.root_counts)) if self.root_counts else None

    def to_json(self) -> dict[str, Any]:
        return _finite(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepRecord:
        nested = {"ledger": Ledger, "trees": TreeStats, "timings": Timings, "learner": LearnerMetrics,
                  "calibration": Calibration, "holdout_calibration": Calibration}
        fields = {k: (None if v is None else nested[k](**_nan(v, nested[k]))) if k in nested else v
                  for k, v in d.items()}
        if fields["trees"].anchor_depths is not None:
            fields["trees"] = dataclasses.replace(fields["trees"], anchor_depths=tuple(fields["trees"].anchor_depths))
        for key in ("root_counts", "rollouts_by_process", "turns_by_process"):
            if fields.get(key) is not None:
                fields[key] = tuple(fields[key])
        return cls(**fields)

    def scalars(self) -> dict[str, float]:
        """Flat `group/name` scalars for TensorBoard (None and NaN left out)."""
        out = {} if self.root_m_std is None else {"root_m_std": self.root_m_std}
        for key, value in dataclasses.asdict(self).items():
            if key == "root_counts":
                continue
            items = value.items() if isinstance(value, dict) else [("", value)]
            for name, v in items:
                if isinstance(v, (int, float)) and key != "step" and math.isfinite(v):
                    out[f"{key}/{name}" if name else key] = float(v)
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointRecord:
    """Attributes:
      step: RL steps done.
      data_position: position in the training-task stream.
      after_sft: the held-out result of the SFT policy this run started from.
      allocator: the allocator's JSON host state (RNG, posteriors, predictor buffer sizes).
      settings: `run_config.settings(run)` of the run that wrote it.
    """

    step: int
    data_position: int
    after_sft: dict[str, float]
    allocator: dict[str, Any]
    settings: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckpointRecord:
        return cls(**d)


def _finite(value):
    """NaN/inf -> None (JSON has neither), recursively."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _nan(fields: dict[str, Any], cls) -> dict[str, Any]:
    """None (a NaN in JSON) back to NaN, except in fields whose default is None (absent, not NaN)."""
    optional = {f.name for f in dataclasses.fields(cls) if f.default is None}
    return {k: float("nan") if v is None and k not in optional else v for k, v in fields.items()}


def append_step(workdir: str, record: StepRecord) -> None:
    with open(os.path.join(workdir, STEPS_FILE), "a", encoding="utf-8") as f:
        f.write(json.dumps(record.to_json()) + "\n")


def read_steps(workdir: str) -> list[StepRecord]:
    """The run's step records in step order; a step logged twice (a run resumed from a checkpoint
    before it) is the later line."""
    path = os.path.join(workdir, STEPS_FILE)
    if not os.path.exists(path):
        return []
    by_step: dict[int, StepRecord] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # blank, or the last line cut short by a kill
                continue
            record = StepRecord.from_json(row)
            by_step[record.step] = record
    return [by_step[s] for s in sorted(by_step)]
