"""The typed run configuration: an `ml_collections.ConfigDict` from `configs/*.py` becomes frozen,
keyword-only dataclasses (`parse`). Unknown fields and wrong types fail here with the field named; bad values,
conflicting fields and missing paths in `checks.py`; `files.from_config_dict` runs both before compute."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from trace_jax.allocation import ALLOCATORS, AllocatorConfig, BudgetConfig, default_advantage
from trace_jax.allocation.predictor import PredictorConfig
from trace_jax.envs.sources import TASK_SOURCES, TaskConfig
from trace_jax.ranges import AT_LEAST_0, AT_LEAST_1, DTYPES, POSITIVE, PROBABILITY, Range, ranged
from trace_jax.registry import RegistryError
from trace_jax.rl.advantages import ESTIMATORS, AdvantageConfig
from trace_jax.rl.learner import LearnerConfig
from trace_jax.rl.losses import LOSSES, LossConfig


class ConfigError(ValueError):
    """A config field that does not exist, has a bad value, or conflicts with another."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSection:
    """Attributes:
      preset: a name from models.presets (used when `checkpoint` is empty).
      checkpoint: local HF checkpoint directory ('' = random init of the preset).
      tokenizer: local tokenizer directory ('' = the checkpoint's, else build the bundled BPE).
      param_dtype, dtype: parameter and compute dtypes.
    """

    preset: str = "mini"
    checkpoint: str = ""
    tokenizer: str = ""
    param_dtype: str = ranged("float32", DTYPES)
    dtype: str = ranged("float32", DTYPES)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SFTSection:
    """Attributes:
      steps: optimizer steps (0 skips SFT).
      batch_size: demonstrations per step.
      learning_rate: AdamW step size.
      num_demos: oracle demonstrations generated.
      mistake_rate: the oracle's mistake rate (recoveries teach robustness).
      data_path: a JSONL of conversations to use instead of oracle demonstrations.
      max_len: demonstrations are cut to this many tokens.
      max_difficulty: oracle demonstrations only of training tasks up to this difficulty (hops, steps,
        calls; 0 = every task): a warm start on the easy part of the pool, RL over all of it.
    """

    steps: int = ranged(800, AT_LEAST_0)
    batch_size: int = ranged(8, AT_LEAST_1)
    learning_rate: float = ranged(3e-3, POSITIVE)
    num_demos: int = ranged(2000, AT_LEAST_1)
    mistake_rate: float = ranged(0.1, PROBABILITY)
    data_path: str = ""
    max_len: int = ranged(512, Range(2))
    max_difficulty: int = ranged(0, AT_LEAST_0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLSection:
    """Attributes:
      steps: RL steps.
      temperature, top_p, max_new_tokens: per-turn sampling.
      eval_every: evaluate every this many steps (0: only at the end).
      train_prompts: training prompts the RL stream cycles over (0 = the whole train split). A small
        pool makes prompts recur across steps, so allocators with per-prompt histories (mopps,
        knapsack) have histories to use.
      decode_chunk: decode steps per call of the continuous scheduler (`rollout/continuous.py`): a row whose
        turn ended runs its tool and rejoins while the others decode on. 0: a whole turn per call (the
        turn-synchronous schedule). Same samples either way (same random numbers per row and token); only
        the schedule differs (docs/sampler.md: which pays when).
      decode_slots: rows decoding at once; pending branches wait for a slot (0: one slot per branch of each
        expansion).
      overlap_tools: True: the tools of the rows whose turn ended run in a worker
        thread while the device decodes the next chunk of the others (those rows rejoin a chunk later: worth
        it when tools take time, e.g. a retrieval server); False: between chunks. Measured
        (studies/benchmarks/bench_continuous.py): 1.24x tokens/s with 20 ms tool calls, 0.91x-0.97x with instant
        ones (two runs).
      keep_prefixes: True: finished rollouts' cache rows stay on the device so later forks reuse them;
        False: they are dropped and a fork prefills its anchor's prefix again (counted in the ledger's
        tokens_reprefilled), in waves of decode_slots anchors: the live cache is bounded by the slot
        table, not the step's rollouts (paper-scale configs; `continuous.Batching.keep_prefixes`).
      kv_layout: where rollouts keep their KV cache. "paged": in a pool of pages of kv_page_size tokens
        (`sampling/paged.py`): a fork shares its prefix's pages, rows of very different lengths decode over
        their own pages only (studies/benchmarks/bench_paged.py: 4.5x faster than dense on a mixed batch, 8.9x
        the rows per KV budget on a k=8 fork, alike batches as fast; the quickstart, whose rows are alike and
        short, took 336 s against 314 s dense: more programs to compile); one device's: a run on a mesh decodes
        on the dense cache (it says so when it starts). "dense": one buffer per layer, every row as long as the
        longest.
      kv_page_size: tokens per KV page (a fork copies at most one page of its parent's).
      kv_max_pages: the most pages the pool may grow to (0: no limit; it grows by doubling as rollouts need).
        A rollout batch that needs more stops with an error naming what it needed.
      max_staleness: learner steps the params that sample a step's rollouts may lag the learner's (s). 0: the
        synchronous loop (rollouts of step t by the params after step t - 1). s >= 1: a worker samples step
        t + s while the learner trains step t (`run/pipeline.py`); pair it with loss.name="decoupled_ppo", which
        corrects for the older sampler. Default 0: s = 1 is 1.64x faster per step where rollouts and learner take
        comparable time (1.11x where the learner dominates; docs/scaling.md), but whether it learns as well at
        equal steps is not settled: TRACE s1 - s0 +0.8 points [-3.3, +5.5] at 4 seeds, inconclusive under the 3
        point margin fixed beforehand (studies/staleness/).
    """

    steps: int = ranged(80, AT_LEAST_0)
    temperature: float = ranged(1.0, POSITIVE)
    top_p: float = ranged(1.0, Range(0, 1, low_open=True))
    max_new_tokens: int = ranged(40, AT_LEAST_1)
    eval_every: int = ranged(0, AT_LEAST_0)
    train_prompts: int = ranged(0, AT_LEAST_0)
    decode_chunk: int = ranged(0, AT_LEAST_0)
    decode_slots: int = ranged(0, AT_LEAST_0)
    overlap_tools: bool = False
    keep_prefixes: bool = True
    kv_layout: str = ranged("paged", ("paged", "dense"))
    kv_page_size: int = ranged(16, AT_LEAST_1)
    kv_max_pages: int = ranged(0, AT_LEAST_0)
    max_staleness: int = ranged(0, AT_LEAST_0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalSection:
    """Attributes:
      split: held-out split of the training source ("test", "validation", "heldout": both), or "separate": num_tasks
        questions from independent worlds of the same generator (`trace_jax.envs.eval_sets`).
      num_tasks: tasks evaluated (0 = all).
      pass_k: k of the sampled pass@k (0 = greedy accuracy only).
      sample_k: k of the sampled mean-of-k (mean success over k rollouts per task at rl.temperature,
        the same random numbers per task in every run: common random numbers; 0 = off).
      sample_tasks: the first this many evaluated tasks get the mean-of-k.
      sample_every: RL steps between intermediate evaluations that also measure the mean-of-k (0: only the
        final one does), so a learning curve of sampled success exists beside the greedy one.
      decode_chunk: decode steps per call of the continuous scheduler in evaluations (0: as rl.decode_chunk). The
        same outcomes task for task (greedy and sampled); 16 measured 1.15x faster than whole turns on math
        (studies/run_cost/bench_run_cost.py --section eval).
      intermediate_tasks: the greedy evaluations between the first and the last score only the first this many
        evaluated tasks, a fixed subset (0: all of them); the start and the end score every task. An
        intermediate evaluation that also measures the mean-of-k scores every task.
    """

    split: str = "test"
    num_tasks: int = ranged(200, AT_LEAST_0)
    pass_k: int = ranged(0, AT_LEAST_0)
    sample_k: int = ranged(0, AT_LEAST_0)
    sample_tasks: int = ranged(250, AT_LEAST_0)
    sample_every: int = ranged(0, AT_LEAST_0)
    intermediate_tasks: int = ranged(0, AT_LEAST_0)
    decode_chunk: int = ranged(0, AT_LEAST_0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointSection:
    """Attributes:
      every: save every this many RL steps.
      keep: checkpoints kept.
    """

    every: int = ranged(10, AT_LEAST_1)
    keep: int = ranged(2, AT_LEAST_1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshSection:
    """Attributes:
      data, fsdp, tensor: the learner's mesh axis sizes (their product = the number of devices it uses).
      sampler_devices: 0: rollouts run on the learner's devices; 1: on a device of their own, the next local one
        after the learner's single device (a one-device learner only; a sampler mesh of several devices, or
        across processes, is not built). Same results either way.
    """

    data: int = ranged(1, AT_LEAST_1)
    fsdp: int = ranged(1, AT_LEAST_1)
    tensor: int = ranged(1, AT_LEAST_1)
    sampler_devices: int = ranged(0, Range(0, 1))


# Sections whose `name` (the task's `source`) picks a registry entry; the entry's config class validates the section.
_REGISTRY_SECTIONS = {"task": TASK_SOURCES, "allocator": ALLOCATORS, "advantage": ESTIMATORS, "loss": LOSSES}
_SECTIONS = {"model": ModelSection, "task": TaskConfig, "sft": SFTSection, "rl": RLSection,
             "learner": LearnerConfig, "budget": BudgetConfig, "allocator": AllocatorConfig,
             "predictor": PredictorConfig, "advantage": AdvantageConfig, "loss": LossConfig,
             "eval": EvalSection, "checkpoint": CheckpointSection, "mesh": MeshSection}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    seed: int
    model: ModelSection
    task: TaskConfig  # the source's own config class (`envs/sources.py`)
    sft: SFTSection
    rl: RLSection
    learner: LearnerConfig
    budget: BudgetConfig
    allocator: AllocatorConfig
    predictor: PredictorConfig
    advantage: AdvantageConfig
    loss: LossConfig
    eval: EvalSection
    checkpoint: CheckpointSection
    mesh: MeshSection


def section_classes() -> dict[str, type]:
    """Section name -> its config dataclass (for a registry section, the base every entry extends)."""
    return dict(_SECTIONS)


def registry_of(section: str):
    """The registry whose entries own `section`'s config, or None for a plain section."""
    return _REGISTRY_SECTIONS.get(section)


def _plain(value: Any) -> Any:
    return value.to_dict() if hasattr(value, "to_dict") else value


def parse(config) -> RunConfig:
    """Converts a ConfigDict (or dict) into a RunConfig: every unknown field or ill-typed section names its
    field (e.g. `rl.stepz`). Value ranges and cross-field checks are `checks.py`'s."""
    raw = _plain(config)
    unknown = set(raw) - set(_SECTIONS) - {"seed"}
    if unknown:
        raise ConfigError(f"config field(s) {sorted(unknown)} do not exist; sections: {sorted(_SECTIONS)}")
    sections = {}
    for name, cls in _SECTIONS.items():
        given = dict(raw.get(name, {}) or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key in given:
            if key not in fields and name not in _REGISTRY_SECTIONS:
                raise ConfigError(f"config field '{name}.{key}' does not exist; {name} has {sorted(fields)}")
        try:
            if name == "advantage" and not given.get("name"):  # unnamed: the allocator's own estimator
                given["name"] = default_advantage(sections["allocator"].name)
            if name in _REGISTRY_SECTIONS:
                registry = _REGISTRY_SECTIONS[name]
                sections[name] = registry.config(given, default_name=getattr(cls(), registry.key))
            else:
                sections[name] = cls(**given)
        except (RegistryError, ValueError, TypeError) as e:
            raise ConfigError(f"config section '{name}': {e}") from None
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"config field 'seed'={seed!r} must be an integer >= 0")
    return RunConfig(seed=seed, **sections)


# What a checkpoint's weights depend on. An SFT checkpoint: the model, the task and the SFT recipe
# (not the RL seed: every run of a comparison restores one SFT checkpoint). An RL checkpoint: every
# field except those a resumed run may change (train longer, evaluate differently, another mesh).
SFT_SETTINGS = ("model", "task", "sft")
RESUMABLE_SETTINGS = ("rl.steps", "rl.eval_every", "rl.decode_chunk", "rl.decode_slots", "rl.overlap_tools",
                      "rl.kv_layout", "rl.kv_page_size", "rl.kv_max_pages", "eval", "checkpoint", "mesh",
                      "learner.remat", "learner.layout")

# How a run computes, not what it computes: the rollout scheduler, the KV cache's layout, the sampler's device and
# the learner's sequence layout sample from the same distributions and give the same losses and gradients up to float rounding
# (rollouts are token for token the same: tests/rollout/test_continuous.py, on pages too; the packed learner
# equals the per-path one to 1e-5: tests/rl/batches/test_packed.py). A comparison identifies a run without
# them (`identity`), so a stored
# run is read back whichever scheduler or layout ran it, and switching either reruns nothing.
EXECUTION_SETTINGS = ("rl.decode_chunk", "rl.decode_slots", "rl.overlap_tools", "rl.kv_layout", "rl.kv_page_size",
                      "rl.kv_max_pages", "learner.layout", "eval.decode_chunk", "mesh.sampler_devices")


# The version of `identity`: bumped when what defines a stored run changes. Version 2 is every field of every
# section as the config classes hold them (version 1, before 2026-12-07, left out fields added after runs were
# stored while they held their old behaviour's value, and listed the task section as the union of every
# source's fields; studies/migrations/identity_v2.py moved every committed run, cache and checkpoint record).
# Version 3 (2026-12-07) adds `rl.max_staleness` (studies/migrations/staleness_v3.py moved every stored run: 0,
# the synchronous loop they ran).
IDENTITY_SCHEMA = 3


def settings(run: RunConfig, sections: tuple[str, ...] | None = None) -> dict[str, Any]:
    """`{"section.field": value}` for the given sections (all fields and the seed when None), as JSON
    would store it, so a stored copy compares equal."""
    flat = {"seed": run.seed} if sections is None else {}
    for name in sections or _SECTIONS:
        flat.update({f"{name}.{field}": value for field, value in dataclasses.asdict(getattr(run, name)).items()})
    return json.loads(json.dumps(flat))


def identity(run: RunConfig) -> dict[str, Any]:
    """What a stored comparison run is found under and carries (`identity.json`): the schema version and
    `settings(run)` without the `EXECUTION_SETTINGS`."""
    return {"schema": IDENTITY_SCHEMA,
            "settings": {k: v for k, v in settings(run).items() if k not in EXECUTION_SETTINGS}}


def require_same_settings(what: str, stored: dict[str, Any] | None, current: dict[str, Any],
                          ignore: tuple[str, ...] = ()) -> None:
    """Raises ConfigError naming every field where `current` differs from the settings `what` was
    made under (`stored`; None: made before settings were recorded, not checked)."""
    if stored is None:
        return
    skip = lambda key: any(key == i or key.startswith(i + ".") for i in ignore)  # noqa: E731
    differ = [f"{k}: {stored.get(k)!r} there, {current.get(k)!r} now" for k in sorted(set(stored) | set(current))
              if not skip(k) and stored.get(k) != current.get(k)]
    if differ:
        raise ConfigError(f"{what} was made under other settings ({'; '.join(differ)}); use another workdir, "
                          "or delete it to start over")
