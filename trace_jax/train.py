"""The product a user runs: `sft`, `train_and_evaluate` (SFT warm start, then the RL loop with any
allocator) and `evaluate`. Importable from notebooks; the launchers in `experiments/` only parse flags.

One RL step: allocate -> roll out -> score -> update predictor -> advantages -> learner step -> log
-> checkpoint -> evaluate. Everything is seeded from the config; a killed run resumes from its last
checkpoint and produces the same metrics as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import time

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax import run_config
from trace_jax.allocation import strategies
from trace_jax.allocation.predictor import NUM_SCALARS
from trace_jax.checkpointing import Checkpointer, require_checkpoint_dir
from trace_jax.envs import SOURCES, Limits
from trace_jax.envs.oracle import run_episode
from trace_jax.envs.render import ChatRenderer, ReactRenderer
from trace_jax.evaluation import evaluate_policy
from trace_jax.metrics import MetricWriter
from trace_jax.models import hf_io, init_params
from trace_jax.models.presets import get_preset
from trace_jax.models.tokenizer import build_tokenizer, load_tokenizer, synthetic_corpus
from trace_jax.parallel.mesh import make_mesh
from trace_jax.rl import learner
from trace_jax.rl.advantages import estimate, node_advantages
from trace_jax.rollout.agent_loop import Policy, RolloutEngine
from trace_jax.rollout.tree import step_statistics
from trace_jax.sampling import SamplingParams
from trace_jax.sft import conversation_demonstrations, make_batch, oracle_demonstrations, sft_step


def banner(title: str) -> None:
    if jax.process_index() == 0:
        print(f"\n==== {title} " + "=" * max(0, 60 - len(title)), flush=True)


def log(message: str) -> None:
    if jax.process_index() == 0:
        print(message, flush=True)


def _seed(*parts) -> int:
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

    def policy(self, params=None) -> Policy:
        return Policy(self.model_config, self.params if params is None else params, self.sampling, self.renderer)


def _source(task: run_config.TaskSection):
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


def build(config, workdir: str) -> Setup:
    """Validates the config (failing before compute) and builds model, tokenizer, task source, env."""
    run = config if isinstance(config, run_config.RunConfig) else run_config.from_config_dict(config)
    os.makedirs(workdir, exist_ok=True)
    source = _source(run.task)
    tokenizer = _tokenizer(run, source, workdir)
    if run.model.checkpoint:
        model_config, params = hf_io.load(run.model.checkpoint, dtype=run.model.param_dtype,
                                          compute_dtype=run.model.dtype)
        renderer = ChatRenderer(tokenizer)
    else:
        model_config = get_preset(run.model.preset, param_dtype=run.model.param_dtype, dtype=run.model.dtype)
        if len(tokenizer) > model_config.vocab_size:
            raise run_config.ConfigError(f"tokenizer has {len(tokenizer)} tokens but model preset "
                                         f"{run.model.preset!r} has vocab_size {model_config.vocab_size}")
        params = init_params(model_config, run.seed)
        renderer = ReactRenderer(tokenizer)
    env = source.make_env(Limits(max_turns=run.task.max_turns, max_tokens=run.task.max_tokens))
    sampling = SamplingParams(temperature=run.rl.temperature, top_p=run.rl.top_p,
                              max_new_tokens=run.rl.max_new_tokens)
    return Setup(run, model_config, params, tokenizer, renderer, source, env, sampling)


def _eval_tasks(setup: Setup):
    tasks = setup.source.tasks(setup.run.eval.split)
    return tasks[: setup.run.eval.num_tasks] if setup.run.eval.num_tasks else tasks


def held_out(setup: Setup, params) -> dict[str, float]:
    out = evaluate_policy(setup.policy(params), setup.env, _eval_tasks(setup), greedy=True, seed=setup.run.seed)
    if setup.run.eval.pass_k:
        out.update(evaluate_policy(setup.policy(params), setup.env, _eval_tasks(setup), greedy=False,
                                   k=setup.run.eval.pass_k, seed=setup.run.seed))
    return out


def _sft(setup: Setup, workdir: str, writer: MetricWriter):
    """Runs (or restores) the supervised warm start; returns params."""
    run = setup.run
    ckpt = Checkpointer(os.path.join(workdir, "sft"), keep=1)
    sft_settings = run_config.settings(run, run_config.SFT_SETTINGS)
    if ckpt.latest_step() is not None:
        run_config.require_same_settings(f"the SFT checkpoint {ckpt.directory}",
                                         ckpt.read_record().get("settings"), sft_settings)
        arrays, _ = ckpt.restore({"params": setup.params})
        log(f"restored SFT params from {ckpt.directory}")
        return arrays["params"]
    if run.sft.data_path:
        demos = conversation_demonstrations(run.sft.data_path, setup.renderer)
    else:
        demos = oracle_demonstrations(setup.source, setup.renderer, num=run.sft.num_demos,
                                      mistake_rate=run.sft.mistake_rate, seed=run.seed)
    cut = sum(len(d[0]) > run.sft.max_len for d in demos)
    log(f"{len(demos)} demonstrations, mean {np.mean([len(d[0]) for d in demos]):.0f} tokens; {cut} longer than "
        f"sft.max_len={run.sft.max_len} are truncated")
    optimizer = learner.make_optimizer(learner.LearnerConfig(learning_rate=run.sft.learning_rate,
                                                             max_grad_norm=run.learner.max_grad_norm))
    params = jax.tree.map(jnp.array, setup.params)
    opt_state = optimizer.init(params)
    rng = np.random.default_rng(_seed(run.seed, "sft"))
    from tqdm.auto import tqdm
    for step in tqdm(range(run.sft.steps), desc="sft", disable=jax.process_index() != 0, mininterval=5):
        chosen = rng.choice(len(demos), run.sft.batch_size)
        batch = make_batch([demos[i] for i in chosen], run.sft.max_len)
        params, opt_state, metrics = sft_step(setup.model_config, optimizer, params, opt_state, batch)
        if step % 25 == 0 or step == run.sft.steps - 1:
            writer.write(step, metrics, prefix="sft/")
    if run.sft.steps:
        ckpt.save(run.sft.steps, {"params": params}, {"steps": run.sft.steps, "settings": sft_settings})
    return params


def sft(config, workdir: str) -> dict:
    """Supervised warm start alone; returns held-out accuracy after it."""
    t0 = time.time()
    banner("setup")
    setup = build(config, workdir)
    writer = MetricWriter(workdir, enabled=jax.process_index() == 0)
    banner("supervised warm start")
    params = _sft(setup, workdir, writer)
    banner("evaluate")
    result = held_out(setup, params)
    log(f"held-out after SFT: {result}")
    return {"acc_after_sft": result["accuracy"], "wall_s": round(time.time() - t0, 1)}


class _StopFlag:
    """SIGTERM/SIGINT set a flag: the loop checkpoints and exits cleanly after the current step."""

    def __init__(self):
        self.stop = False
        self.previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self.previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. some notebook kernels)
                pass

    def _handle(self, signum, frame):
        self.stop = True
        log(f"signal {signum}: checkpointing after this step")

    def restore(self):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _pool(tasks, position: int, size: int, seed: int):
    """The next `size` tasks of a seeded, epoch-wise shuffled stream, from `position`."""
    out, order, order_epoch = [], None, None
    while len(out) < size:
        epoch, offset = divmod(position, len(tasks))
        if epoch != order_epoch:
            order, order_epoch = np.random.default_rng(_seed(seed, "data", epoch)).permutation(len(tasks)), epoch
        out.append(tasks[int(order[offset])])
        position += 1
    return out, position


def _make_allocator(setup: Setup):
    run = setup.run
    extra = {"predictor": run.predictor, "stages": run.allocator.stages} if run.allocator.name == "trace" else {}
    return strategies.make(run.allocator.name, run.budget, seed=run.seed,
                           feature_dim=setup.model_config.hidden_size + NUM_SCALARS, **extra)


def _restore(setup: Setup, ckpt: Checkpointer, allocator, optimizer):
    """params, optimizer state and allocator state of the latest checkpoint; returns its record."""
    record = ckpt.read_record()
    run_config.require_same_settings(f"the checkpoint {ckpt.directory}", record.get("settings"),
                                     run_config.settings(setup.run), ignore=run_config.RESUMABLE_SETTINGS)
    opt_state = optimizer.init(setup.params)
    target = {"params": setup.params, "opt_state": opt_state,
              "allocator": allocator.state_template(record["allocator"])}
    arrays, record = ckpt.restore(target)
    allocator.load_host_state(record["allocator"])
    allocator.load_state(arrays.get("allocator", {}), record["allocator"])
    return arrays["params"], arrays["opt_state"], record


def train_and_evaluate(config, workdir: str, *, after_sft: dict | None = None) -> dict:
    """SFT warm start (or restore), evaluation, the RL loop with checkpoints, evaluation, HF export.

    `after_sft`: the held-out result of the SFT checkpoint when the caller already measured it (a
    comparison sharing one SFT checkpoint across runs); it is then not re-evaluated."""
    t0 = time.time()
    banner("setup")
    setup = build(config, workdir)
    run = setup.run
    writer = MetricWriter(workdir, enabled=jax.process_index() == 0)
    log(f"allocator {run.allocator.name}, budget {run.budget}, model {setup.model_config.num_layers} layers x "
        f"{setup.model_config.hidden_size}, task {run.task.source}")
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), keep=run.checkpoint.keep)
    allocator = _make_allocator(setup)
    optimizer = learner.make_optimizer(run.learner)

    if ckpt.latest_step() is None:
        banner("supervised warm start")
        params = _sft(setup, workdir, writer)
        if after_sft is None:
            banner("evaluate after SFT")
            after_sft = held_out(setup, params)
        log(f"held-out after SFT: {after_sft}")
        writer.write(0, after_sft, prefix="eval/")
        opt_state = optimizer.init(params)
        start, position = 0, 0
    else:
        banner("resume")
        params, opt_state, record = _restore(setup, ckpt, allocator, optimizer)
        start, position, after_sft = record["step"], record["data_position"], record["after_sft"]
        log(f"resumed at step {start} from {ckpt.directory}")

    mesh_shape = (run.mesh.data, run.mesh.fsdp, run.mesh.tensor)
    if np.prod(mesh_shape) > 1:
        mesh = make_mesh(*mesh_shape)
        learn, params, opt_state = learner.sharded_train_step(mesh, setup.model_config, run.loss, optimizer, params,
                                                               opt_state)
        log(f"learner on a {dict(mesh.shape)} mesh")
    else:
        def learn(p, o, b):
            return learner.train_step(setup.model_config, run.loss, optimizer, p, o, b)

    banner("reinforcement learning")
    stop = _StopFlag()
    train_tasks = setup.source.tasks("train")
    history = []
    step = start
    try:
        for step in range(start, run.rl.steps):
            step_t0 = time.time()
            pool, position = _pool(train_tasks, position, allocator.pool_size, run.seed)
            engine = RolloutEngine(setup.policy(params), setup.env, seed=_seed(run.seed, "rollout", step))
            outcome = allocator.step(engine, pool)
            rollout_s = time.time() - step_t0
            sequences = estimate(outcome.trees, run.advantage)
            metrics = {}
            if sequences:
                batch = learner.build_batch(outcome.trees, sequences, run.learner.micro_batch)
                params, opt_state, metrics = learn(params, opt_state, batch)
                metrics = {k: float(v) for k, v in metrics.items()}
            per_node = [node_advantages(t, run.advantage) for t in outcome.trees]
            leaves = [leaf for t in outcome.trees for leaf in t.leaves()]
            metrics.update(step_statistics(outcome.trees, per_node))
            metrics.update({f"ledger/{k}": v for k, v in engine.ledger.as_dict().items()})
            metrics.update(outcome.stats)
            metrics["reward"] = float(np.mean([leaf.reward for leaf in leaves])) if leaves else 0.0
            # rollouts that landed in a tree with both outcomes, per rollout bought (discarded ones included)
            metrics["useful_rollout_share"] = sum(len(t.leaves()) for t in outcome.trees if t.is_mixed()) / max(
                engine.ledger.rollouts_started, 1)
            metrics["trees"] = len(outcome.trees)
            metrics["rollout_s"] = rollout_s
            metrics["step_s"] = time.time() - step_t0
            metrics["tokens_per_s"] = engine.ledger.tokens_generated / max(rollout_s, 1e-9)
            writer.write(step + 1, metrics, prefix="train/")
            history.append(metrics)
            log(f"step {step + 1}/{run.rl.steps}: reward {metrics['reward']:.3f}  effective ratio "
                f"{metrics['effective_ratio']:.2f}  loss {metrics.get('loss', float('nan')):.4f}  "
                f"{metrics['step_s']:.1f}s")
            last = step + 1 == run.rl.steps
            if (step + 1) % run.checkpoint.every == 0 or last or stop.stop:
                ckpt.save(step + 1, {"params": params, "opt_state": opt_state, "allocator": allocator.state()},
                          {"step": step + 1, "data_position": position, "after_sft": after_sft,
                           "allocator": allocator.host_state(), "settings": run_config.settings(run)})
            if run.rl.eval_every and (step + 1) % run.rl.eval_every == 0 and not last:
                writer.write(step + 1, held_out(setup, params), prefix="eval/")
            if stop.stop:
                log("stopped by signal; resume by running the same command again")
                return {"interrupted": True, "steps": step + 1}
    finally:
        stop.restore()

    banner("evaluate after RL")
    after_rl = held_out(setup, params)
    log(f"held-out after RL: {after_rl}")
    writer.write(run.rl.steps, after_rl, prefix="eval/")
    hf_io.save(os.path.join(workdir, "export"), setup.model_config, params)  # collective; process 0 writes
    writer.close()
    summary = {"acc_after_sft": after_sft["accuracy"], "acc_after_rl": after_rl["accuracy"], "steps": run.rl.steps,
               "allocator": run.allocator.name,
               "effective_ratio": float(np.mean([h["effective_ratio"] for h in history])) if history else None,
               "wall_s": round(time.time() - t0, 1)}
    return summary


def evaluate(config, workdir: str) -> dict:
    """Evaluates the latest RL checkpoint of `workdir` (greedy accuracy, pass@k if configured)."""
    path = require_checkpoint_dir(os.path.join(workdir, "checkpoints"))
    setup = build(config, workdir)
    params, _, record = _restore(setup, Checkpointer(path), _make_allocator(setup),
                                 learner.make_optimizer(setup.run.learner))
    result = held_out(setup, params)
    log(f"held-out at step {record['step']}: {result}")
    return {"step": record["step"], **result}
