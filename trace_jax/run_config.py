"""The typed run configuration: an `ml_collections.ConfigDict` from `configs/*.py` becomes frozen,
keyword-only dataclasses before any library code sees it. Unknown fields, conflicting fields and
paths that do not exist fail here, before compute, with the field named."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import jax

from trace_jax.allocation import ALLOCATORS, AllocatorConfig, BudgetConfig, default_advantage
from trace_jax.allocation.predictor import PredictorConfig
from trace_jax.envs import SOURCES
from trace_jax.envs.formats import FORMATS
from trace_jax.envs.tasks.datasets import DATASETS
from trace_jax.envs.eval_sets import EVAL_SETS, SEPARATE
from trace_jax.models.presets import PRESETS
from trace_jax.registry import RegistryError
from trace_jax.rl.advantages import ESTIMATORS, AdvantageConfig
from trace_jax.rl.learner import LearnerConfig
from trace_jax.rl.losses import LOSSES, LossConfig
from trace_jax.rollout.agent_loop import MAX_TURNS


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
    param_dtype: str = "float32"
    dtype: str = "float32"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskSection:
    """Attributes:
      source: a synthetic source ("multihop", "math", "funcall") or a dataset read from local files
        ("gsm8k", "deepscaler", "hotpotqa", "search_r1", "bfcl", "bfcl_multi_turn"; `envs/tasks/datasets.py`).
      seed: world/task generation seed.
      num_questions: synthetic questions generated (across splits).
      max_difficulty: hops/steps cap for the synthetic source (0 = the source default).
      max_turns, max_tokens: episode limits.
      search_top_k, search_words: passages per search and words per passage (multihop, hotpotqa, search_r1).
      train_path: a dataset's training file (bfcl, bfcl_multi_turn: the release's data directory; "" for
        bfcl_multi_turn: the installed bfcl_eval package's).
      test_path: its test file ("" = split the training file by question hash).
      corpus_path: the retrieval corpus JSONL ({id, contents}; required for search_r1, optional for hotpotqa).
      categories: bfcl's single-turn categories, comma-separated ("" = simple_python); bfcl_multi_turn's subsets
        ("" = all four).
      action_format: how the policy writes tool calls: "react" (`Action: tool[arg]`), "hermes" (native
        `<tool_call>` JSON of Qwen3/Hermes chat templates; needs a tokenizer whose template renders tools) or
        "search_r1" (`<search>`/`<answer>` with `<information>` results; search sources only).
      search_url: "" searches in-process with BM25; an http(s) URL sends the searches of hotpotqa/search_r1 to
        a Search-R1-compatible retrieval server there (`trace_jax/envs/tools/retrieval.py`).
      f1_success: 0 scores question answering (multihop, hotpotqa, search_r1) by exact match; > 0 also
        counts a final answer whose token F1 with a gold answer reaches it (the paper's HotpotQA success: 0.3).
        Both EM and F1 are reported either way.
      thinking: False renders chat-template prompts and observations with `enable_thinking=False` (Qwen3's
        hybrid templates then open each assistant turn with an empty think block: short turns, the notebook's
        choice); True leaves the template's default. Templates without the variable ignore it.
    """

    source: str = "multihop"
    seed: int = 0
    num_questions: int = 2000
    max_difficulty: int = 2
    max_turns: int = 5
    max_tokens: int = 200
    search_top_k: int = 2
    search_words: int = 24
    train_path: str = ""
    test_path: str = ""
    corpus_path: str = ""
    categories: str = ""
    search_url: str = ""
    action_format: str = "react"
    thinking: bool = True
    f1_success: float = 0.0


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
    """

    steps: int = 800
    batch_size: int = 8
    learning_rate: float = 3e-3
    num_demos: int = 2000
    mistake_rate: float = 0.1
    data_path: str = ""
    max_len: int = 512


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLSection:
    """Attributes:
      steps: RL steps.
      temperature, top_p, max_new_tokens: per-turn sampling.
      eval_every: evaluate every this many steps (0: only at the end).
      train_prompts: training prompts the RL stream cycles over (0 = the whole train split). A small
        pool makes prompts recur across steps, so allocators with per-prompt histories (mopps,
        knapsack) have histories to use.
    """

    steps: int = 80
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 40
    eval_every: int = 0
    train_prompts: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalSection:
    """Attributes:
      split: held-out split of the training source ("test", "validation"), or "separate": num_tasks
        questions from independent worlds of the same generator (`trace_jax.envs.eval_sets`).
      num_tasks: tasks evaluated (0 = all).
      pass_k: k of the sampled pass@k (0 = greedy accuracy only).
      sample_k: k of the sampled mean-of-k (mean success over k rollouts per task at rl.temperature,
        the same random numbers per task in every run: common random numbers; 0 = off).
      sample_tasks: the first this many evaluated tasks get the mean-of-k.
    """

    split: str = "test"
    num_tasks: int = 200
    pass_k: int = 0
    sample_k: int = 0
    sample_tasks: int = 250


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointSection:
    """Attributes:
      every: save every this many RL steps.
      keep: checkpoints kept.
    """

    every: int = 10
    keep: int = 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshSection:
    """Attributes: data, fsdp, tensor: mesh axis sizes (their product = the number of devices used)."""

    data: int = 1
    fsdp: int = 1
    tensor: int = 1


# Sections whose `name` picks a registry entry; the entry's config class validates the section.
_REGISTRY_SECTIONS = {"allocator": ALLOCATORS, "advantage": ESTIMATORS, "loss": LOSSES}
_SECTIONS = {"model": ModelSection, "task": TaskSection, "sft": SFTSection, "rl": RLSection,
             "learner": LearnerConfig, "budget": BudgetConfig, "allocator": AllocatorConfig,
             "predictor": PredictorConfig, "advantage": AdvantageConfig, "loss": LossConfig,
             "eval": EvalSection, "checkpoint": CheckpointSection, "mesh": MeshSection}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    seed: int
    model: ModelSection
    task: TaskSection
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


def from_config_dict(config) -> RunConfig:
    """Validates and converts; every problem names its field (e.g. `rl.stepz`)."""
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
                sections[name] = _REGISTRY_SECTIONS[name].config(given, default_name=cls().name)
            else:
                sections[name] = cls(**given)
        except (RegistryError, ValueError, TypeError) as e:
            raise ConfigError(f"config section '{name}': {e}") from None
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"config field 'seed'={seed!r} must be an integer >= 0")
    run = RunConfig(seed=seed, **sections)
    _check_fields(run)
    _check_consistency(run)
    return run


@dataclasses.dataclass(frozen=True)
class Range:
    """An interval a numeric config field must lie in."""

    low: float = float("-inf")
    high: float = float("inf")
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value) -> bool:
        return ((value > self.low if self.low_open else value >= self.low)
                and (value < self.high if self.high_open else value <= self.high))

    def __str__(self) -> str:
        return f"{'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


_AT_LEAST_0, _AT_LEAST_1 = Range(0), Range(1)
_POSITIVE = Range(0, low_open=True)
_PROBABILITY = Range(0, 1)

# Every numeric field of the plain sections and of the registry sections' base configs (entries'
# own options are checked by their config classes). A field not listed here has no range.
FIELD_RANGES: dict[str, Range] = {
    "task.seed": _AT_LEAST_0, "task.num_questions": _AT_LEAST_1, "task.max_difficulty": _AT_LEAST_0,
    "task.max_tokens": _AT_LEAST_1, "task.search_top_k": _AT_LEAST_1, "task.search_words": _AT_LEAST_1,
    "task.f1_success": _PROBABILITY,
    "sft.steps": _AT_LEAST_0, "sft.batch_size": _AT_LEAST_1, "sft.learning_rate": _POSITIVE,
    "sft.num_demos": _AT_LEAST_1, "sft.mistake_rate": _PROBABILITY, "sft.max_len": Range(2),
    "rl.steps": _AT_LEAST_0, "rl.temperature": _POSITIVE, "rl.top_p": Range(0, 1, low_open=True),
    "rl.max_new_tokens": _AT_LEAST_1, "rl.eval_every": _AT_LEAST_0, "rl.train_prompts": _AT_LEAST_0,
    "learner.learning_rate": _POSITIVE, "learner.weight_decay": _AT_LEAST_0, "learner.max_grad_norm": _POSITIVE,
    "learner.micro_batch": _AT_LEAST_1,
    "budget.rollouts": _AT_LEAST_1, "budget.prompts": _AT_LEAST_1, "budget.candidates": _AT_LEAST_1,
    "budget.m_min": _AT_LEAST_1, "budget.m_max": _AT_LEAST_1, "budget.rounds": _AT_LEAST_0,
    "budget.branch_k": _AT_LEAST_1,
    "predictor.width": _AT_LEAST_1, "predictor.learning_rate": _POSITIVE, "predictor.epochs": _AT_LEAST_1,
    "predictor.replay_steps": _AT_LEAST_1, "predictor.weight_cap": _POSITIVE,
    "advantage.lambda_local": _AT_LEAST_0, "advantage.eps": _POSITIVE,
    "loss.clip_low": Range(0, 1, high_open=True), "loss.clip_high": _AT_LEAST_0, "loss.kl_coef": _AT_LEAST_0,
    "eval.num_tasks": _AT_LEAST_0, "eval.pass_k": _AT_LEAST_0, "eval.sample_k": _AT_LEAST_0,
    "eval.sample_tasks": _AT_LEAST_0,
    "checkpoint.every": _AT_LEAST_1, "checkpoint.keep": _AT_LEAST_1,
    "mesh.data": _AT_LEAST_1, "mesh.fsdp": _AT_LEAST_1, "mesh.tensor": _AT_LEAST_1,
}
_SCALAR_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def _check_fields(run: RunConfig) -> None:
    """Types (from each field's annotation) and ranges (FIELD_RANGES) of every field, named in the error."""
    for name in _SECTIONS:
        section = getattr(run, name)
        for field in dataclasses.fields(section):
            key, value = f"{name}.{field.name}", getattr(section, field.name)
            kinds = _SCALAR_TYPES.get(str(field.type))
            if kinds and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
                raise ConfigError(f"config field '{key}'={value!r} must be of type {field.type}")
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"config field '{key}'={value!r} must be a finite number")
            allowed = FIELD_RANGES.get(key)
            if allowed is not None and value not in allowed:
                raise ConfigError(f"config field '{key}'={value!r} is out of range: allowed {allowed}")
    if run.budget.m_min > run.budget.m_max:
        raise ConfigError(f"config fields 'budget.m_min'={run.budget.m_min} and 'budget.m_max'={run.budget.m_max} "
                          "conflict: m_min must be <= m_max")
    if run.budget.prompts > run.budget.candidates:
        raise ConfigError(f"config fields 'budget.prompts'={run.budget.prompts} and 'budget.candidates'="
                          f"{run.budget.candidates} conflict: prompts are chosen among the candidates")


def _check_dataset(task: TaskSection, evaluation: EvalSection) -> None:
    """The files a dataset source reads exist (named before any compute); synthetic sources take none."""
    given = {f"task.{k}": getattr(task, k) for k in ("train_path", "test_path", "corpus_path", "categories",
                                                      "search_url")}
    if task.source in SOURCES:
        extra = [k for k, v in given.items() if v]
        if extra:
            raise ConfigError(f"config field(s) {extra} apply to the dataset sources {sorted(DATASETS)}, not to "
                              f"the synthetic source {task.source!r}")
        return
    if not task.train_path and task.source != "bfcl_multi_turn":  # "" there: the installed bfcl_eval's data
        raise ConfigError(f"config field 'task.train_path' must name the training file of task.source="
                          f"{task.source!r}" + (" (the release's data directory)" if task.source == "bfcl" else ""))
    for key in ("task.train_path", "task.test_path", "task.corpus_path"):
        if given[key] and not os.path.exists(given[key]):
            raise ConfigError(f"config field '{key}': path {given[key]!r} does not exist")
    if task.source == "search_r1" and not task.corpus_path and not task.search_url:
        raise ConfigError("config field 'task.corpus_path' must name the corpus JSONL for task.source='search_r1' "
                          "(or task.search_url a retrieval server)")
    if task.search_url and (task.source not in ("hotpotqa", "search_r1")
                            or not task.search_url.startswith(("http://", "https://"))):
        raise ConfigError(f"config field 'task.search_url'={task.search_url!r}: an http(s) URL, for the search "
                          "sources hotpotqa and search_r1")
    if task.categories and task.source not in ("bfcl", "bfcl_multi_turn"):
        raise ConfigError("config field 'task.categories' applies to task.source='bfcl' and 'bfcl_multi_turn' only")
    if evaluation.split == SEPARATE:
        raise ConfigError(f"config field 'eval.split'='separate' needs a synthetic generator; task.source="
                          f"{task.source!r} reads files: use 'test' (task.test_path) or 'validation'")


def _check_consistency(run: RunConfig) -> None:
    if run.model.preset not in PRESETS and not run.model.checkpoint:
        raise ConfigError(f"config field 'model.preset': unknown preset {run.model.preset!r}; known {sorted(PRESETS)}")
    if not run.model.checkpoint and run.model.preset not in ("tiny", "mini", "small"):
        raise ConfigError(f"config field 'model.checkpoint' is empty: preset {run.model.preset!r} is a real model "
                          "shape and needs local weights (random init is only for tiny/mini/small)")
    for field, path in (("model.checkpoint", run.model.checkpoint), ("model.tokenizer", run.model.tokenizer),
                        ("sft.data_path", run.sft.data_path)):
        if path and not os.path.exists(path):
            raise ConfigError(f"config field '{field}': path {path!r} does not exist")
    if run.task.action_format not in FORMATS:
        raise ConfigError(f"config field 'task.action_format': unknown format {run.task.action_format!r}; known "
                          f"{sorted(FORMATS)}")
    if FORMATS[run.task.action_format].needs_chat_template and not (run.model.checkpoint or run.model.tokenizer):
        raise ConfigError(f"config field 'task.action_format'={run.task.action_format!r} needs a chat template: set "
                          "model.checkpoint or model.tokenizer (the bundled tokenizer has none)")
    if run.task.source not in SOURCES and run.task.source not in DATASETS:
        raise ConfigError(f"config field 'task.source': unknown source {run.task.source!r}; known "
                          f"{sorted(SOURCES) + sorted(DATASETS)}")
    _check_dataset(run.task, run.eval)
    if not 1 <= run.task.max_turns <= MAX_TURNS:
        raise ConfigError(f"config field 'task.max_turns'={run.task.max_turns} must be in [1, {MAX_TURNS}] (every "
                          "turn of a branch draws its own sampling keys from a fixed per-branch range)")
    if abs(run.loss.temperature - run.rl.temperature) > 1e-9:
        raise ConfigError(f"config fields 'loss.temperature'={run.loss.temperature} and 'rl.temperature'="
                          f"{run.rl.temperature} conflict: the learner must score tokens at the sampling temperature")
    if run.eval.split not in EVAL_SETS:
        raise ConfigError(f"config field 'eval.split': unknown eval set {run.eval.split!r}; known {list(EVAL_SETS)}")
    if run.eval.split == SEPARATE and not run.eval.num_tasks:
        raise ConfigError("config field 'eval.num_tasks' must be set (> 0) with eval.split='separate': it is the "
                          "number of questions the separate generator draws")
    devices = run.mesh.data * run.mesh.fsdp * run.mesh.tensor
    batch_devices = run.mesh.data * run.mesh.fsdp
    if devices > 1 and run.learner.micro_batch % batch_devices:
        raise ConfigError(f"config fields 'learner.micro_batch'={run.learner.micro_batch} and 'mesh' (data x fsdp = "
                          f"{batch_devices}) conflict: a micro-batch's sequences are split over data x fsdp, so "
                          f"micro_batch must be a multiple of {batch_devices}")
    if devices > jax.device_count():
        raise ConfigError(f"config field 'mesh': data x fsdp x tensor = {devices} devices, but only "
                          f"{jax.device_count()} are available")


# What a checkpoint's weights depend on. An SFT checkpoint: the model, the task and the SFT recipe
# (not the RL seed: every run of a comparison restores one SFT checkpoint). An RL checkpoint: every
# field except those a resumed run may change (train longer, evaluate differently, another mesh).
SFT_SETTINGS = ("model", "task", "sft")
RESUMABLE_SETTINGS = ("rl.steps", "rl.eval_every", "eval", "checkpoint", "mesh")


# Fields added after runs were stored under `settings`: left out while they hold these values (which keep
# the old behaviour), so a stored run, checkpoint or cached study is still found under its settings.
ADDED_FIELDS = {"task.train_path": "", "task.test_path": "", "task.corpus_path": "", "task.categories": "",
                "task.search_url": "", "task.action_format": "react", "task.thinking": True, "task.f1_success": 0.0}


def settings(run: RunConfig, sections: tuple[str, ...] | None = None) -> dict[str, Any]:
    """`{"section.field": value}` for the given sections (all fields and the seed when None), as JSON
    would store it, so a stored copy compares equal."""
    flat = {"seed": run.seed} if sections is None else {}
    for name in sections or _SECTIONS:
        for field, value in dataclasses.asdict(getattr(run, name)).items():
            key = f"{name}.{field}"
            if not (key in ADDED_FIELDS and value == ADDED_FIELDS[key]):
                flat[key] = value
    return json.loads(json.dumps(flat))


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
