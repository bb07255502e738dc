"""Sharded learner steps on 8 CPU devices equal the single-device steps, and params are really sharded."""

import jax
import numpy as np
import pytest

from trace_jax.models import init_params
from trace_jax.models.presets import get_preset
from trace_jax.parallel.mesh import make_mesh
from trace_jax.parallel.rules import spec_for
from trace_jax.rl import learner
from trace_jax.rl.losses import LossConfig

CONFIG = get_preset("tiny", vocab_size=256)


def _batches(steps=3, micro=2, rows=8, length=32):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(steps):
        tokens = rng.integers(0, CONFIG.vocab_size, (micro, rows, length)).astype(np.int32)
        mask = rng.random((micro, rows, length)) < 0.6
        out.append({"tokens": tokens, "valid": np.ones_like(mask), "targets": np.roll(tokens, -1, axis=-1),
                    "mask": mask, "advantages": rng.normal(size=mask.shape).astype(np.float32),
                    "old_logprobs": (-rng.random(mask.shape) * 7).astype(np.float32)})
    return out


def _losses(mesh):
    optimizer = learner.make_optimizer(learner.LearnerConfig(learning_rate=1e-3))
    params = init_params(CONFIG, 0)
    if mesh is None:
        opt_state = optimizer.init(params)
        step = lambda p, o, b: learner.train_step(CONFIG, LossConfig(), optimizer, p, o, b)  # noqa: E731
    else:
        step, params, opt_state = learner.sharded_train_step(mesh, CONFIG, LossConfig(), optimizer, params)
    losses = []
    for batch in _batches():
        params, opt_state, metrics = step(params, opt_state, batch)
        losses.append(float(metrics["loss"]))
    return losses, params


@pytest.mark.parametrize("shape", [(2, 4, 1), pytest.param((2, 2, 2), marks=pytest.mark.slow)])
def test_sharded_steps_match_single_device(shape):
    assert jax.device_count() >= 8
    reference, _ = _losses(None)
    losses, params = _losses(make_mesh(*shape))
    np.testing.assert_allclose(losses, reference, rtol=2e-5, atol=1e-6)
    kernel = params["layers"]["mlp"]["up_proj"]["kernel"]  # [L, D, F] -> (None, fsdp, tensor)
    data, fsdp, tensor = shape
    assert {s.data.shape for s in kernel.addressable_shards} == {(2, 64 // fsdp, 128 // tensor)}
    embed = params["embed_tokens"]["embedding"]
    assert embed.addressable_shards[0].data.shape == (256 // tensor, 64 // fsdp)


def test_undivisible_dimensions_stay_unsharded():
    mesh = make_mesh(1, 8, 1)
    assert spec_for("layers/self_attn/k_proj/kernel", (2, 12, 20), mesh) == jax.sharding.PartitionSpec(None, None,
                                                                                                       None)
    assert spec_for("layers/input_layernorm/scale", (2, 64), mesh) == jax.sharding.PartitionSpec(None, None)


def test_mesh_larger_than_devices_is_refused():
    with pytest.raises(ValueError, match="needs more than"):
        make_mesh(4, 4, 1)


def test_the_sampling_layout_replicates_params_only_where_their_shard_leaves_room():
    """Qwen3-14B in bf16 on tensor 4 (7.4 GB a shard): the replicated sampler programs plan about 3x that in
    experiments/dry_run.py, so a 16 GiB v5e gathers FSDP-sharded params layer by layer; a 95 GiB v5p
    replicates; a backend that reports no memory (CPU) replicates."""
    from trace_jax.models.transformer import num_params
    from trace_jax.parallel.rules import replicated_sampling_fits

    mesh, gib = make_mesh(1, 2, 4), 1 << 30
    param_bytes = num_params(get_preset("qwen3-14b")) * 2
    assert not replicated_sampling_fits(param_bytes, mesh, 16 * gib)
    assert replicated_sampling_fits(param_bytes, mesh, 95 * gib) and replicated_sampling_fits(param_bytes, mesh, None)
