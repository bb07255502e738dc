"""The product a user runs: `train_and_evaluate` (SFT warm start, then the RL loop with any allocator)
and `evaluate` (`sft.sft` runs the warm start alone). Importable from notebooks; the launchers in `experiments/` only parse flags.

One RL step: `roll_out` (allocate -> roll out -> score -> update predictor) then `learn_step` (advantages ->
learner updates), returning a typed `StepRecord`; the loop then logs it, checkpoints and evaluates. With
`rl.max_staleness` >= 1 (`Steps`, `run/pipeline.py`) the rollouts of later steps are sampled in a worker thread
while the learner trains. Everything is seeded from the config; a killed run resumes from its last checkpoint and
produces the same records as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
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
from trace_jax.sampling.paged import PagePool
from trace_jax.rollout.tree import contrast_statistics, step_statistics
from trace_jax.run import compile_clock
from trace_jax.run.checkpointing import Checkpointer, require_checkpoint_dir
from trace_jax.run.evaluation import held_out
from trace_jax.run.experiment import Setup, banner, build, derive_seed, log, train_tasks
from trace_jax.run.metrics import MetricWriter
from trace_jax.run.pipeline import Pipeline, Rollouts, sampling_version, snapshot_state
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


def roll_out(setup: Setup, allocator: allocation.Allocator, params, pool, *, step: int, version: int | None = None,
             pages=None) -> Rollouts:
    """Step `step`'s allocation and rollouts on the candidate `pool`, sampled by `params` (those of learner step
    `version`; None: step - 1, the synchronous loop's); `pages`: a KV page pool other than `Setup.pages` (the
    overlapping sampler's own)."""
    run = setup.run
    t0 = time.time()
    policy = setup.policy(params)  # on a mesh: the learner's params resharded into the sampling layout, once
    if pages is not None:
        policy = dataclasses.replace(policy, pages=pages)
    jax.block_until_ready(policy.params)
    reshard_s = time.time() - t0
    engine = RolloutEngine(policy, setup.env, seed=derive_seed(run.seed, "rollout", step - 1))
    outcome = allocator.step(engine, pool)
    end = time.time()
    return Rollouts(step=step, outcome=outcome, engine=engine, version=step - 1 if version is None else version,
                    rollout_s=end - t0 - reshard_s, reshard_s=reshard_s, span=(t0, end),
                    allocator_state=snapshot_state(allocator.state()))


def learn_step(setup: Setup, learner_fns: learner.Learner, params, opt_state, rollouts: Rollouts, *,
               began: float) -> tuple:
    """The learner's updates on one step's rollouts; returns (params, opt_state, the step's StepRecord).
    `began`: when the step began (`time.time()`), for its wall time."""
    run, step, outcome = setup.run, rollouts.step, rollouts.outcome
    sequences = estimate(outcome.trees, run.advantage)
    metrics = None
    if sequences:
        batches = updates.plan(outcome.trees, sequences, run.learner, derive_seed(run.seed, "learner", step))
        if learner_fns.proximal is not None:  # the proximal policy: these params, before the step's first update
            batches = learner.with_proximal(learner_fns.proximal, params, batches)
        params, opt_state, metrics = updates.run(learner_fns.update, params, opt_state, batches, run.learner.epochs)
    stats = step_statistics(outcome.trees)
    leaves = [leaf for t in outcome.trees for leaf in t.leaves()]
    ledger = rollouts.engine.ledger
    trees = TreeStats(
        trees=len(outcome.trees), leaves=len(leaves), effective_ratio=stats["effective_ratio"],
        expanded_mixed_share=stats["expanded_mixed_share"],
        nonzero_advantage_token_share=nonzero_advantage_token_share(outcome.trees, sequences),
        **contrast_statistics(outcome.trees),
        # rollouts that landed in a tree with both outcomes, per rollout bought (discarded ones included)
        useful_rollout_share=sum(len(t.leaves()) for t in outcome.trees if t.is_mixed()) / max(
            ledger.rollouts_started, 1),
        reward=float(np.mean([leaf.reward for leaf in leaves])) if leaves else 0.0)
    timings = Timings(rollout_s=rollouts.rollout_s, step_s=time.time() - began,
                      tokens_per_s=ledger.tokens_generated / max(rollouts.rollout_s, 1e-9), reshard_s=rollouts.reshard_s)
    counters = rollouts.engine.counters
    record = StepRecord(step=step, ledger=ledger, trees=trees, timings=timings, learner=metrics,
                        allocation=outcome.record, tool_errors=dict(counters.tool_errors),
                        cross_shard_rows=counters.cross_shard_rows,
                        rollouts_by_process=tuple(counters.rollouts_by_process),
                        turns_by_process=tuple(counters.turns_by_process),
                        slot_utilisation=counters.slot_utilisation, policy_lag=step - 1 - rollouts.version)
    return params, opt_state, record


def rl_step(setup: Setup, allocator: allocation.Allocator, learner_fns: learner.Learner, params, opt_state, pool, *,
            step: int):
    """One synchronous RL step on the candidate `pool` (rollouts by `params`, then the learner's updates); returns
    (params, opt_state, its StepRecord). `step` counts from 1 and seeds the rollouts."""
    rollouts = roll_out(setup, allocator, params, pool, step=step)
    return learn_step(setup, learner_fns, params, opt_state, rollouts, began=rollouts.span[0])


def _restore(setup: Setup, ckpt: Checkpointer, allocator, optimizer):
    """params, optimizer state and allocator state of the newest usable checkpoint (verified; damaged
    newer ones are reported and skipped), and its record."""

    def target(stored):
        record = CheckpointRecord.from_json(stored)
        schema.require_same_settings(f"the checkpoint {ckpt.directory}", record.settings,
                                         schema.settings(setup.run), ignore=schema.RESUMABLE_SETTINGS)
        return {"params": setup.params, "opt_state": optimizer.init(setup.params),
                "allocator": allocator.template(record.allocator),
                **({"sampler": {str(v): setup.params for v in record.sampler_versions}}
                   if record.sampler_versions else {})}

    arrays, stored, _ = ckpt.restore_latest(target)
    record = CheckpointRecord.from_json(stored)
    allocator.restore(AllocatorState(arrays=arrays.get("allocator", {}), host=record.allocator))
    sampler = {int(v): p for v, p in arrays.get("sampler", {}).items()}
    return arrays["params"], arrays["opt_state"], record, sampler


def _learner(setup: Setup, optimizer, params, opt_state):
    """The learner's programs (`learner.Learner`), jitted on the configured mesh when it has more than one device;
    returns (programs, params, opt_state) with params and optimizer state placed for them."""
    run, mesh = setup.run, setup.mesh
    uses_proximal = type(run.loss).proximal
    if mesh is not None:
        learn, params, opt_state = learner.sharded_train_step(mesh, setup.model_config, run.loss, optimizer, params,
                                                               opt_state)
        log(f"learner and sampler on a {dict(mesh.shape)} mesh")
        return learner.Learner(learn, learner.sharded_proximal(mesh, setup.model_config, run.loss, params)
                               if uses_proximal else None), params, opt_state

    def learn(p, o, b):
        return learner.train_step(setup.model_config, run.loss, optimizer, p, o, jax.device_put(b))

    def proximal(p, b):
        return learner.proximal_logprobs(setup.model_config, run.loss.temperature, p, jax.device_put(b))

    return learner.Learner(learn, proximal if uses_proximal else None), params, opt_state


class Steps:
    """Where each RL step's rollouts come from, each step's pool drawn from the task stream in step order: sampled
    on the main thread when the step begins (`rl.max_staleness` = 0 on the learner's devices, today's loop), else
    by the sampler worker (`pipeline.Pipeline`: overlapping the learner when max_staleness >= 1, on its own device
    when `mesh.sampler_devices` = 1). `kept`: the sampler's params versions a checkpoint kept for the steps after
    `start`."""

    def __init__(self, setup: Setup, allocator, tasks, start: int, position: int, kept: dict):
        run = setup.run
        self.setup, self.allocator, self.tasks, self.start = setup, allocator, tasks, start
        self.staleness, self.last = run.rl.max_staleness, run.rl.steps
        self.positions = {start: position}  # step -> the stream's position after its pool
        self.pipeline = None
        if self.staleness or run.mesh.sampler_devices:
            pages = []  # the sampler's own page pool, made on its device by its first step

            def work(step, pool, params, version):
                if setup.pages is not None and not pages:
                    pages.append(PagePool(setup.model_config, page_size=run.rl.kv_page_size,
                                          max_pages=run.rl.kv_max_pages))
                return roll_out(setup, allocator, params, pool, step=step, version=version,
                                pages=pages[0] if pages else None)

            self.pipeline = Pipeline(work, self.staleness, setup.sampler_device)
            for version, params in kept.items():
                self.pipeline.keep(version, params)

    def _pool(self, step: int) -> list:
        pool, self.positions[step] = _pool(self.tasks, self.positions[step - 1], self.allocator.pool_size,
                                           self.setup.run.seed)
        return pool

    def rollouts(self, step: int, params) -> Rollouts:
        """Step `step`'s rollouts; `params`: the learner's before step `step` (those of step - 1)."""
        if self.pipeline is None:
            return roll_out(self.setup, self.allocator, params, self._pool(step), step=step)
        ahead = step + self.staleness
        if step == self.start + 1:  # the steps sampled before this one's learner step: by kept (or these) params
            version = sampling_version(step, self.staleness)
            if version == step - 1:
                self.pipeline.keep(version, params)
            elif version not in self.pipeline.versions:
                raise ValueError(f"the checkpoint of RL step {self.start} keeps no sampler params of learner step "
                                 f"{version}, which step {step} samples with (rl.max_staleness="
                                 f"{self.staleness}): it was not written by this run")
            for u in range(step, min(ahead, self.last + 1)):
                self.pipeline.submit(u, self._pool(u))
        self.pipeline.keep(step - 1, params)  # what steps up to step + s sample with, and a checkpoint keeps
        if ahead <= self.last:
            self.pipeline.submit(ahead, self._pool(ahead))
        rollouts = self.pipeline.result(step)
        self.pipeline.prune(sampling_version(step + 1, self.staleness))
        return rollouts

    def position_after(self, step: int) -> int:
        return self.positions[step]

    def versions_after(self, step: int) -> dict:
        """The sampler's params versions the steps after `step` sample with (what a checkpoint at `step` keeps)."""
        return {} if self.pipeline is None else self.pipeline.versions_after(step)

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()


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
        params, opt_state, start, position, after_sft, kept = _begin(setup, workdir, writer, ckpt, allocator,
                                                                     optimizer, after_sft)
    except RunInterrupted as e:
        log(f"{e}; resume by running the same command again")
        return {"interrupted": True, "stage": e.stage, "steps": 0}
    learner_fns, params, opt_state = _learner(setup, optimizer, params, opt_state)

    banner("reinforcement learning")
    stop = StopFlag()
    tasks = train_tasks(setup)
    history: list[StepRecord] = []
    steps = Steps(setup, allocator, tasks, start, position, kept)
    try:
        for step in range(start + 1, run.rl.steps + 1):
            began = time.time()
            rollouts = steps.rollouts(step, params)
            params, opt_state, record = learn_step(setup, learner_fns, params, opt_state, rollouts, began=began)
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
                versions = steps.versions_after(step)
                saved = CheckpointRecord(step=step, data_position=steps.position_after(step), after_sft=after_sft,
                                         allocator=rollouts.allocator_state.host, settings=schema.settings(run),
                                         sampler_versions=tuple(versions))
                ckpt.save(step, {"params": params, "opt_state": opt_state, "allocator": rollouts.allocator_state.arrays,
                                 **({"sampler": {str(v): p for v, p in versions.items()}} if versions else {})},
                          saved.to_json())
            if stop.stop:
                log("stopped by signal; resume by running the same command again")
                return {"interrupted": True, "steps": step}
    finally:
        stop.restore()
        steps.close()

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
    is given) or from the latest RL checkpoint. Returns (params, opt_state, step, data position, after_sft, the
    sampler's params versions kept for the steps after it (`pipeline`; {} when none)); raises `RunInterrupted`
    when a signal stopped the SFT."""
    run = setup.run
    if ckpt.latest_step() is None:
        banner("supervised warm start")
        params = warm_start(setup, workdir, writer)
        if after_sft is None:
            banner("evaluate after SFT")
            after_sft = held_out(setup, params, outcomes_path=_outcomes_path(workdir, 0))
        log_after_sft(after_sft, setup.run)
        writer.write(0, after_sft, prefix="eval/")
        return params, optimizer.init(params), 0, 0, after_sft, {}
    banner("resume")
    params, opt_state, record, sampler = _restore(setup, ckpt, allocator, optimizer)
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
    return params, opt_state, start, record.data_position, record.after_sft, sampler


def _by_process(counts) -> list[int] | None:
    """Per-process counts summed over the steps that logged them (None when none did)."""
    counts = [c for c in counts if c]
    return [int(n) for n in np.sum(counts, axis=0, dtype=int)] if counts else None


def restore_policy(config, workdir: str):
    """(setup, params, step) of the latest RL checkpoint of `workdir`, written under `config`."""
    path = require_checkpoint_dir(os.path.join(workdir, "checkpoints"))
    setup = build(config, workdir)
    params, _, record, _ = _restore(setup, Checkpointer(path), make_allocator(setup),
                                    learner.make_optimizer(setup.run.learner))
    return setup, params, record.step


def evaluate(config, workdir: str) -> dict:
    """Evaluates the latest RL checkpoint of `workdir` (greedy accuracy, pass@k if configured)."""
    setup, params, step = restore_policy(config, workdir)
    result = held_out(setup, params)
    log(f"held-out at step {step}: {result}")
    return {"step": step, **result}
