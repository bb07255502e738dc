"""What every entry point builds on: a checked config turned into a `Setup` (model, tokenizer, task source,
env, sampling, eval groups, mesh), the train and eval task lists, derived seeds, and process-0 logging.
The warm start is `sft.py`'s, held-out evaluation `evaluation.py`'s."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import TYPE_CHECKING

import jax
import numpy as np
from jax.sharding import Mesh

from trace_jax.config import schema
from trace_jax.config.files import from_config_dict
from trace_jax.envs import Limits
from trace_jax.envs.eval_sets import SEPARATE, EvalGroup, flat_tasks, separate_eval_set, split_eval_set
from trace_jax.envs.formats import FORMATS
from trace_jax.envs.protocol import Env, TaskSource
from trace_jax.envs.oracle import run_episode
from trace_jax.envs.render import ChatRenderer, ReactRenderer
from trace_jax.envs.sources import TASK_SOURCES, TaskConfig
from trace_jax.models import hf_io, init_params
from trace_jax.models.config import ModelConfig
from trace_jax.models.transformer import Params
from trace_jax.models.presets import get_preset
from trace_jax.models.tokenizer import build_tokenizer, load_tokenizer, synthetic_corpus
from trace_jax.parallel.mesh import make_mesh
from trace_jax.parallel.rules import to_sampling_layout
from trace_jax.rollout.agent_loop import Policy
from trace_jax.rollout.continuous import Batching
from trace_jax.sampling import SamplingParams
from trace_jax.sampling.paged import PagePool

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def banner(title: str) -> None:
    if jax.process_index() == 0:
        print(f"\n==== {title} " + "=" * max(0, 60 - len(title)), flush=True)


def log(message: str) -> None:
    if jax.process_index() == 0:
        print(message, flush=True)


def derive_seed(*parts) -> int:
    """A 32-bit seed from JSON-able parts (run seed, purpose, step...): independent streams per purpose."""
    return int(hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:8], 16)


@dataclasses.dataclass
class Setup:
    """Everything built from a validated config, before any training compute."""

    run: schema.RunConfig
    model_config: ModelConfig
    params: Params
    tokenizer: PreTrainedTokenizerBase
    renderer: ReactRenderer  # or its subclass ChatRenderer
    source: TaskSource
    env: Env
    sampling: SamplingParams
    eval_groups: list[EvalGroup]
    mesh: Mesh | None = None  # the configured (data, fsdp, tensor) mesh; None on one device
    pages: PagePool | None = None  # the rollouts' KV page pool (rl.kv_layout="paged" on one device), kept all run
    sampler_device: jax.Device | None = None  # where rollouts run (mesh.sampler_devices=1); None: the learner's

    def policy(self, params=None) -> Policy:
        """The sampling policy; on a mesh its params are resharded into the sampling layout
        (`parallel/rules.py`; a no-op when they already are)."""
        params = self.params if params is None else params
        return Policy(self.model_config, to_sampling_layout(params, self.mesh), self.sampling, self.renderer,
                      Batching(chunk=self.run.rl.decode_chunk, slots=self.run.rl.decode_slots,
                               overlap_tools=self.run.rl.overlap_tools, keep_prefixes=self.run.rl.keep_prefixes),
                      self.pages)


def _world(task: TaskConfig):
    """The task source (built by its registry entry from its config alone) and its environment."""
    source = TASK_SOURCES.make(task)
    env = source.make_env(Limits(max_turns=task.max_turns, max_tokens=task.max_tokens))
    env.action_format = FORMATS[task.action_format]
    missing = [t for t in env.action_format.requires_tools if t not in env.tools]
    if missing:
        raise schema.ConfigError(f"config field 'task.action_format'={task.action_format!r} is written for the "
                                     f"tool(s) {missing}, which task.source={task.source!r} does not have")
    return source, env


def _eval_groups(run: schema.RunConfig, source, env) -> list[EvalGroup]:
    """The held-out set; refused (before any compute) when it holds no task: accuracy over zero tasks reads 0.0."""
    if run.eval.split == SEPARATE:
        return separate_eval_set(lambda seed: _world(dataclasses.replace(run.task, seed=seed)), source,
                                 run.eval.num_tasks, seed=run.task.seed)
    groups = split_eval_set(source, env, run.eval.split, run.eval.num_tasks)
    if not flat_tasks(groups):
        size = f" (task.num_questions={run.task.num_questions})" if hasattr(run.task, "num_questions") else ""
        raise schema.ConfigError(f"config field 'eval.split'={run.eval.split!r}: the source holds no task in that split"
                                 f"{size}; ask for more questions or evaluate on another split")
    return groups


def _tokenizer(run: schema.RunConfig, source, workdir: str):
    if run.model.tokenizer:
        return load_tokenizer(run.model.tokenizer)
    if run.model.checkpoint:
        try:
            return load_tokenizer(run.model.checkpoint)
        except (ValueError, FileNotFoundError) as e:
            raise hf_io.CheckpointError(f"config field 'model.checkpoint': {e}") from None
    path = os.path.join(workdir, "tokenizer")
    if not os.path.exists(os.path.join(path, "tokenizer.json")):
        # The bundled BPE, trained on this task's own text (oracle episodes) plus generic lines.
        env, oracle = source.make_env(), source.oracle(0.1)
        texts = []
        for i, task in enumerate(source.tasks("train")[:600]):
            trajectory = run_episode(env, task, oracle, seed=i)
            texts += [m["content"] for m in trajectory.messages] + [t for turn in trajectory.turns for t in turn if t]
        build_tokenizer(path, texts=texts + synthetic_corpus(num_lines=1000, seed=run.seed),
                        vocab_size=get_preset(run.model.preset).vocab_size)
    return load_tokenizer(path)


def _template_args(task: TaskConfig) -> dict:
    return {} if task.thinking else {"enable_thinking": False}


def _require_positions(run: schema.RunConfig, positions: int) -> None:
    """Generation lengths the model cannot hold (its max_position_embeddings) are refused before any compute.
    (`sft.max_len` is a truncation cap, not a length: BFCL multi-turn's `:runlocal` trains its tiny model on
    demonstrations past the preset's nominal positions, which RoPE computes.)"""
    for key, value in (("rl.max_new_tokens", run.rl.max_new_tokens), ("task.max_tokens", run.task.max_tokens)):
        if value > positions:
            raise schema.ConfigError(f"config field {key!r}={value} exceeds the model's {positions} positions "
                                         "(max_position_embeddings)")


def _require_vocabulary(tokenizer, vocab_size: int, what: str) -> None:
    """Every token id the tokenizer can produce has an embedding row (else: out-of-range ids, silent NaN logits)."""
    if len(tokenizer) > vocab_size:
        raise schema.ConfigError(f"tokenizer has {len(tokenizer)} tokens but {what} has vocab_size {vocab_size}")


def build(config, workdir: str) -> Setup:
    """Validates the config (failing before compute) and builds model, tokenizer, task source, env."""
    run = config if isinstance(config, schema.RunConfig) else from_config_dict(config)
    os.makedirs(workdir, exist_ok=True)
    source, env = _world(run.task)
    tokenizer = _tokenizer(run, source, workdir)
    if run.model.checkpoint:
        _require_vocabulary(tokenizer, hf_io.read_config(run.model.checkpoint).vocab_size,
                            f"the checkpoint's config ({run.model.checkpoint}/config.json)")  # before any tensor is read
        model_config, params = hf_io.load(run.model.checkpoint, dtype=run.model.param_dtype,
                                          compute_dtype=run.model.dtype)
        renderer = ChatRenderer.for_format(tokenizer, run.task.action_format, _template_args(run.task))
    else:
        model_config = get_preset(run.model.preset, param_dtype=run.model.param_dtype, dtype=run.model.dtype)
        _require_vocabulary(tokenizer, model_config.vocab_size, f"model preset {run.model.preset!r}")
        params = init_params(model_config, run.seed)
        action_format = FORMATS[run.task.action_format]
        renderer = (ChatRenderer.for_format(tokenizer, run.task.action_format, _template_args(run.task))
                    if action_format.needs_chat_template
                    else ReactRenderer(tokenizer, action_format))
    _require_positions(run, model_config.max_position_embeddings)
    sampling = SamplingParams(temperature=run.rl.temperature, top_p=run.rl.top_p,
                              max_new_tokens=run.rl.max_new_tokens)
    model_config = model_config.replace(remat=run.learner.remat)
    mesh_shape = (run.mesh.data, run.mesh.fsdp, run.mesh.tensor)
    mesh = make_mesh(*mesh_shape) if np.prod(mesh_shape) > 1 else None
    pages = None
    if run.rl.kv_layout == "paged" and mesh is None:
        pages = PagePool(model_config, page_size=run.rl.kv_page_size, max_pages=run.rl.kv_max_pages)
    elif run.rl.kv_layout == "paged":
        print(f"rl.kv_layout='paged' is one device's: this run on a {mesh_shape} mesh decodes on the dense KV cache",
              flush=True)
    return Setup(run, model_config, params, tokenizer, renderer, source, env, sampling,
                 _eval_groups(run, source, env), mesh, pages, _sampler_device(run, mesh))


def _sampler_device(run: schema.RunConfig, mesh: Mesh | None):
    """The rollouts' own device (`mesh.sampler_devices`=1): the second local device, beside a one-device learner.
    Refuses overlapping rollouts across processes: every process must launch the same programs in the same order,
    and a sampler thread beside the learner's orders them differently in each process."""
    if run.rl.max_staleness and jax.process_count() > 1:
        raise schema.ConfigError(f"config field 'rl.max_staleness'={run.rl.max_staleness} overlaps rollouts with the "
                                 f"learner in one process; this run spans {jax.process_count()} processes, whose "
                                 "programs would interleave differently (not built: use rl.max_staleness=0)")
    if not run.mesh.sampler_devices:
        return None
    if mesh is not None:
        raise schema.ConfigError(f"config field 'mesh.sampler_devices'=1 needs a one-device learner (mesh.data x "
                                 f"fsdp x tensor = 1, got {dict(mesh.shape)}): a sampler mesh beside a learner mesh "
                                 "is not built")
    if jax.local_device_count() < 2:
        raise schema.ConfigError("config field 'mesh.sampler_devices'=1 needs 2 local devices, this process has "
                                 f"{jax.local_device_count()} (on a CPU host: XLA_FLAGS="
                                 "--xla_force_host_platform_device_count=2)")
    return jax.local_devices()[1]


def train_tasks(setup: Setup) -> list:
    """The training prompts the RL stream cycles over (the first `rl.train_prompts` of the train split)."""
    tasks = setup.source.tasks("train")
    return tasks[: setup.run.rl.train_prompts] if setup.run.rl.train_prompts else tasks


def eval_tasks(setup: Setup) -> list:
    """The held-out tasks evaluation scores (`eval.split`, `eval.num_tasks`), in order."""
    return flat_tasks(setup.eval_groups)
