"""The decoupled PPO loss against its formula: with the proximal policy equal to the behaviour policy it is
`ppo_clip` exactly; otherwise each token's clipped term is weighted by min(proximal / behaviour, cap), the ratio
clipped against the proximal policy, and the weight sums it reports are those of numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.rl.test_learner import _batch
from trace_jax.config import schema
from trace_jax.rl.logprobs import token_logprobs
from trace_jax.rl.losses import DecoupledPPOConfig, LossConfig, decoupled_ppo, get_loss, ppo_clip


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_with_the_proximal_policy_the_behaviour_policy_it_is_ppo_clip_exactly(aggregation):
    rng = np.random.default_rng(0)
    batch = _batch(rng, n=3, length=7)
    batch["prox_logprobs"] = batch["old_logprobs"]
    logits = jnp.asarray(rng.normal(size=(3, 7, 11)), jnp.float32)

    def loss(fn, config):
        return lambda lg: fn(*token_logprobs(lg, batch["targets"], 1.0), batch, config, 5.0)[0]

    plain, decoupled = LossConfig(aggregation=aggregation), DecoupledPPOConfig(aggregation=aggregation)
    assert float(loss(ppo_clip, plain)(logits)) == float(loss(decoupled_ppo, decoupled)(logits))
    np.testing.assert_array_equal(jax.grad(loss(ppo_clip, plain))(logits),
                                  jax.grad(loss(decoupled_ppo, decoupled))(logits))


def test_tokens_are_weighted_by_the_capped_behaviour_correction_and_clipped_against_the_proximal_policy():
    rng = np.random.default_rng(1)
    batch = _batch(rng, n=3, length=7)
    shift = rng.normal(size=batch["old_logprobs"].shape) * 1.5
    batch["prox_logprobs"] = batch["old_logprobs"] + jnp.asarray(shift, jnp.float32)
    new = batch["prox_logprobs"] + jnp.asarray(rng.normal(size=shift.shape) * 0.4, jnp.float32)
    config = DecoupledPPOConfig(weight_cap=1.5)
    loss, metrics = decoupled_ppo(new, jnp.zeros_like(new), batch, config, 10.0)

    mask = np.asarray(batch["mask"], np.float64)
    weight = np.exp(np.asarray(batch["prox_logprobs"], np.float64) - np.asarray(batch["old_logprobs"], np.float64))
    ratio = np.exp(np.asarray(new, np.float64) - np.asarray(batch["prox_logprobs"], np.float64))
    adv = np.asarray(batch["advantages"], np.float64)
    term = -np.minimum(ratio * adv, np.clip(ratio, 1 - config.clip_low, 1 + config.clip_high) * adv)
    expected = np.sum(np.minimum(weight, 1.5) * term * mask) / 10.0
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    np.testing.assert_allclose(float(metrics["is_weight"]), np.sum(weight * mask), rtol=1e-5)
    assert float(metrics["is_truncated"]) == np.sum((weight > 1.5) * mask) > 0


def test_the_loss_is_chosen_by_name_and_its_cap_is_checked():
    run = schema.parse({"loss": {"name": "decoupled_ppo", "weight_cap": 3.0}})
    assert isinstance(run.loss, DecoupledPPOConfig) and run.loss.weight_cap == 3.0
    assert get_loss(run.loss) is decoupled_ppo and type(run.loss).proximal and not LossConfig.proximal
    with pytest.raises(schema.ConfigError, match="weight_cap"):
        schema.parse({"loss": {"name": "decoupled_ppo", "weight_cap": 0.5}})
    with pytest.raises(schema.ConfigError, match="weight_cap"):
        schema.parse({"loss": {"name": "ppo_clip", "weight_cap": 3.0}})
