"""The learner: one jitted optimizer step over a batch of either layout (`rl/batches/`) that scans over micro-batches (gradient accumulation) and returns loss, clip fraction, approximate
KL, gradient norm and entropy. The several updates of one RL step (mini-batches, epochs) are planned and
run by `rl/updates.py`. A step whose loss or gradient is not finite leaves params and optimizer
state unchanged (`keep_if_finite`); the caller stops the run (`require_finite`)."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
import optax

from trace_jax.models.config import REMAT_POLICIES, ModelConfig
from trace_jax.models.transformer import Params
from trace_jax.parallel.host import to_device, to_host
from trace_jax import ranges
from trace_jax.ranges import AT_LEAST_0, AT_LEAST_1, POSITIVE, ranged
from trace_jax.rl import batches
from trace_jax.rl.losses import LossConfig, get_loss


@dataclasses.dataclass(frozen=True, kw_only=True)
class LearnerConfig:
    """Attributes:
      learning_rate: AdamW step size.
      weight_decay: AdamW decoupled weight decay.
      max_grad_norm: global-norm gradient clipping.
      micro_batch: sequences per micro-batch (gradients accumulate over the batch).
      mini_batches: optimizer updates per pass over the step's sequences (verl's train batch /
        ppo_mini_batch_size, Tunix's mini_batch_size): a fixed-seed shuffle split into this many
        mini-batches of about equal trained tokens, each one clipped update against the sampler's log-probs.
      epochs: passes over the step's sequences (verl's ppo_epochs, Tunix's num_iterations), each reshuffled.
      split_trees: False (default) keeps every sequence of one tree in one mini-batch: trace_tree trains a
        shared turn once, in the first leaf path through it, and the tree's group-relative contrast (its
        leaves' advantages sum to about zero) then acts within one update, as GRPO's group does in verl and
        Tunix. True assigns sequences one by one (even mini-batches when a step trains a few large trees).
      remat: what the backward pass keeps of each layer (`ModelConfig.remat`): "dots" (default) or "layer"
        (least memory; each layer's forward runs twice: on a CPU the same step time, measured by
        studies/benchmarks/bench_learner.py, more where matmuls dominate; long sequences on small devices).
      layout: "paths" (default): one row per leaf path, its whole context included, so a tree's shared
        turns are computed once per leaf below them; "packed" (`rl/batches/packed.py`): each tree's nodes once,
        depth-first, several trees per row, attention restricted to each token's own path: the same loss
        and gradients with every shared token computed once.
    """

    learning_rate: float = ranged(1e-4, POSITIVE)
    weight_decay: float = ranged(0.0, AT_LEAST_0)
    max_grad_norm: float = ranged(1.0, POSITIVE)
    micro_batch: int = ranged(8, AT_LEAST_1)
    mini_batches: int = ranged(1, AT_LEAST_1)
    epochs: int = ranged(1, AT_LEAST_1)
    split_trees: bool = False
    remat: str = ranged("dots", REMAT_POLICIES)
    layout: str = ranged("paths", tuple(batches.LAYOUTS))

    def __post_init__(self):
        ranges.check(self, "learner")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LearnerMetrics:
    """What one RL step's learner updates report (host floats; with several updates, `rl/updates.py`).

    Attributes:
      loss: the summed per-micro-batch loss (mean over the updates).
      clip_fraction, approx_kl, entropy: per trained token (means over the updates).
      grad_norm: global gradient norm before clipping (mean over the updates).
      trained_tokens: tokens with a loss term (in one pass over the step's sequences).
      updates: optimizer updates taken (mini-batches x epochs, empty mini-batches skipped).
      clip_fraction_last, approx_kl_last, grad_norm_last: the same figures of the last update (the one
        furthest from the sampler's policy; NaN in the records of runs stored before they were measured).
      is_weight_mean, is_truncated_share: per trained token, the behaviour correction proximal / behaviour
        before its cap and the share of tokens it capped (means over the updates; None unless the loss
        corrects for the behaviour policy: "decoupled_ppo").
    """

    loss: float
    clip_fraction: float
    approx_kl: float
    entropy: float
    grad_norm: float
    trained_tokens: float
    updates: int
    clip_fraction_last: float
    approx_kl_last: float
    grad_norm_last: float
    is_weight_mean: float | None
    is_truncated_share: float | None

    @classmethod
    def from_device(cls, metrics: dict[str, jax.Array]) -> LearnerMetrics:
        """One update's metrics (it is its own last update)."""
        m = {k: float(v) for k, v in to_host(metrics).items()}
        weights = {"is_weight_mean": m.pop("is_weight", None), "is_truncated_share": m.pop("is_truncated", None)}
        return cls(**m, **weights, updates=1, clip_fraction_last=m["clip_fraction"], approx_kl_last=m["approx_kl"],
                   grad_norm_last=m["grad_norm"])


def make_optimizer(config: LearnerConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                       optax.adamw(config.learning_rate, weight_decay=config.weight_decay))


def _gradients(model_config: ModelConfig, loss_config: LossConfig, params: Params, batch: dict[str, jax.Array]):
    """The loss gradient over the whole batch ([num_micro, micro, L] arrays), accumulated over its
    micro-batches, and the summed loss metrics."""
    loss_impl = get_loss(loss_config)
    trained = batch["mask"].sum() if loss_config.aggregation == "token_mean" else batches.sequences(batch)
    normalizer = jnp.maximum(trained, 1).astype(jnp.float32)

    def loss_fn(p, micro):
        new, entropy = batches.logprobs(model_config, p, micro, loss_config.temperature)
        return loss_impl(new, entropy, micro, loss_config, normalizer)

    def accumulate(carry, micro):
        grads, totals = carry
        (loss, metrics), g = jax.value_and_grad(loss_fn, has_aux=True)(params, micro)
        totals = jax.tree.map(jnp.add, totals, {"loss": loss, **metrics})
        return (jax.tree.map(lambda a, b: a + b.astype(jnp.float32), grads, g), totals), None

    # summed in float32 whatever the params' dtype (bf16 sums of many micro-batches lose the small ones),
    # returned in the params' dtype for the optimizer; the metrics are the loss's own
    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    _, names = jax.eval_shape(loss_fn, params, jax.tree.map(lambda x: x[0], batch))
    totals0 = {k: jnp.zeros((), jnp.float32) for k in ("loss", *names)}
    (grads, totals), _ = jax.lax.scan(accumulate, (zeros, totals0), batch)
    return jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params), totals


# The policy gradient a batch would give (the loss at the sampler's params: ratio 1, no clipping), for
# studies of update directions (`compare/mechanism.py`).
gradients = jax.jit(_gradients, static_argnums=(0, 1))


def _train_step(model_config: ModelConfig, loss_config: LossConfig, optimizer: optax.GradientTransformation,
                params: Params, opt_state, batch: dict[str, jax.Array]):
    """One optimizer step over the whole batch ([num_micro, micro, L] arrays)."""
    grads, totals = _gradients(model_config, loss_config, params, batch)
    grad_norm = optax.tree.norm(grads)
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    params, opt_state = keep_if_finite(totals["loss"], grad_norm, (optax.apply_updates(params, updates),
                                                                   new_opt_state), (params, opt_state))
    tokens = jnp.maximum(totals["tokens"], 1.0)
    per_token = {k: v / tokens for k, v in totals.items() if k not in ("loss", "tokens")}
    metrics = {"loss": totals["loss"], **per_token, "grad_norm": grad_norm, "trained_tokens": totals["tokens"]}
    return params, opt_state, metrics


def _proximal_logprobs(model_config: ModelConfig, temperature: float, params: Params, batch: dict[str, jax.Array]):
    """The log-prob of each trained target of a step batch ([num_micro, micro, L], or packed entries) under
    `params`, micro-batch by micro-batch: what `decoupled_ppo` clips against (`batch["prox_logprobs"]`)."""
    return jax.lax.map(lambda micro: batches.logprobs(model_config, params, micro, temperature)[0], batch)


proximal_logprobs = jax.jit(_proximal_logprobs, static_argnums=(0, 1))


@dataclasses.dataclass(frozen=True)
class Learner:
    """The learner's programs: `update(params, opt_state, batch) -> (params, opt_state, device metrics)`, one
    optimizer step; `proximal(params, batch)`, the proximal log-probs of a batch (None unless the loss clips
    against the proximal policy, `LossConfig.proximal`)."""

    update: Callable
    proximal: Callable | None = None


def with_proximal(prox, params, step_batches: list[dict]) -> list[dict]:
    """Each of a step's update batches with `prox_logprobs` under `params` (the learner's before the step's first
    update), all computed before any update: `prox(params, batch)` is `proximal_logprobs` (or its sharded form)."""
    return [{**batch, "prox_logprobs": prox(params, batch)} for batch in step_batches]


def keep_if_finite(loss, grad_norm, updated, previous):
    """`updated` when the loss and gradient norm are finite, else `previous` (in-graph: a NaN batch
    leaves params and optimizer state as they were; the host then stops the run, `require_finite`)."""
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    return jax.tree.map(lambda new, old: jnp.where(finite, new, old), updated, previous)


class NonFiniteError(FloatingPointError):
    """A training step whose loss or gradient norm was not finite (its update was not applied)."""


def require_finite(metrics: LearnerMetrics | dict | None, where: str) -> None:
    """Raises NonFiniteError naming `where` when a step's loss or gradient norm is NaN/Inf."""
    if metrics is None:
        return
    values = metrics if isinstance(metrics, dict) else dataclasses.asdict(metrics)
    loss, grad_norm = float(values["loss"]), float(values["grad_norm"])
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        raise NonFiniteError(f"{where}: loss {loss} / gradient norm {grad_norm} is not finite; the update was not "
                             "applied and the run stops (lower the learning rate, check the data, or resume from "
                             "the last checkpoint)")


def require_finite_params(params, what: str) -> None:
    bad = [jax.tree_util.keystr(path) for path, x in jax.tree_util.tree_leaves_with_path(params)
           if jnp.issubdtype(x.dtype, jnp.inexact) and not bool(jnp.isfinite(x).all())]
    if bad:
        raise NonFiniteError(f"{what}: NaN/Inf in {bad[:5]}")


train_step = jax.jit(_train_step, static_argnums=(0, 1, 2), donate_argnums=(3, 4))


def sharded_program(mesh, model_config: ModelConfig, loss_config: LossConfig,
                    optimizer: optax.GradientTransformation, params):
    """`train_step` jitted for `mesh` with explicit in/out shardings and donation, for params shaped like
    `params` (arrays or ShapeDtypeStructs: `experiments/dry_run.py` compiles it without weights). Returns
    (step, (param, optimizer-state, batch) shardings): params and optimizer state as the partition rules
    say (the moments' paths end like their params'), batch rows over data x fsdp."""
    from trace_jax.parallel.rules import batch_sharding, param_shardings

    p_sh = param_shardings(params, mesh)
    o_sh = param_shardings(jax.eval_shape(optimizer.init, params), mesh)
    b_sh = batch_sharding(mesh)
    step = jax.jit(functools.partial(_train_step, model_config, loss_config, optimizer),
                   in_shardings=(p_sh, o_sh, b_sh), out_shardings=(p_sh, o_sh, None), donate_argnums=(0, 1))
    return step, (p_sh, o_sh, b_sh)


def sharded_train_step(mesh, model_config: ModelConfig, loss_config: LossConfig,
                       optimizer: optax.GradientTransformation, params: Params, opt_state=None):
    """`sharded_program` with params and optimizer state (fresh, or the given one) placed: returns
    (step_fn, params, opt_state)."""
    step, (p_sh, o_sh, b_sh) = sharded_program(mesh, model_config, loss_config, optimizer, params)
    params = to_device(params, p_sh)  # from every process's identical copy in a multi-host run
    if opt_state is None:
        opt_state = jax.jit(optimizer.init, out_shardings=o_sh)(params)
    opt_state = to_device(opt_state, o_sh)
    return (lambda p, o, batch: step(p, o, to_device(batch, b_sh))), params, opt_state


def sharded_proximal(mesh, model_config: ModelConfig, loss_config: LossConfig, params: Params):
    """`proximal_logprobs` jitted for `mesh` (params as the partition rules say, batch rows over data x fsdp, as
    `sharded_program`'s): `(params, batch) -> prox log-probs`, sharded like the batch."""
    from trace_jax.parallel.rules import batch_sharding, param_shardings

    b_sh = batch_sharding(mesh)
    prox = jax.jit(functools.partial(_proximal_logprobs, model_config, loss_config.temperature),
                   in_shardings=(param_shardings(params, mesh), b_sh), out_shardings=b_sh)
    return lambda p, batch: prox(p, to_device(batch, b_sh))
