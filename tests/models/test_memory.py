"""The memory estimate: its train-state and KV terms are exact, the learner's is within reach of XLA's own
analysis of the compiled step, and a checkpoint too large for the runtime is refused naming what fits."""

import jax
import jax.numpy as jnp
import pytest

from trace_jax.models import memory
from trace_jax.models.cache import init_cache
from trace_jax.models.presets import get_preset
from trace_jax.models.transformer import num_params, param_shapes
from trace_jax.rl import learner
from trace_jax.rl.losses import LossConfig

BF16 = dict(param_dtype="bfloat16", dtype="bfloat16")
SHAPE = dict(rollout_rows=32, context=1024, micro_batch=1)


def test_train_state_and_kv_cache_terms_are_exact():
    config = get_preset("tiny")
    e = memory.estimate(config, rollout_rows=6, context=40, micro_batch=1, shards=2)
    assert e.train_state == 4 * num_params(config) * 4 // 2
    cache = init_cache(config, 6, 40)
    assert e.rollout_cache == sum(x.nbytes for x in jax.tree.leaves((cache.k, cache.v)))


@pytest.mark.parametrize("preset,context,micro,vocab,remat,logits_bytes", [
    pytest.param("small", 512, 2, 8192, "dots", memory.LOGITS_BYTES, marks=pytest.mark.slow),
    ("mini", 1024, 1, 32000, "dots", memory.LOGITS_BYTES),
    pytest.param("mini", 1024, 1, 32000, "layer", memory.LOGITS_BYTES, marks=pytest.mark.slow),
    pytest.param("mini", 1024, 1, 32000, "layer", 1 << 24, marks=pytest.mark.slow)],
    ids=["small", "mini", "mini-remat-layer", "mini-remat-layer-logits-in-blocks"])
def test_learner_estimate_is_close_to_xlas_analysis_of_the_compiled_step(preset, context, micro, vocab, remat,
                                                                         logits_bytes, monkeypatch):
    monkeypatch.setattr(memory, "LOGITS_BYTES", logits_bytes)  # 1 << 24: blocks of 128 positions
    jax.clear_caches()  # LOGITS_BYTES is read while tracing: no trace of another case may be reused
    config = get_preset(preset, vocab_size=vocab, remat=remat)
    params = param_shapes(config)
    optimizer = learner.make_optimizer(learner.LearnerConfig())
    batch = {k: jax.ShapeDtypeStruct((1, micro, context), d) for k, d in dict(
        tokens=jnp.int32, valid=bool, targets=jnp.int32, mask=bool, advantages=jnp.float32,
        old_logprobs=jnp.float32).items()}
    compiled = learner.train_step.lower(config, LossConfig(), optimizer, params,
                                        jax.eval_shape(optimizer.init, params), batch).compile()
    a = compiled.memory_analysis()
    xla = a.argument_size_in_bytes + a.temp_size_in_bytes + a.output_size_in_bytes - a.alias_size_in_bytes
    estimate = memory.estimate(config, rollout_rows=1, context=context, micro_batch=micro).per_device
    print(f"{preset} remat={remat} logits block {memory.logits_block(config, micro)}: estimate "
          f"{estimate / memory.GIB:.3f} GiB, XLA {xla / memory.GIB:.3f} GiB, ratio {estimate / xla:.2f}")
    assert 1.0 < estimate / xla < 1.4, (estimate, xla)  # conservative, not far off


def test_a_checkpoint_too_large_is_refused_naming_the_largest_that_fits():
    sizes = {p: memory.estimate(get_preset(p, **BF16), **SHAPE).per_device for p in memory.QWEN3_PRESETS}
    assert list(sizes.values()) == sorted(sizes.values())
    t4 = 15 * memory.GIB
    assert sizes["qwen3-0.6b"] < t4 < sizes["qwen3-1.7b"]
    with pytest.raises(memory.InsufficientMemoryError, match=r"Qwen/Qwen3-8B needs about .* GiB.*15\.0 GiB.*"
                                                             r"take qwen3-0\.6b instead \(Hugging Face: Qwen/Qwen3-0\.6B\)"):
        memory.check_fits(get_preset("qwen3-8b", **BF16), "Qwen/Qwen3-8B", available=t4, **SHAPE)
    with pytest.raises(memory.InsufficientMemoryError, match="no Qwen3 size fits"):
        memory.check_fits(get_preset("qwen3-8b", **BF16), "Qwen/Qwen3-8B", available=memory.GIB, **SHAPE)
    fits = memory.check_fits(get_preset("qwen3-8b", **BF16), "Qwen/Qwen3-8B", available=140 * memory.GIB, **SHAPE)
    assert fits.per_device == sizes["qwen3-8b"]
    # Sharding the train state over 8 devices makes 8B fit where one device would not.
    memory.check_fits(get_preset("qwen3-8b", **BF16), "Qwen/Qwen3-8B", available=24 * memory.GIB, shards=8, **SHAPE)


def test_hub_names_map_to_presets_and_bad_shapes_are_named():
    assert memory.preset_of("Qwen/Qwen3-1.7B") == "qwen3-1.7b"
    assert memory.preset_of("qwen3-0.6b/") == "qwen3-0.6b"
    with pytest.raises(KeyError, match="no preset has the shapes of 'Qwen/Qwen3-72B'"):
        memory.preset_of("Qwen/Qwen3-72B")
    with pytest.raises(ValueError, match="must be >= 1"):
        memory.estimate(get_preset("tiny"), rollout_rows=0, context=8, micro_batch=1)
    assert memory.device_memory() > 0
