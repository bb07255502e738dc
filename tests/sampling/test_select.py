"""Token selection edge cases: greedy, top-k, top-p, log-probs and entropy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax.sampling.select import SamplingParams, select

LOGITS = jax.random.normal(jax.random.key(0), (6, 50)) * 3.0
KEYS = jax.random.split(jax.random.key(1), 6)


def test_greedy_is_argmax_with_temperature_one_logprobs():
    tokens, logprobs, _ = select(LOGITS, KEYS, SamplingParams(temperature=0.0))
    np.testing.assert_array_equal(tokens, np.argmax(LOGITS, -1))
    np.testing.assert_allclose(logprobs, np.max(jax.nn.log_softmax(LOGITS), -1), atol=1e-6)


@pytest.mark.parametrize("params", [SamplingParams(top_k=1), SamplingParams(top_p=1e-6),
                                    SamplingParams(top_k=1, top_p=0.5, temperature=2.0)])
def test_top_k_one_and_tiny_top_p_equal_greedy(params):
    tokens, _, _ = select(LOGITS, KEYS, params)
    np.testing.assert_array_equal(tokens, np.argmax(LOGITS, -1))


def _draws(params, n=400):
    keys = jax.random.split(jax.random.key(2), n)
    logits = jnp.broadcast_to(LOGITS[0], (n, 50))
    return np.asarray(select(logits, keys, params)[0])


def test_top_k_draws_only_from_the_k_best():
    allowed = set(np.argsort(-np.asarray(LOGITS[0]))[:5].tolist())
    draws = set(_draws(SamplingParams(top_k=5)).tolist())
    assert draws <= allowed and len(draws) > 1


def test_top_p_draws_only_from_the_nucleus():
    probs = np.asarray(jax.nn.softmax(LOGITS[0]))
    order = np.argsort(-probs)
    mass_before = np.cumsum(probs[order]) - probs[order]
    nucleus = set(order[mass_before < 0.7].tolist())
    draws = set(_draws(SamplingParams(top_p=0.7)).tolist())
    assert draws <= nucleus and len(draws) >= min(2, len(nucleus))


def test_top_p_one_samples_the_full_distribution():
    draws = _draws(SamplingParams(top_p=1.0), n=4000)
    probs = np.asarray(jax.nn.softmax(LOGITS[0]))
    best = int(np.argmax(probs))
    assert abs(np.mean(draws == best) - probs[best]) < 0.03


def test_logprobs_and_entropy_are_of_the_tempered_distribution():
    params = SamplingParams(temperature=0.7, top_k=3, return_entropy=True)
    tokens, logprobs, entropy = select(LOGITS, KEYS, params)
    log_p = np.asarray(jax.nn.log_softmax(LOGITS / 0.7))
    np.testing.assert_allclose(logprobs, log_p[np.arange(6), tokens], atol=1e-5)
    np.testing.assert_allclose(entropy, -(np.exp(log_p) * log_p).sum(-1), atol=1e-5)


@pytest.mark.parametrize("bad", [dict(temperature=-1.0), dict(top_k=-2), dict(top_p=0.0), dict(top_p=1.5),
                                 dict(max_new_tokens=0)])
def test_bad_sampling_params_are_named(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SamplingParams(**bad)
