"""Rotary position embeddings: inverse frequencies for every supported RoPE variant, and their application.

The frequency formulas follow transformers' `modeling_rope_utils` (default, linear, llama3, yarn)
so that checkpoints trained with them see the same rotations here.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from trace_jax.models.config import ModelConfig


def inv_frequencies(config: ModelConfig) -> tuple[np.ndarray, float]:
    """Returns (inv_freq [H/2] float32, attention_factor) for the config's RoPE variant."""
    rope, dim = config.rope, config.head_dim
    base = rope.theta
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim
    inv_freq = (1.0 / (base ** exponents)).astype(np.float32)
    if rope.rope_type == "default":
        return inv_freq, 1.0
    if rope.rope_type == "linear":
        return (inv_freq / rope.factor).astype(np.float32), 1.0
    if rope.rope_type == "llama3":
        return _llama3(inv_freq, rope.factor, rope.low_freq_factor, rope.high_freq_factor,
                       rope.original_max_position_embeddings), 1.0
    if rope.rope_type == "yarn":
        return _yarn(config)
    raise ValueError(f"unknown rope_type {rope.rope_type!r}")


def _llama3(inv_freq, factor, low_freq_factor, high_freq_factor, old_context_len):
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, scaled).astype(np.float32)


def _yarn(config: ModelConfig):
    rope, dim = config.rope, config.head_dim
    base, factor = rope.theta, rope.factor
    attention_factor = rope.attention_factor
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0

    def correction_dim(num_rotations):
        return (dim * math.log(rope.original_max_position_embeddings / (num_rotations * 2 * math.pi))) / (
            2 * math.log(base))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    pos_freqs = base ** (np.arange(0, dim, 2).astype(np.float32) / dim)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation_factor) + (1.0 / pos_freqs) * extrapolation_factor
    return inv_freq.astype(np.float32), float(attention_factor)


def sin_cos(config: ModelConfig, positions: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """positions [B, S] int -> (sin, cos) [B, S, H/2] float32, already scaled by the attention factor."""
    inv_freq, attention_factor = inv_frequencies(config)
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)
    return jnp.sin(angles) * attention_factor, jnp.cos(angles) * attention_factor


def apply_rope(x: jnp.ndarray, sin: jnp.ndarray, cos: jnp.ndarray) -> jnp.ndarray:
    """x [B, S, N, H]; rotates the two halves of each head (transformers' rotate_half layout)."""
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    sin, cos = sin[:, :, None, :], cos[:, :, None, :]
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)
