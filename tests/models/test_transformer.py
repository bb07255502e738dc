"""The decoder against transformers' PyTorch implementation: full-sequence and cached incremental logits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from tests.models.hf_reference import VOCAB, hf_config, logits_and_hidden, middle_states
from trace_jax.models import forward, hf_io, init_cache, init_params
from trace_jax.models.config import config_from_hf
from trace_jax.models.presets import get_preset
from trace_jax.models.rope import inv_frequencies
from trace_jax.models.transformer import middle_layers

FAMILIES = ["qwen3", "qwen2", "llama"]
TOL = 1e-4
_forward = jax.jit(forward, static_argnums=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_full_sequence_matches_transformers(hf_checkpoint, family):
    path, model = hf_checkpoint(family)
    config, params = hf_io.load(path)
    tokens = np.random.RandomState(1).randint(0, VOCAB, (3, 21))
    positions = np.broadcast_to(np.arange(21), tokens.shape)
    out = _forward(config, params, tokens, positions)
    logits, hidden, cache = out.logits, out.hidden, out.cache
    ref_logits, ref_hidden = logits_and_hidden(model, tokens)
    assert cache is None and out.middle is None  # the middle layer's states are a sampler feature only
    np.testing.assert_allclose(np.asarray(logits), ref_logits, atol=TOL, rtol=0)
    np.testing.assert_allclose(np.asarray(hidden), ref_hidden, atol=TOL, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_cached_incremental_decoding_matches_full_pass(hf_checkpoint, family):
    """Rows of different prefix lengths share a batch: prefill, token-by-token decode, then a ragged chunk.
    The middle layer's normalised residual stream (a predictor feature) matches transformers' too."""
    path, model = hf_checkpoint(family)
    config, params = hf_io.load(path)
    schedule = [(7, 3, 5), (1, 1, 1), (1, 1, 1), (1, 1, 1), (2, 0, 3), (1, 1, 1)]
    total = np.sum(schedule, axis=0)
    full = np.random.RandomState(2).randint(0, VOCAB, (3, int(total.max())))
    ref_logits, ref_hidden = logits_and_hidden(model, full)
    ref_middle = middle_states(model, full, middle_layers(config), config.rms_norm_eps)

    cache = init_cache(config, batch=3, max_len=int(total.max()) + 2)
    consumed = np.zeros(3, int)
    for counts in schedule:
        width = max(counts)
        chunk = np.zeros((3, width), np.int32)
        mask = np.zeros((3, width), bool)
        for b, c in enumerate(counts):
            chunk[b, :c] = full[b, consumed[b]:consumed[b] + c]
            mask[b, :c] = True
        positions = consumed[:, None] + np.arange(width)[None, :]
        out = _forward(config, params, chunk, positions, cache, mask)
        logits, hidden, cache = out.logits, out.hidden, out.cache
        for b, c in enumerate(counts):
            want = slice(consumed[b], consumed[b] + c)
            np.testing.assert_allclose(np.asarray(logits[b, :c]), ref_logits[b, want], atol=TOL, rtol=0)
            np.testing.assert_allclose(np.asarray(hidden[b, :c]), ref_hidden[b, want], atol=TOL, rtol=0)
            np.testing.assert_allclose(np.asarray(out.middle[b, :c]), ref_middle[b, want], atol=TOL, rtol=0)
        consumed += counts
        np.testing.assert_array_equal(np.asarray(cache.lengths), consumed)


def test_padding_does_not_change_a_rows_logits():
    """Without a cache, masked (padding) keys are invisible to real tokens."""
    config = get_preset("tiny")
    params = init_params(config, 0)
    tokens = np.random.RandomState(3).randint(0, config.vocab_size, (2, 9))
    positions = np.broadcast_to(np.arange(9), tokens.shape)
    mask = np.ones((2, 9), bool)
    mask[1, 6:] = False
    padded = _forward(config, params, tokens, positions, None, mask).logits
    alone = _forward(config, params, tokens[1:, :6], positions[1:, :6]).logits
    np.testing.assert_allclose(np.asarray(padded[1, :6]), np.asarray(alone[0]), atol=1e-5, rtol=0)


def test_cache_gather_forks_rows():
    config = get_preset("tiny")
    cache = init_cache(config, batch=3, max_len=4)
    cache = cache.replace(lengths=cache.lengths.at[:].set(np.array([1, 2, 3])))
    forked = cache.gather(np.array([2, 2, 0, 1]))
    assert len(forked.k) == config.num_layers
    assert forked.k[0].shape == (4, config.num_kv_heads, config.head_dim, 4)
    assert forked.v[0].shape == (4, config.num_kv_heads, 4, config.head_dim)
    np.testing.assert_array_equal(np.asarray(forked.lengths), [3, 3, 1, 2])


@pytest.mark.parametrize("rope_parameters", [
    dict(rope_type="linear", rope_theta=20000.0, factor=4.0),
    dict(rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
         original_max_position_embeddings=8192),
    dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0, original_max_position_embeddings=32768),
    dict(rope_type="yarn", rope_theta=10000.0, factor=2.0, original_max_position_embeddings=2048,
         attention_factor=1.3, beta_fast=16.0, beta_slow=2.0),
])
def test_rope_frequencies_match_transformers(rope_parameters):
    hf = transformers.LlamaConfig(hidden_size=256, num_attention_heads=2, head_dim=128,
                                  max_position_embeddings=131072, rope_parameters=rope_parameters)
    ref_inv_freq, ref_factor = ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](hf, "cpu")
    inv_freq, factor = inv_frequencies(config_from_hf(hf.to_dict()))
    np.testing.assert_allclose(inv_freq, ref_inv_freq.numpy(), rtol=1e-6)
    assert factor == pytest.approx(ref_factor)


def test_unsupported_rope_type_is_named():
    hf = hf_config("llama").to_dict()
    hf["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 1e4}
    with pytest.raises(ValueError, match="longrope"):
        config_from_hf(hf)


def test_the_fused_attention_path_computes_what_the_einsum_path_does(monkeypatch):
    """GPUs in bf16 take `jax.nn.dot_product_attention` (cuDNN) for multi-token attention: forced here with its
    XLA implementation, a padded full sequence and ragged cached chunks give the einsum path's logits
    (layouts, GQA grouping, masks, fully-masked padding rows)."""
    from trace_jax.models import transformer

    config = get_preset("tiny")  # 4 query heads over 2 KV heads
    params = init_params(config, 0)
    rng = np.random.RandomState(5)
    tokens = rng.randint(0, config.vocab_size, (3, 11))
    positions = np.broadcast_to(np.arange(11), tokens.shape)
    mask = np.ones((3, 11), bool)
    mask[1, 7:] = False
    chunk = rng.randint(0, config.vocab_size, (3, 4))
    chunk_mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], bool)  # ragged; row 2 appends nothing

    def run():  # a fresh jit each call: traced with whichever attention path is patched in (compiled, not eager)
        @jax.jit
        def passes(params, tokens, positions, mask, chunk, chunk_mask):
            full = forward(config, params, tokens, positions, None, mask).logits
            cache = init_cache(config, batch=3, max_len=32)
            cached = forward(config, params, tokens[:, :6], positions[:, :6], cache, mask[:, :6])
            slots = cached.cache.lengths[:, None] + jnp.arange(4)[None]
            step = forward(config, params, chunk, slots, cached.cache, chunk_mask)
            return full, step.logits, step.hidden

        return tuple(np.asarray(x) for x in passes(params, tokens, positions, mask, chunk, chunk_mask))

    want = run()
    assert transformer.fused_attention_implementation(np.float32) is None  # CPU: the einsum path
    monkeypatch.setattr(transformer, "fused_attention_implementation", lambda dtype: "xla")
    got = run()
    np.testing.assert_allclose(got[0][mask], want[0][mask], atol=1e-5, rtol=0)
    np.testing.assert_allclose(got[1][chunk_mask], want[1][chunk_mask], atol=1e-5, rtol=0)
    assert np.isfinite(got[2]).all()  # padding queries with nothing to attend to stay finite


@pytest.mark.slow
def test_long_sequences_attend_in_query_blocks_with_the_same_logits_gradients_and_less_memory(monkeypatch):
    """A full-sequence pass longer than ATTENTION_BLOCK (the learner on long episodes) scans query blocks,
    each block's mask rows built on the fly: logits and parameter gradients equal the dense path's, and the
    compiled gradient holds far less scratch memory (no [B, N, S, S] scores or [B, S, S] mask)."""
    from trace_jax.models import transformer

    config = get_preset("tiny")
    params = init_params(config, 0)
    rng = np.random.RandomState(3)
    tokens = jax.numpy.asarray(rng.randint(0, config.vocab_size, (2, 1000)))
    positions = jax.numpy.broadcast_to(jax.numpy.arange(1000), tokens.shape)
    mask = np.ones((2, 1000), bool)
    mask[1, 900:] = False  # right padding, as the learner pads

    def loss(params):
        logits = forward(config, params, tokens, positions, None, mask).logits
        return jax.numpy.mean(jax.nn.log_softmax(logits)[..., 7] * mask)

    def run():
        grad = jax.jit(jax.value_and_grad(loss))
        scratch = grad.lower(params).compile().memory_analysis().temp_size_in_bytes
        (value, grads), logits = grad(params), forward(config, params, tokens, positions, None, mask).logits
        return value, grads, np.asarray(logits), scratch

    dense = run()  # 1000 <= 1024 queries: one block
    monkeypatch.setattr(transformer, "ATTENTION_BLOCK", 128)  # 8 blocks, the last one padded
    blocked = run()
    np.testing.assert_allclose(blocked[2][mask], dense[2][mask], atol=2e-5, rtol=0)
    np.testing.assert_allclose(blocked[0], dense[0], rtol=1e-5)
    for got, want in zip(jax.tree.leaves(blocked[1]), jax.tree.leaves(dense[1])):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-4)
    print(f"gradient scratch bytes: dense {dense[3]}, blocked {blocked[3]}")
    assert blocked[3] < dense[3] / 3
