"""What every entry point builds on: a validated config turned into a `Setup` (model, tokenizer,
task source, env, sampling), the supervised warm start (`warm_start`, restored when its checkpoint
exists, resumed when a partial one does), held-out evaluation, derived seeds, and process-0 logging."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from trace_jax import run_config
from trace_jax.checkpointing import Checkpointer
from trace_jax.envs import SOURCES, Limits
from trace_jax.envs.oracle import run_episode
from trace_jax.envs.tasks.datasets import DATASETS
from trace_jax.envs.render import ChatRenderer, ReactRenderer
from trace_jax.envs.formats import FORMATS
from trace_jax.envs.eval_sets import SEPARATE, EvalGroup, flat_tasks, separate_eval_set, split_eval_set
from trace_jax.evaluation import accuracy, grouped_outcomes, mean_of_k, write_outcomes
from trace_jax.metrics import MetricWriter
from trace_jax.models import hf_io, init_params
from trace_jax.models.presets import get_preset
from trace_jax.models.tokenizer import build_tokenizer, load_tokenizer, synthetic_corpus
from trace_jax.parallel.mesh import make_mesh
from trace_jax.parallel.rules import to_sampling_layout
from trace_jax.rl import learner
from trace_jax.rollout.agent_loop import Policy
from trace_jax.rollout.continuous import Batching
from trace_jax.sampling import SamplingParams
from trace_jax.sft import conversation_demonstrations, make_batch, oracle_demonstrations, sft_step
from trace_jax.stopping import RunInterrupted, StopFlag


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

    run: run_config.RunConfig
    model_config: object
    params: dict
    tokenizer: object
    renderer: ReactRenderer
    source: object
    env: object
    sampling: SamplingParams
    eval_groups: list[EvalGroup]
    mesh: Mesh | None = None  # the configured (data, fsdp, tensor) mesh; None on one device

    def policy(self, params=None) -> Policy:
        """The sampling policy; on a mesh its params are resharded into the sampling layout
        (`parallel/rules.py`; a no-op when they already are)."""
        params = self.params if params is None else params
        return Policy(self.model_config, to_sampling_layout(params, self.mesh), self.sampling, self.renderer,
                      Batching(chunk=self.run.rl.decode_chunk, slots=self.run.rl.decode_slots,
                               overlap_tools=self.run.rl.overlap_tools, keep_prefixes=self.run.rl.keep_prefixes))


def _world(task: run_config.TaskSection):
    """The task source and its environment, as the config builds them."""
    source = _source(task)
    env = source.make_env(Limits(max_turns=task.max_turns, max_tokens=task.max_tokens))
    env.action_format = FORMATS[task.action_format]
    if task.f1_success:
        if not hasattr(env, "f1_success"):
            raise run_config.ConfigError(f"config field 'task.f1_success' applies to question answering "
                                         f"(multihop, hotpotqa, search_r1), not to task.source={task.source!r}")
        env.f1_success = task.f1_success
    missing = [t for t in env.action_format.requires_tools if t not in env.tools]
    if missing:
        raise run_config.ConfigError(f"config field 'task.action_format'={task.action_format!r} is written for the "
                                     f"tool(s) {missing}, which task.source={task.source!r} does not have")
    return source, env


def _eval_groups(run: run_config.RunConfig, source, env) -> list[EvalGroup]:
    if run.eval.split == SEPARATE:
        return separate_eval_set(lambda seed: _world(dataclasses.replace(run.task, seed=seed)), source,
                                 run.eval.num_tasks, seed=run.task.seed)
    return split_eval_set(source, env, run.eval.split, run.eval.num_tasks)


def _source(task: run_config.TaskSection):
    if task.source in DATASETS:
        source = DATASETS[task.source](train_path=task.train_path, test_path=task.test_path,
                                       corpus_path=task.corpus_path, categories=task.categories,
                                       search_url=task.search_url)
        if hasattr(source, "index"):
            source.index.top_k, source.index.max_words = task.search_top_k, task.search_words
        return source
    kwargs = {"num_questions": task.num_questions}
    if task.max_difficulty:
        kwargs[{"multihop": "max_hops", "math": "max_steps"}.get(task.source, "")] = task.max_difficulty
        kwargs.pop("", None)
    source = SOURCES[task.source](task.seed, **kwargs)
    if task.source == "multihop":
        source.index.top_k, source.index.max_words = task.search_top_k, task.search_words
    return source


def _tokenizer(run: run_config.RunConfig, source, workdir: str):
    if run.model.tokenizer:
        return load_tokenizer(run.model.tokenizer)
    if run.model.checkpoint:
        return load_tokenizer(run.model.checkpoint)
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


def _template_args(task: run_config.TaskSection) -> dict:
    return {} if task.thinking else {"enable_thinking": False}


def _require_positions(run: run_config.RunConfig, positions: int) -> None:
    """Generation lengths the model cannot hold (its max_position_embeddings) are refused before any compute.
    (`sft.max_len` is a truncation cap, not a length: BFCL multi-turn's `:runlocal` trains its tiny model on
    demonstrations past the preset's nominal positions, which RoPE computes.)"""
    for key, value in (("rl.max_new_tokens", run.rl.max_new_tokens), ("task.max_tokens", run.task.max_tokens)):
        if value > positions:
            raise run_config.ConfigError(f"config field {key!r}={value} exceeds the model's {positions} positions "
                                         "(max_position_embeddings)")


def build(config, workdir: str) -> Setup:
    """Validates the config (failing before compute) and builds model, tokenizer, task source, env."""
    run = config if isinstance(config, run_config.RunConfig) else run_config.from_config_dict(config)
    os.makedirs(workdir, exist_ok=True)
    source, env = _world(run.task)
    tokenizer = _tokenizer(run, source, workdir)
    if run.model.checkpoint:
        model_config, params = hf_io.load(run.model.checkpoint, dtype=run.model.param_dtype,
                                          compute_dtype=run.model.dtype)
        renderer = ChatRenderer.for_format(tokenizer, run.task.action_format, _template_args(run.task))
    else:
        model_config = get_preset(run.model.preset, param_dtype=run.model.param_dtype, dtype=run.model.dtype)
        if len(tokenizer) > model_config.vocab_size:
            raise run_config.ConfigError(f"tokenizer has {len(tokenizer)} tokens but model preset "
                                         f"{run.model.preset!r} has vocab_size {model_config.vocab_size}")
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
    return Setup(run, model_config, params, tokenizer, renderer, source, env, sampling,
                 _eval_groups(run, source, env), mesh)


def train_tasks(setup: Setup) -> list:
    """The training prompts the RL stream cycles over (the first `rl.train_prompts` of the train split)."""
    tasks = setup.source.tasks("train")
    return tasks[: setup.run.rl.train_prompts] if setup.run.rl.train_prompts else tasks


def eval_tasks(setup: Setup) -> list:
    """The held-out tasks evaluation scores (`eval.split`, `eval.num_tasks`), in order."""
    return flat_tasks(setup.eval_groups)


MEAN_OF_K_SEED = 20261203  # one seed for every run's mean-of-k: the same random numbers per task in every arm


def held_out(setup: Setup, params, *, outcomes_path: str | None = None, sampled: bool = True) -> dict[str, float]:
    """Greedy accuracy on the eval tasks (+ pass@k and mean-of-k when configured and `sampled`); with
    `outcomes_path`, the per-task outcomes behind them are written there (`evaluation.read_outcomes`)."""
    run, policy, groups = setup.run, setup.policy(params), setup.eval_groups
    greedy = grouped_outcomes(policy, groups, greedy=True)
    out = accuracy(greedy)
    outcomes = {"greedy": greedy}
    if run.eval.pass_k and sampled:
        out.update(accuracy(grouped_outcomes(policy, groups, greedy=False, k=run.eval.pass_k, seed=run.seed),
                            f"pass@{run.eval.pass_k}"))
    if run.eval.sample_k and sampled:
        outcomes["sampled"] = grouped_outcomes(policy, groups, limit=run.eval.sample_tasks, greedy=False,
                                               k=run.eval.sample_k, seed=MEAN_OF_K_SEED)
        out.update(mean_of_k(outcomes["sampled"]))
    if outcomes_path and jax.process_index() == 0:
        write_outcomes(outcomes_path, outcomes)
    return out


# A warm start whose greedy success on the easiest held-out level is below this is reported as weak.
WEAK_WARM_START = 0.5


def log_after_sft(result: dict[str, float], run: run_config.RunConfig) -> None:
    """Logs the held-out figures after the warm start, and a warning when SFT ran but the policy fails most
    of the easiest level's tasks (the function-calling SFT did once, under settings that had worked:
    README, "Mechanism"): RL from such a policy mostly measures the warm start."""
    log(f"held-out after SFT: {result}")
    levels = sorted(int(k.rsplit("_", 1)[1]) for k in result if k.startswith("accuracy/level_"))
    if run.sft.steps and levels and result[f"accuracy/level_{levels[0]}"] < WEAK_WARM_START:
        log(f"WARNING: the warm start solves {result[f'accuracy/level_{levels[0]}']:.3f} of the easiest level's "
            f"(level {levels[0]}) held-out tasks greedily; check the SFT (more sft.steps, another seed) before "
            "reading RL results from it")


# SFT saves its progress (params, optimizer state, steps done) at least this often, and on SIGTERM/SIGINT.
SFT_CHECKPOINT_SECONDS = 300.0


def warm_start(setup: Setup, workdir: str, writer: MetricWriter):
    """Runs (or restores, or resumes) the supervised warm start in `workdir/sft`; returns params.

    Progress is checkpointed every SFT_CHECKPOINT_SECONDS and when a signal stops it (then
    `RunInterrupted` is raised); a resumed SFT replays the batch sampler to where it stopped, so it
    ends with the same params as an uninterrupted one."""
    run = setup.run
    ckpt = Checkpointer(os.path.join(workdir, "sft"), keep=1)
    sft_settings = run_config.settings(run, run_config.SFT_SETTINGS)
    optimizer = learner.make_optimizer(learner.LearnerConfig(learning_rate=run.sft.learning_rate,
                                                             max_grad_norm=run.learner.max_grad_norm))
    params, opt_state, done = None, None, 0
    if ckpt.latest_step() is not None:
        def target(record):
            run_config.require_same_settings(f"the SFT checkpoint {ckpt.directory}", record.get("settings"),
                                             sft_settings)
            partial = record.get("steps", run.sft.steps) < run.sft.steps
            return {"params": setup.params, **({"opt_state": optimizer.init(setup.params)} if partial else {})}

        arrays, record, _ = ckpt.restore_latest(target)
        done = record.get("steps", run.sft.steps)
        if done >= run.sft.steps:
            log(f"restored SFT params from {ckpt.directory}")
            return arrays["params"]
        params, opt_state = arrays["params"], arrays["opt_state"]
        if writer is not None:
            writer.rewind(done - 1, prefix="sft/")  # rows are logged by 0-based step index
        log(f"resuming SFT at step {done}/{run.sft.steps} from {ckpt.directory}")
    if not run.sft.steps:
        log("no SFT (sft.steps=0): RL starts from the model's own params")
        return jax.tree.map(jnp.array, setup.params)
    if run.sft.data_path:
        demos = conversation_demonstrations(run.sft.data_path, setup.renderer)
    else:
        demos = oracle_demonstrations(setup.source, setup.renderer, num=run.sft.num_demos,
                                      mistake_rate=run.sft.mistake_rate, seed=run.seed,
                                      max_difficulty=run.sft.max_difficulty)
    cut = sum(len(d[0]) > run.sft.max_len for d in demos)
    log(f"{len(demos)} demonstrations, mean {np.mean([len(d[0]) for d in demos]):.0f} tokens; {cut} longer than "
        f"sft.max_len={run.sft.max_len} are truncated")
    if params is None:
        params = jax.tree.map(jnp.array, setup.params)
        opt_state = optimizer.init(params)
    rng = np.random.default_rng(derive_seed(run.seed, "sft"))
    for _ in range(done):  # the batches already trained on
        rng.choice(len(demos), run.sft.batch_size)

    def save(steps: int, state) -> None:
        ckpt.save(steps, {"params": params, **state}, {"steps": steps, "settings": sft_settings})

    from tqdm.auto import tqdm
    last_save = time.time()
    with StopFlag() as stop:
        for step in tqdm(range(done, run.sft.steps), desc="sft", disable=jax.process_index() != 0, mininterval=5,
                         initial=done, total=run.sft.steps):
            chosen = rng.choice(len(demos), run.sft.batch_size)
            batch = make_batch([demos[i] for i in chosen], run.sft.max_len)
            params, opt_state, metrics = sft_step(setup.model_config, optimizer, params, opt_state, batch)
            learner.require_finite(metrics, f"SFT step {step + 1}")
            if writer is not None and (step % 25 == 0 or step == run.sft.steps - 1):
                writer.write(step, metrics, prefix="sft/")
            if step + 1 < run.sft.steps and (stop.stop or time.time() - last_save >= SFT_CHECKPOINT_SECONDS):
                save(step + 1, {"opt_state": opt_state})
                last_save = time.time()
                if stop.stop:
                    raise RunInterrupted("sft", step + 1)
        if run.sft.steps:
            save(run.sft.steps, {})
        if stop.stop:  # a signal during the last step: SFT is saved whole, the run stops before RL
            raise RunInterrupted("sft", run.sft.steps)
    return params
