"""Policy losses behind a registry: the clipped surrogate with separate low/high clip (DAPO
clip-higher), token-mean or sequence-mean aggregation, optional k3 KL to a reference. "ppo_clip" takes the
importance ratio against the sampler's own log-probs; "decoupled_ppo" (AReaL's decoupled PPO, for rollouts
sampled by older params, `rl.max_staleness`) clips against the proximal policy (the params at the start of the
step's updates) and weighs each token by proximal / behaviour, truncated at `weight_cap`. Pure functions of the
policy's token log-probs and entropies (`rl/logprobs.py`) and the batch."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from trace_jax import ranges
from trace_jax.ranges import AT_LEAST_0, POSITIVE, Range, ranged
from trace_jax.registry import Registry


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossConfig:
    """Attributes:
      name: registry key.
      clip_low, clip_high: ratio clipped to [1 - clip_low, 1 + clip_high].
      aggregation: "token_mean" (every trained token weighs the same) or "sequence_mean".
      kl_coef: weight of the k3 KL to the reference log-probs (0 = off, no reference needed).
      temperature: the sampler's temperature; log-probs are of softmax(logits / T).
    """

    # the batch must carry `prox_logprobs`: the learner's log-probs at the start of the step's updates
    proximal: ClassVar[bool] = False

    name: str = "ppo_clip"
    clip_low: float = ranged(0.2, Range(0, 1, high_open=True))
    clip_high: float = ranged(0.28, AT_LEAST_0)
    aggregation: str = ranged("token_mean", ("token_mean", "sequence_mean"))
    kl_coef: float = ranged(0.0, AT_LEAST_0)
    temperature: float = ranged(1.0, POSITIVE)

    def __post_init__(self):
        ranges.check(self, "loss")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecoupledPPOConfig(LossConfig):
    """Attributes (besides LossConfig's):
      weight_cap: the behaviour correction proximal / behaviour is truncated at this value (AReaL's decoupled
        PPO; truncated importance sampling caps it the same way).
    """

    name: str = "decoupled_ppo"
    weight_cap: float = ranged(2.0, Range(1.0))
    proximal: ClassVar[bool] = True


def _surrogate(new, anchor, entropy, batch, config: LossConfig, normalizer, weight=None):
    """The clipped surrogate with the ratio new / anchor, each token's term times `weight` (None: 1)."""
    mask = batch["mask"].astype(jnp.float32)
    log_ratio = new - anchor
    ratio = jnp.exp(log_ratio)
    adv = batch["advantages"]
    clipped = jnp.clip(ratio, 1.0 - config.clip_low, 1.0 + config.clip_high)
    per_token = -jnp.minimum(ratio * adv, clipped * adv)
    if weight is not None:
        per_token = per_token * weight
    if config.kl_coef > 0:
        d = batch["ref_logprobs"] - new
        per_token = per_token + config.kl_coef * (jnp.exp(d) - d - 1.0)
    if config.aggregation == "token_mean":
        weights = mask
    elif "sequence_weights" in batch:  # packed trees: a row holds several sequences' tokens
        weights = mask * batch["sequence_weights"]
    else:  # each sequence's tokens share weight 1
        weights = mask / jnp.maximum(mask.sum(axis=1, keepdims=True), 1.0)
    loss = jnp.sum(per_token * weights) / normalizer
    metrics = {
        "clip_fraction": jnp.sum((jnp.abs(ratio - clipped) > 1e-6) * mask),
        "approx_kl": jnp.sum(((ratio - 1.0) - log_ratio) * mask),
        "entropy": jnp.sum(entropy * mask),
        "tokens": jnp.sum(mask),
    }
    return loss, metrics


def ppo_clip(new, entropy, batch, config: LossConfig, normalizer):
    """Returns (summed loss / normalizer, metrics sums). new, entropy: the policy's log-prob of each target
    and its entropy at temperature config.temperature; batch: targets, mask, advantages, old_logprobs (and
    ref_logprobs when kl_coef > 0), all [N, L] (packed trees: [N, E] target entries, with `sequence_weights`, 1 /
    the trained tokens of each entry's sequence); normalizer: total trained tokens (token_mean) or sequences
    (sequence_mean) of the whole accumulated batch."""
    return _surrogate(new, batch["old_logprobs"], entropy, batch, config, normalizer)


def decoupled_ppo(new, entropy, batch, config: DecoupledPPOConfig, normalizer):
    """`ppo_clip` with the ratio against `prox_logprobs` (the proximal policy: the learner's params at the start
    of the step's updates) and each token weighted by min(proximal / behaviour, weight_cap), the behaviour being
    the sampler's `old_logprobs` (Hilton et al. 2021; AReaL, Fu et al. 2025). Also sums each trained token's
    uncapped weight (`is_weight`) and whether it was capped (`is_truncated`). With proximal = behaviour (rollouts
    of the params that train on them, one update) it is `ppo_clip` exactly."""
    weight = jax.lax.stop_gradient(jnp.exp(batch["prox_logprobs"] - batch["old_logprobs"]))
    capped = jnp.minimum(weight, config.weight_cap)
    loss, metrics = _surrogate(new, batch["prox_logprobs"], entropy, batch, config, normalizer, capped)
    mask = batch["mask"].astype(jnp.float32)
    return loss, {**metrics, "is_weight": jnp.sum(weight * mask),
                  "is_truncated": jnp.sum((weight > config.weight_cap) * mask)}


# name -> loss(new_logprobs, entropy, batch, config, normalizer) -> (loss, metric sums)
LOSSES: Registry = Registry("loss", "loss")
LOSSES.register("ppo_clip", config=LossConfig)(ppo_clip)
LOSSES.register("decoupled_ppo", config=DecoupledPPOConfig)(decoupled_ppo)


def get_loss(config: LossConfig):
    return LOSSES.entry(config.name).build
