"""Supervised warm start: oracle (or user-provided) ReAct demonstrations -> masked next-token loss;
`warm_start` runs it for a run (restored when its checkpoint exists, resumed when a partial one does) and
`sft` is the entry point that runs it alone.

Demonstrations are rendered with the same renderer the policy samples with, so the assistant
tokens trained here are exactly what the policy would emit; prompts and observations are masked.
"""

from __future__ import annotations

import functools
import itertools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from trace_jax.config import schema
from trace_jax.envs.loaders import jsonl_rows
from trace_jax.envs.oracle import Trajectory, run_episode
from trace_jax.envs.protocol import DataError, TaskSource
from trace_jax.envs.render import ReactRenderer, render_trajectory
from trace_jax.models.config import ModelConfig
from trace_jax.models.transformer import Params
from trace_jax.rl import learner
from trace_jax.rl.learner import keep_if_finite
from trace_jax.rl.logprobs import sequence_logprobs
from trace_jax.run.checkpointing import Checkpointer
from trace_jax.run.evaluation import held_out
from trace_jax.run.experiment import Setup, banner, build, derive_seed, log
from trace_jax.run.metrics import MetricWriter
from trace_jax.run.stopping import RunInterrupted, StopFlag
from trace_jax.run.workdir_lock import holds_workdir
from trace_jax.sampling.state import batch_bucket, length_bucket


def oracle_demonstrations(source: TaskSource, renderer: ReactRenderer, *, num: int, mistake_rate: float,
                          seed: int, only_successful: bool = True,
                          max_difficulty: int = 0) -> list[tuple[list[int], list[bool]]]:
    """Rendered (ids, trained-mask) demonstrations from the oracle on the train split (its tasks up to
    `max_difficulty` when > 0)."""
    env, oracle = source.make_env(), source.oracle(mistake_rate)
    tasks = [t for t in source.tasks("train") if not max_difficulty or t.difficulty <= max_difficulty]
    if not tasks:
        raise ValueError(f"no training task has difficulty <= sft.max_difficulty={max_difficulty}")
    rng = np.random.default_rng(seed)
    demos: list[tuple[list[int], list[bool]]] = []
    for i in rng.permutation(len(tasks)).tolist() * max(1, -(-num // max(len(tasks), 1))):
        if len(demos) >= num:
            break
        trajectory = run_episode(env, tasks[i], oracle, seed=seed + len(demos))
        if trajectory.success or not only_successful:
            demos.append(render_trajectory(renderer, trajectory))
    return demos


def _conversation(messages, where: str) -> tuple[list[dict], list[tuple[str, str | None]]]:
    """Messages -> (system/user head, [(assistant text, following observation or None)])."""
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: 'messages' should be a non-empty list")
    for n, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise DataError(f"{where}: message {n} should be {{role, content}} with string role and content, "
                            f"got {m!r:.80}")
    head = list(itertools.takewhile(lambda m: m["role"] in ("system", "user"), messages[:2]))
    if not head:
        raise DataError(f"{where}: a conversation starts with a system and/or user message")
    rest, turns = messages[len(head):], []
    for i in range(0, len(rest), 2):
        if rest[i]["role"] != "assistant":
            raise DataError(f"{where}: expected an assistant message at position {len(head) + i}, got "
                            f"{rest[i]['role']!r}")
        turns.append((rest[i]["content"], rest[i + 1]["content"] if i + 1 < len(rest) else None))
    if not turns:
        raise DataError(f"{where}: the conversation has no assistant message to train on")
    return head, turns


def conversation_demonstrations(path: str, renderer: ReactRenderer) -> list[tuple[list[int], list[bool]]]:
    """A user's JSONL of conversations: {"messages": [{"role", "content"}, ...]} with system/user first,
    then alternating assistant turns and observation messages (any other role). Every row is checked
    before any is rendered; a bad one is a DataError naming file and line."""
    conversations = [_conversation(row.get("messages"), where) for where, row in jsonl_rows(path)]
    return [render_trajectory(renderer, Trajectory(None, head, turns, 1.0, True)) for head, turns in conversations]


def make_batch(demos: list[tuple[list[int], list[bool]]], max_len: int) -> dict[str, np.ndarray]:
    """[B, L] arrays (B, L bucketed): position t holds token t and predicts t + 1 where trained."""
    n, length = batch_bucket(len(demos)), length_bucket(min(max(len(d[0]) for d in demos), max_len))
    out = {"tokens": np.zeros((n, length), np.int32), "valid": np.zeros((n, length), bool),
           "targets": np.zeros((n, length), np.int32), "mask": np.zeros((n, length), bool)}
    for r, (ids, mask) in enumerate(demos):
        ids, mask = ids[:length], mask[:length]
        L = len(ids)
        out["tokens"][r, :L] = ids
        out["valid"][r, :L] = True
        out["targets"][r, : L - 1] = ids[1:]
        out["mask"][r, : L - 1] = mask[1:]
    return out


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(2, 3))
def sft_step(config: ModelConfig, optimizer: optax.GradientTransformation, params: Params, opt_state, batch):
    """One step of token-mean cross-entropy on the trained (assistant) tokens."""

    def loss_fn(p):
        logp, _ = sequence_logprobs(config, p, batch["tokens"], batch["valid"], batch["targets"], 1.0)
        mask = batch["mask"].astype(jnp.float32)
        return -jnp.sum(logp * mask) / jnp.maximum(mask.sum(), 1.0)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grad_norm = optax.tree.norm(grads)
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    params, opt_state = keep_if_finite(loss, grad_norm, (optax.apply_updates(params, updates), new_opt_state),
                                       (params, opt_state))
    return params, opt_state, {"loss": loss, "grad_norm": grad_norm}


# A warm start whose greedy success on the easiest held-out level is below this is reported as weak.
WEAK_WARM_START = 0.5


def log_after_sft(result: dict[str, float], run: schema.RunConfig) -> None:
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
    sft_settings = schema.settings(run, schema.SFT_SETTINGS)
    optimizer = learner.make_optimizer(learner.LearnerConfig(learning_rate=run.sft.learning_rate,
                                                             max_grad_norm=run.learner.max_grad_norm))
    params, opt_state, done = None, None, 0
    if ckpt.latest_step() is not None:
        def target(record):
            schema.require_same_settings(f"the SFT checkpoint {ckpt.directory}", record.get("settings"),
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


@holds_workdir
def sft(config, workdir: str) -> dict:
    """Supervised warm start alone; returns held-out accuracy after it."""
    t0 = time.time()
    banner("setup")
    setup = build(config, workdir)
    writer = MetricWriter(workdir, enabled=jax.process_index() == 0)
    banner("supervised warm start")
    try:
        params = warm_start(setup, workdir, writer)
    except RunInterrupted as e:
        log(f"{e}; resume by running the same command again")
        return {"interrupted": True, "stage": e.stage, "steps": e.step}
    banner("evaluate")
    result = held_out(setup, params)
    log_after_sft(result, setup.run)
    return {"acc_after_sft": result["accuracy"], "wall_s": round(time.time() - t0, 1)}
