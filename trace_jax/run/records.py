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

from trace_jax.allocation.base import AllocationRecord
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
      (The last four are None in the records of runs stored before they were measured: the powered study's.)
    """

    trees: int
    leaves: int
    effective_ratio: float
    expanded_mixed_share: float
    nonzero_advantage_token_share: float
    useful_rollout_share: float
    reward: float
    prompts_mixed: int | None
    root_groups_mixed: int | None
    branch_leaf_share: float | None
    anchor_depths: tuple[int, ...] | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timings:
    """Attributes: rollout_s (allocation and rollouts), step_s (the whole step), tokens_per_s (generated),
    reshard_s (params into the sampling layout, on a mesh; 0 on one device)."""

    rollout_s: float
    step_s: float
    tokens_per_s: float
    reshard_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One RL step (`step` counts from 1).

    Attributes:
      ledger: the budget ledger, counted by the engine.
      trees: statistics of the trees trained on.
      timings: wall-clock figures.
      learner: the learner step's metrics (None when no tree gave a training sequence).
      allocation: the allocator's own figures for the step (`AllocationRecord`: budget spent, root counts,
        the predictor's calibration and loss, the planned M).
      tool_errors: error observations by kind (`envs.protocol.ERROR_KINDS`: malformed actions, tools'
        own errors, tool crashes caught at the environment boundary).
      cross_shard_rows: forked rows the sampler copied from another shard (on a mesh; `sampling/fork.py`).
      rollouts_by_process: rollouts started whose rows each process's devices decoded (multi-host split).
      turns_by_process: environment turns (parsing, tool call, scoring) each process ran: those of the rows
        its devices decoded; the other processes receive the results (`parallel/exchange.py`).
      slot_utilisation: sampled tokens per row-step the decode loop computed (1: no row ever waited for a
        slower one; `rl.decode_chunk` > 0 schedules continuously).
      policy_lag: learner steps between the params that sampled the step's rollouts and those its updates
        started from (every token of a step is sampled by one params version: the step's staleness
        distribution is this one value; 0 in the synchronous loop, `rl.max_staleness` once the pipeline fills).
    """

    step: int
    ledger: Ledger
    trees: TreeStats
    timings: Timings
    learner: LearnerMetrics | None
    allocation: AllocationRecord
    tool_errors: dict[str, int]
    cross_shard_rows: int
    rollouts_by_process: tuple[int, ...] | None
    turns_by_process: tuple[int, ...] | None
    slot_utilisation: float | None
    policy_lag: int

    def to_json(self) -> dict[str, Any]:
        return _finite(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepRecord:
        """The inverse of `to_json` (JSON's null is a NaN in a float field that cannot be None); a line missing a
        field raises ValueError naming the fields."""
        _require_fields(d, cls, f"the step record of step {d.get('step')}")
        for key, part in (("trees", TreeStats), ("timings", Timings), ("allocation", AllocationRecord),
                          ("learner", LearnerMetrics)):
            if d[key] is not None:
                _require_fields(d[key], part, f"the step record of step {d.get('step')}, {key}")
        trees = _nan(d["trees"], TreeStats)
        if trees["anchor_depths"] is not None:
            trees["anchor_depths"] = tuple(trees["anchor_depths"])
        return cls(**{**d, "ledger": Ledger(**d["ledger"]), "trees": TreeStats(**trees),
                      "timings": Timings(**_nan(d["timings"], Timings)),
                      "learner": None if d["learner"] is None else LearnerMetrics(**_nan(d["learner"], LearnerMetrics)),
                      "allocation": _allocation(d["allocation"]),
                      **{k: None if d[k] is None else tuple(d[k])
                         for k in ("rollouts_by_process", "turns_by_process")}})

    def scalars(self) -> dict[str, float]:
        """Flat `group/name` scalars for TensorBoard (None and NaN left out; the allocation's figures at the top
        level, `root_counts` as their spread `root_m_std`)."""
        a = self.allocation
        out = {} if a.root_m_std is None else {"root_m_std": a.root_m_std}
        fields = {k: v for k, v in dataclasses.asdict(self).items() if k != "allocation"}
        for key, value in {**fields, **dataclasses.asdict(a)}.items():
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
      sampler_versions: the learner steps whose params the checkpoint also keeps (under "sampler"): those the
        steps after it sample with (`run/pipeline.py`; none when rl.max_staleness = 0).
    """

    step: int
    data_position: int
    after_sft: dict[str, float]
    allocator: dict[str, Any]
    settings: dict[str, Any] | None = None
    sampler_versions: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckpointRecord:
        return cls(**{**d, "sampler_versions": tuple(d.get("sampler_versions", ()))})


def _finite(value):
    """NaN/inf -> None (JSON has neither), recursively."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _allocation(d: dict[str, Any]) -> AllocationRecord:
    calibrations = {k: None if d[k] is None else Calibration(**_nan(d[k], Calibration))
                    for k in ("calibration", "holdout_calibration")}
    return AllocationRecord(**{**d, **calibrations,
                               "root_counts": None if d["root_counts"] is None else tuple(d["root_counts"])})


def _require_fields(d: dict[str, Any], cls, what: str) -> None:
    missing = sorted({f.name for f in dataclasses.fields(cls)} - set(d))
    if missing:
        raise ValueError(f"{what} has no {missing} (a record of a run stored before 2026-12-07? "
                         "studies/migrations/staleness_v3.py moves stored runs to this layout)")


def _nan(fields: dict[str, Any], cls) -> dict[str, Any]:
    """None (a NaN in JSON) back to NaN, except in fields typed `... | None` (not measured, not NaN)."""
    optional = {f.name for f in dataclasses.fields(cls) if "None" in str(f.type)}
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
