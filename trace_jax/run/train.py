"""The product a user runs: `train_and_evaluate` (SFT warm start, then the RL loop with any allocator)
and `evaluate` (`sft.sft` runs the warm start alone). Importable from notebooks; the launchers in `experiments/` only parse flags.

One RL step (`rl_step`): allocate -> roll out -> score -> update predictor -> advantages -> learner
step, returning a typed `StepRecord`; the loop then logs it, checkpoints and evaluates. Everything is
seeded from the config; a killed run resumes from its last checkpoint and produces the same records
as an uninterrupted one.
"""

from __future__ import annotations

import os
import time

import jax
import numpy as np

from trace_jax import allocation
from trace_jax.allocation.base import AllocatorState
from trace_jax.allocation.predictor import SuccessPredictor, feature_width
from trace_jax.config import schema
from trace_jax.models import hf_io
from trace_jax.rl import learner, updates
from trace_jax.rl.advantages import estimate, nonzero_advantage_token_share
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.rollout.tree import contrast_statistics, step_statistics
from trace_jax.run import compile_clock
from trace_jax.run.checkpointing import Checkpointer, require_checkpoint_dir
from trace_jax.run.evaluation import held_out
from trace_jax.run.experiment import Setup, banner, build, derive_seed, log, train_tasks
from trace_jax.run.metrics import MetricWriter
from trace_jax.run.records import CheckpointRecord, StepRecord, Timings, TreeStats, read_steps
from trace_jax.run.sft import log_after_sft, warm_start
from trace_jax.run.stopping import RunInterrupted, StopFlag
from trace_jax.run.workdir_lock import holds_workdir


def _pool(tasks, position: int, size: int, seed: int):
    """The next `size` tasks of a seeded, epoch-wise shuffled stream, from `position`."""
    out, order, order_epoch = [], None, None
    while len(out) < size:
        epoch, offset = divmod(position, len(tasks))
        if epoch != order_epoch:
            order, order_epoch = np.random.default_rng(derive_seed(seed, "data", epoch)).permutation(len(tasks)), epoch
        out.append(tasks[int(order[offset])])
        position += 1
    return out, position


def _outcomes_path(workdir: str, step: int) -> str:
    """Where the per-task outcomes of the evaluation at RL step `step` (0: after SFT) go."""
    return os.path.join(workdir, "eval", f"step_{step}.json")


def make_allocator(setup: Setup) -> allocation.Allocator:
    """The configured allocator; one that steers by a success predictor gets a fresh shared one."""
    run = setup.run
    predictor = (SuccessPredictor(feature_width(setup.model_config.hidden_size), run.predictor, seed=run.seed)
                 if allocation.uses_predictor(run.allocator.name) else None)
    return allocation.make(run.allocator, run.budget, seed=run.seed, predictor=predictor)


def rl_step(setup: Setup, allocator: allocation.Allocator, learn, params, opt_state, pool, *, step: int):
    """One RL step on the candidate `pool`; returns (params, opt_state, its StepRecord).

    `learn(params, opt_state, batch) -> (params, opt_state, metrics)` is the (possibly sharded)
    learner step; `step` counts from 1 and seeds the rollouts."""
    run = setup.run
    t0 = time.time()
    policy = setup.policy(params)  # on a mesh: the learner's params resharded into the sampling layout, once
    jax.block_until_ready(policy.params)
    reshard_s = time.time() - t0
    engine = RolloutEngine(policy, setup.env, seed=derive_seed(run.seed, "rollout", step - 1))
    outcome = allocator.step(engine, pool)
    rollout_s = time.time() - t0 - reshard_s
    sequences = estimate(outcome.trees, run.advantage)
    metrics = None
    if sequences:
        batches = updates.plan(outcome.trees, sequences, run.learner, derive_seed(run.seed, "learner", step))
        params, opt_state, metrics = updates.run(learn, params, opt_state, batches, run.learner.epochs)
    stats = step_statistics(outcome.trees)
    leaves = [leaf for t in outcome.trees for leaf in t.leaves()]
    ledger = engine.ledger
    trees = TreeStats(
        trees=len(outcome.trees), leaves=len(leaves), effective_ratio=stats["effective_ratio"],
        expanded_mixed_share=stats["expanded_mixed_share"],
        nonzero_advantage_token_share=nonzero_advantage_token_share(outcome.trees, sequences),
        **contrast_statistics(outcome.trees),
        # rollouts that landed in a tree with both outcomes, per rollout bought (discarded ones included)
        useful_rollout_share=sum(len(t.leaves()) for t in outcome.trees if t.is_mixed()) / max(
            ledger.rollouts_started, 1),
        reward=float(np.mean([leaf.reward for leaf in leaves])) if leaves else 0.0)
    timings = Timings(rollout_s=rollout_s, step_s=time.time() - t0,
                      tokens_per_s=ledger.tokens_generated / max(rollout_s, 1e-9), reshard_s=reshard_s)
    counters = engine.counters
    record = StepRecord(step=step, ledger=ledger, trees=trees, timings=timings, learner=metrics,
                        allocation=outcome.record, tool_errors=dict(counters.tool_errors),
                        cross_shard_rows=counters.cross_shard_rows,
                        rollouts_by_process=tuple(counters.rollouts_by_process),
                        turns_by_process=tuple(counters.turns_by_process),
                        slot_utilisation=counters.slot_utilisation)
    return params, opt_state, record


def _restore(setup: Setup, ckpt: Checkpointer, allocator, optimizer):
    """params, optimizer state and allocator state of the newest usable checkpoint (verified; damaged
    newer ones are reported and skipped), and its record."""

    def target(stored):
        record = CheckpointRecord.from_json(stored)
        schema.require_same_settings(f"the checkpoint {ckpt.directory}", record.settings,
                                         schema.settings(setup.run), ignore=schema.RESUMABLE_SETTINGS)
        return {"params": setup.params, "opt_state": optimizer.init(setup.params),
                "allocator": allocator.template(record.allocator)}

    arrays, stored, _ = ckpt.restore_latest(target)
    record = CheckpointRecord.from_json(stored)
    allocator.restore(AllocatorState(arrays=arrays.get("allocator", {}), host=record.allocator))
    return arrays["params"], arrays["opt_state"], record


def _learner(setup: Setup, optimizer, params, opt_state):
    """The learner step, jitted on the configured mesh when it has more than one device."""
    run, mesh = setup.run, setup.mesh
    if mesh is not None:
        learn, params, opt_state = learner.sharded_train_step(mesh, setup.model_config, run.loss, optimizer, params,
                                                               opt_state)
        log(f"learner and sampler on a {dict(mesh.shape)} mesh")
        return learn, params, opt_state

    def learn(p, o, b):
        return learner.train_step(setup.model_config, run.loss, optimizer, p, o, jax.device_put(b))

    return learn, params, opt_state


@holds_workdir
def train_and_evaluate(config, workdir: str, *, after_sft: dict | None = None) -> dict:
    """SFT warm start (or restore), evaluation, the RL loop with checkpoints, evaluation, HF export.

    `after_sft`: the held-out result of the SFT checkpoint when the caller already measured it (a
    comparison sharing one SFT checkpoint across runs); it is then not re-evaluated."""
    t0, compile_before, eval_s = time.time(), compile_clock.seconds(), 0.0
    banner("setup")
    setup = build(config, workdir)
    run = setup.run
    writer = MetricWriter(workdir, enabled=jax.process_index() == 0)
    log(f"allocator {run.allocator.name}, budget {run.budget}, model {setup.model_config.num_layers} layers x "
        f"{setup.model_config.hidden_size}, task {run.task.source}")
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=run.checkpoint.keep)
    allocator = make_allocator(setup)
    optimizer = learner.make_optimizer(run.learner)
    try:
        params, opt_state, start, position, after_sft = _begin(setup, workdir, writer, ckpt, allocator, optimizer,
                                                               after_sft)
    except RunInterrupted as e:
        log(f"{e}; resume by running the same command again")
        return {"interrupted": True, "stage": e.stage, "steps": 0}
    learn, params, opt_state = _learner(setup, optimizer, params, opt_state)

    banner("reinforcement learning")
    stop = StopFlag()
    tasks = train_tasks(setup)
    history: list[StepRecord] = []
    try:
        for step in range(start + 1, run.rl.steps + 1):
            pool, position = _pool(tasks, position, allocator.pool_size, run.seed)
            params, opt_state, record = rl_step(setup, allocator, learn, params, opt_state, pool, step=step)
            writer.write_step(record)
            history.append(record)
            learner.require_finite(record.learner, f"RL step {step} (the last checkpoint, step "
                                                   f"{ckpt.latest_step()}, is unaffected)")
            loss = record.learner.loss if record.learner else float("nan")
            log(f"step {step}/{run.rl.steps}: reward {record.trees.reward:.3f}  effective ratio "
                f"{record.trees.effective_ratio:.2f}  loss {loss:.4f}  {record.timings.step_s:.1f}s")
            last = step == run.rl.steps
            sampled = bool(run.eval.sample_every) and step % run.eval.sample_every == 0
            if (sampled or run.rl.eval_every and step % run.rl.eval_every == 0) and not last:
                # before the checkpoint: a run killed in between redoes this evaluation on resume (greedy, on
                # eval.intermediate_tasks when set; the mean-of-k too every eval.sample_every steps, else only
                # after the last step)
                began = time.time()
                writer.write(step, held_out(setup, params, outcomes_path=_outcomes_path(workdir, step),
                                            sampled=sampled, intermediate=True), prefix="eval/")
                eval_s += time.time() - began
            if step % run.checkpoint.every == 0 or last or stop.stop:
                kept = allocator.state()
                saved = CheckpointRecord(step=step, data_position=position, after_sft=after_sft,
                                         allocator=kept.host, settings=schema.settings(run))
                ckpt.save(step, {"params": params, "opt_state": opt_state, "allocator": kept.arrays}, saved.to_json())
            if stop.stop:
                log("stopped by signal; resume by running the same command again")
                return {"interrupted": True, "steps": step}
    finally:
        stop.restore()

    banner("evaluate after RL")
    began = time.time()
    after_rl = held_out(setup, params, outcomes_path=_outcomes_path(workdir, run.rl.steps))
    eval_s += time.time() - began
    log(f"held-out after RL: {after_rl}")
    writer.write(run.rl.steps, after_rl, prefix="eval/")
    learner.require_finite_params(params, "the params to export")
    hf_io.save(os.path.join(workdir, "export"), setup.model_config, params)  # collective; process 0 writes
    writer.close()
    # the whole run's steps (a resumed run's earlier ones from its log; process 0 keeps the log)
    history = [r for r in read_steps(workdir) if r.step <= run.rl.steps] or history
    return {"acc_after_sft": after_sft["accuracy"], "acc_after_rl": after_rl["accuracy"], "steps": run.rl.steps,
            "allocator": run.allocator.name,
            "effective_ratio": float(np.mean([r.trees.effective_ratio for r in history])) if history else None,
            "rollouts_by_process": _by_process([r.rollouts_by_process for r in history]),
            "turns_by_process": _by_process([r.turns_by_process for r in history]),
            "wall_s": round(time.time() - t0, 1),
            # this invocation's share (a resumed run's earlier invocations are not in them): evaluation after RL
            # began (the SFT start's is the caller's when shared), and compiling (`compile_clock`)
            "eval_s": round(eval_s, 1), "compile_s": round(compile_clock.seconds() - compile_before, 1)}


def _begin(setup: Setup, workdir: str, writer: MetricWriter, ckpt: Checkpointer, allocator, optimizer,
           after_sft: dict | None):
    """Where the RL loop starts: from the SFT warm start (trained or restored, then evaluated unless `after_sft`
    is given) or from the latest RL checkpoint. Returns (params, opt_state, step, data position, after_sft);
    raises `RunInterrupted` when a signal stopped the SFT."""
    run = setup.run
    if ckpt.latest_step() is None:
        banner("supervised warm start")
        params = warm_start(setup, workdir, writer)
        if after_sft is None:
            banner("evaluate after SFT")
            after_sft = held_out(setup, params, outcomes_path=_outcomes_path(workdir, 0))
        log_after_sft(after_sft, setup.run)
        writer.write(0, after_sft, prefix="eval/")
        return params, optimizer.init(params), 0, 0, after_sft
    banner("resume")
    params, opt_state, record = _restore(setup, ckpt, allocator, optimizer)
    start = record.step
    if start > run.rl.steps:
        raise schema.ConfigError(
            f"config field 'rl.steps'={run.rl.steps} is below the step of the checkpoint to resume "
            f"({start}, in {ckpt.directory}): its params are later than the run asked for; use "
            f"rl.steps >= {start} or another workdir")
    # steps logged after that checkpoint are logged again below; at the last step the checkpoint precedes the
    # final evaluation, which is logged again too (a stop during it or the export must not leave it twice)
    writer.rewind(start, keep_step=start < run.rl.steps)
    log(f"resumed at step {start} from {ckpt.directory}")
    return params, opt_state, start, record.data_position, record.after_sft


def _by_process(counts) -> list[int] | None:
    """Per-process counts summed over the steps that logged them (None when none did)."""
    counts = [c for c in counts if c]
    return [int(n) for n in np.sum(counts, axis=0, dtype=int)] if counts else None


def restore_policy(config, workdir: str):
    """(setup, params, step) of the latest RL checkpoint of `workdir`, written under `config`."""
    path = require_checkpoint_dir(os.path.join(workdir, "checkpoints"))
    setup = build(config, workdir)
    params, _, record = _restore(setup, Checkpointer(path), make_allocator(setup),
                                 learner.make_optimizer(setup.run.learner))
    return setup, params, record.step


def evaluate(config, workdir: str) -> dict:
    """Evaluates the latest RL checkpoint of `workdir` (greedy accuracy, pass@k if configured)."""
    setup, params, step = restore_policy(config, workdir)
    result = held_out(setup, params)
    log(f"held-out at step {step}: {result}")
    return {"step": step, **result}
