"""The checks a run configuration passes before any compute (`files.from_config_dict` runs them after `schema.parse`): every
field's type and range (declared on the field: `trace_jax/ranges.py`), the files a dataset source reads, and the fields that must agree
with each other (presets and checkpoints, formats and tokenizers, budgets, meshes). Each error names the
field."""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import numpy as np

from trace_jax import ranges
from trace_jax.config.schema import ConfigError, EvalSection, RunConfig, section_classes
from trace_jax.envs.eval_sets import EVAL_SETS, SEPARATE
from trace_jax.envs.formats import FORMATS
from trace_jax.envs.sources import TaskConfig
from trace_jax.models.presets import PRESETS
from trace_jax.rollout.agent_loop import MAX_TURNS


_SCALAR_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def check_fields(run: RunConfig) -> None:
    """Types (from each field's annotation) and ranges (each field's own, `ranges.allowed`) of every field, named
    in the error."""
    for name in section_classes():
        section = getattr(run, name)
        for field in dataclasses.fields(section):
            key, value = f"{name}.{field.name}", getattr(section, field.name)
            kinds = _SCALAR_TYPES.get(str(field.type))
            if kinds and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
                raise ConfigError(f"config field '{key}'={value!r} must be of type {field.type}")
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"config field '{key}'={value!r} must be a finite number")
            allowed = ranges.allowed(field)
            problem = ranges.violation(key, value, allowed)
            if problem:
                raise ConfigError(problem)
            if allowed == ranges.POSITIVE and not np.float32(value) > 0:  # used on the device in float32
                raise ConfigError(f"config field '{key}'={value!r} is 0 in float32, the dtype it is used in: it must "
                                  f"be at least {float(np.finfo(np.float32).smallest_subnormal):g}")
    if not isinstance(run.seed, int) or isinstance(run.seed, bool) or run.seed not in ranges.SEED:
        raise ConfigError(f"config field 'seed'={run.seed!r} must be an integer in {ranges.SEED}")


def require_readable(field: str, path: str, *, directory: bool) -> None:
    """`path` exists, is a directory (`directory`) or a regular file, and this process may read it."""
    if not os.path.exists(path):
        raise ConfigError(f"config field '{field}': path {path!r} does not exist")
    kind, ok = ("a directory", os.path.isdir(path)) if directory else ("a readable file", os.path.isfile(path))
    if not ok:
        raise ConfigError(f"config field '{field}': path {path!r} is not {kind}")
    if not os.access(path, os.R_OK | (os.X_OK if directory else 0)):
        raise ConfigError(f"config field '{field}': path {path!r} cannot be read by this process")


def _check_dataset(task: TaskConfig, evaluation: EvalSection) -> None:
    """The files a file-reading source reads exist (named before any compute). Which fields a source has is
    its config class's (`envs/sources.py`): another source's field was refused when the section was parsed."""
    if not hasattr(task, "train_path"):  # a generated source reads no file
        return
    if not task.train_path and task.source != "bfcl_multi_turn":  # "" there: the installed bfcl_eval's data
        raise ConfigError(f"config field 'task.train_path' must name the training file of task.source="
                          f"{task.source!r}" + (" (the release's data directory)" if task.source == "bfcl" else ""))
    for field in ("train_path", "test_path", "corpus_path"):
        path = getattr(task, field, "")
        directory = field == "train_path" and task.source in ("bfcl", "bfcl_multi_turn")  # the release's data dir
        if path:
            require_readable(f"task.{field}", path, directory=directory)
    if task.source == "search_r1" and not task.corpus_path and not task.search_url:
        raise ConfigError("config field 'task.corpus_path' must name the corpus JSONL for task.source='search_r1' "
                          "(or task.search_url a retrieval server)")
    search_url = getattr(task, "search_url", "")
    if search_url and not search_url.startswith(("http://", "https://")):
        raise ConfigError(f"config field 'task.search_url'={search_url!r}: an http(s) URL of a retrieval server")
    if evaluation.split == SEPARATE:
        raise ConfigError(f"config field 'eval.split'='separate' needs a synthetic generator; task.source="
                          f"{task.source!r} reads files: use 'test' (task.test_path) or 'validation'")


def check_consistency(run: RunConfig) -> None:
    if run.model.preset not in PRESETS and not run.model.checkpoint:
        raise ConfigError(f"config field 'model.preset': unknown preset {run.model.preset!r}; known {sorted(PRESETS)}")
    if not run.model.checkpoint and run.model.preset not in ("tiny", "mini", "small"):
        raise ConfigError(f"config field 'model.checkpoint' is empty: preset {run.model.preset!r} is a real model "
                          "shape and needs local weights (random init is only for tiny/mini/small)")
    for field, path, directory in (("model.checkpoint", run.model.checkpoint, True),
                                   ("model.tokenizer", run.model.tokenizer, True), ("sft.data_path", run.sft.data_path, False)):
        if path:
            require_readable(field, path, directory=directory)
    if run.task.action_format not in FORMATS:
        raise ConfigError(f"config field 'task.action_format': unknown format {run.task.action_format!r}; known "
                          f"{sorted(FORMATS)}")
    if FORMATS[run.task.action_format].needs_chat_template and not (run.model.checkpoint or run.model.tokenizer):
        raise ConfigError(f"config field 'task.action_format'={run.task.action_format!r} needs a chat template: set "
                          "model.checkpoint or model.tokenizer (the bundled tokenizer has none)")
    _check_dataset(run.task, run.eval)
    if not 1 <= run.task.max_turns <= MAX_TURNS:
        raise ConfigError(f"config field 'task.max_turns'={run.task.max_turns} must be in [1, {MAX_TURNS}] (every "
                          "turn of a branch draws its own sampling keys from a fixed per-branch range)")
    if run.sft.max_difficulty and run.sft.data_path:
        raise ConfigError(f"config fields 'sft.max_difficulty'={run.sft.max_difficulty} and 'sft.data_path' conflict: "
                          "the difficulty cap chooses oracle demonstrations, a data file replaces them")
    if abs(run.loss.temperature - run.rl.temperature) > 1e-9:
        raise ConfigError(f"config fields 'loss.temperature'={run.loss.temperature} and 'rl.temperature'="
                          f"{run.rl.temperature} conflict: the learner must score tokens at the sampling temperature")
    if run.eval.sample_every and not run.eval.sample_k:
        raise ConfigError(f"config field 'eval.sample_every'={run.eval.sample_every} needs 'eval.sample_k' > 0 (the k "
                          "of the mean-of-k it measures)")
    if run.eval.num_tasks and run.eval.intermediate_tasks > run.eval.num_tasks:
        raise ConfigError(f"config field 'eval.intermediate_tasks'={run.eval.intermediate_tasks} exceeds "
                          f"'eval.num_tasks'={run.eval.num_tasks}: the intermediate subset is a part of the evaluated tasks")
    if run.eval.split not in EVAL_SETS:
        raise ConfigError(f"config field 'eval.split': unknown eval set {run.eval.split!r}; known {list(EVAL_SETS)}")
    if run.eval.split == SEPARATE and not run.eval.num_tasks:
        raise ConfigError("config field 'eval.num_tasks' must be set (> 0) with eval.split='separate': it is the "
                          "number of questions the separate generator draws")
    pool_tokens = run.rl.kv_max_pages * run.rl.kv_page_size
    row_tokens = run.task.max_tokens + run.rl.max_new_tokens
    if run.rl.kv_layout == "paged" and run.rl.kv_max_pages and pool_tokens < row_tokens:
        raise ConfigError(f"config fields 'rl.kv_max_pages'={run.rl.kv_max_pages} x 'rl.kv_page_size'="
                          f"{run.rl.kv_page_size} = {pool_tokens} KV tokens cannot hold one rollout row, which reaches "
                          f"'task.max_tokens'={run.task.max_tokens} + 'rl.max_new_tokens'={run.rl.max_new_tokens} "
                          "tokens past its prompt: raise rl.kv_max_pages, or set it to 0 (the pool grows as needed)")
    devices = run.mesh.data * run.mesh.fsdp * run.mesh.tensor
    batch_devices = run.mesh.data * run.mesh.fsdp
    if devices > 1 and run.learner.micro_batch % batch_devices:
        raise ConfigError(f"config fields 'learner.micro_batch'={run.learner.micro_batch} and 'mesh' (data x fsdp = "
                          f"{batch_devices}) conflict: a micro-batch's sequences are split over data x fsdp, so "
                          f"micro_batch must be a multiple of {batch_devices}")
    if devices > jax.device_count():
        raise ConfigError(f"config field 'mesh': data x fsdp x tensor = {devices} devices, but only "
                          f"{jax.device_count()} are available")
    if jax.process_count() > 1 and devices != jax.device_count():
        raise ConfigError(f"config field 'mesh': data x fsdp x tensor = {devices} devices, but this run has "
                          f"{jax.process_count()} processes with {jax.device_count()} devices in all: the mesh must span "
                          f"all of them (e.g. --config.mesh.data={jax.device_count()}), else every process would run "
                          "every rollout and turn on its own")
