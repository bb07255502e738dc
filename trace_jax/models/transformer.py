"""Decoder-only LM of the Qwen3 / Qwen2 / Llama-3 families in Flax NNX, used through a pure `forward`.

Params are a plain nested dict of arrays (the NNX state as a pure dict, layers stacked on a
leading axis and run with `lax.scan`), so the sampler, learner, predictor, checkpoints and
sharding rules all see one ordinary pytree. Shapes use: B batch, S new tokens, T cache
slots, D hidden, N query heads, K kv heads, G = N / K, H head dim, F MLP width, V vocab.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from trace_jax.models.attention import (MASKED, ATTENTION_BLOCK, PACKED_ATTENTION_BLOCK, CausalMask,
                                        blocked_attention, causal_blocks, einsum_attention, fused_attention,
                                        fused_attention_implementation)
from trace_jax.models.cache import KVCache
from trace_jax.models.config import ModelConfig
from trace_jax.models.paged_cache import (BlockWrites, PackedKVCache, PagedKVCache, block_attention, block_write,
                                         view, write)
from trace_jax.models.rope import apply_rope, sin_cos

Params = dict[str, Any]
_REMAT = {"dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
          "layer": jax.checkpoint_policies.nothing_saveable}


def _init(std=0.02):
    return nnx.initializers.normal(std)


class RMSNorm(nnx.Module):
    """x / rms(x) * scale, normalized in float32 (as transformers' Llama/Qwen RMSNorm)."""

    def __init__(self, dim: int, eps: float, param_dtype):
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype))
        self.eps = eps

    def __call__(self, x):
        return self.scale[...].astype(x.dtype) * _rms_normalize(x, self.eps)


def _linear(config: ModelConfig, d_in: int, d_out: int, bias: bool, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(d_in, d_out, use_bias=bias, dtype=config.jnp_dtype, param_dtype=config.jnp_param_dtype,
                      kernel_init=_init(), rngs=rngs)


class Attention(nnx.Module):
    """Grouped-query attention with optional QK-norm and biases, writing its keys/values to the cache."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        c = config
        self.config = c
        self.q_proj = _linear(c, c.hidden_size, c.num_heads * c.head_dim, c.qkv_bias, rngs)
        self.k_proj = _linear(c, c.hidden_size, c.num_kv_heads * c.head_dim, c.qkv_bias, rngs)
        self.v_proj = _linear(c, c.hidden_size, c.num_kv_heads * c.head_dim, c.qkv_bias, rngs)
        self.o_proj = _linear(c, c.num_heads * c.head_dim, c.hidden_size, c.o_bias, rngs)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps, c.jnp_param_dtype)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps, c.jnp_param_dtype)

    def __call__(self, x, sin, cos, mask, kv=None, write_slots=None, paging=None):
        """x [B,S,D]; mask [B,S,T] bool (or a `CausalMask` when kv is None); write_slots [B,S]; kv None or
        (k_cache [B,K,H,T], v_cache [B,K,T,H]); with `paging` (`paged_cache.PageWrites`) the pool's pages
        (k [P,K,H,page], v [P,K,page,H]), with `BlockWrites` a decode call's packed blocks (`paged_cache.py`).

        Keys are cached slot-minor, values head-minor: both attention products then reduce over an
        outer axis and vectorize over the contiguous one, with no transpose of the cache.
        """
        c = self.config
        B, S, _ = x.shape
        q = self.q_proj(x).reshape(B, S, c.num_heads, c.head_dim)
        k = self.k_proj(x).reshape(B, S, c.num_kv_heads, c.head_dim)
        v = self.v_proj(x).reshape(B, S, c.num_kv_heads, c.head_dim)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, sin, cos), apply_rope(k, sin, cos)
        G = c.num_heads // c.num_kv_heads
        if isinstance(paging, BlockWrites):  # a decode step on a packed working copy of pages
            kv = block_write(kv[0], kv[1], paging, write_slots, k, v)
            out = block_attention(q.reshape(B, c.num_kv_heads, G, c.head_dim), *kv, paging)
            return self.o_proj(out.astype(q.dtype).reshape(B, 1, c.num_heads * c.head_dim)), kv
        if paging is not None:  # a chunk on pages: written there, attended over the rows' view
            kv = write(kv[0], kv[1], paging.tables, write_slots, k, v, paging.valid)
            keys, values = (x.astype(q.dtype) for x in view(*kv, paging.tables))
        elif kv is not None:
            rows = jnp.arange(B)[:, None]
            k_cache = kv[0].at[rows, :, :, write_slots].set(k.astype(kv[0].dtype), mode="drop")
            v_cache = kv[1].at[rows, :, write_slots].set(v.astype(kv[1].dtype), mode="drop")
            keys, values, kv = k_cache.astype(q.dtype), v_cache.astype(q.dtype), (k_cache, v_cache)
        else:
            keys, values = k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
        q = q.reshape(B, S, c.num_kv_heads, G, c.head_dim)
        fused = fused_attention_implementation(q.dtype) if S > 1 else None
        if isinstance(mask, CausalMask):
            block = ATTENTION_BLOCK if mask.enter is None else PACKED_ATTENTION_BLOCK
            if fused is None and S > block:
                blocked = blocked_attention if mask.enter is None else causal_blocks
                out = blocked(q, keys, values, mask, block)
                return self.o_proj(out.reshape(B, S, c.num_heads * c.head_dim)), kv
            mask = mask.dense()
        if fused is not None:
            if kv is None:
                keys_btkh, values_btkh = k, v
            else:
                keys_btkh, values_btkh = keys.transpose(0, 3, 1, 2), values.transpose(0, 2, 1, 3)
            out = fused_attention(q, keys_btkh, values_btkh, mask, fused).reshape(B, S, c.num_heads * c.head_dim)
            return self.o_proj(out), kv
        if S == 1:
            # Decode: one query per row, a matrix-vector product per head; as a fused multiply-reduce it
            # streams the cache once, where a batched dot with M = G is slow on CPU backends.
            q1 = q[:, 0, :, :, :, None].astype(jnp.float32)  # [B, K, G, H, 1]
            scores = jnp.sum(q1 * keys[:, :, None].astype(jnp.float32), axis=-2)[:, :, :, None, :]
            scores = jnp.where(mask[:, None, None, :, :], scores * (c.head_dim ** -0.5), MASKED)
            probs = jax.nn.softmax(scores, axis=-1)
            out = jnp.sum(probs[:, :, :, 0, :, None] * values[:, :, None].astype(jnp.float32), axis=-2)
            out = out.astype(values.dtype)[:, None]  # [B, 1, K, G, H]
        else:
            out = einsum_attention(q, keys, values, mask)
        out = out.reshape(B, S, c.num_heads * c.head_dim)
        return self.o_proj(out), kv


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        c = config
        self.gate_proj = _linear(c, c.hidden_size, c.intermediate_size, c.mlp_bias, rngs)
        self.up_proj = _linear(c, c.hidden_size, c.intermediate_size, c.mlp_bias, rngs)
        self.down_proj = _linear(c, c.intermediate_size, c.hidden_size, c.mlp_bias, rngs)

    def __call__(self, x):
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        c = config
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, c.jnp_param_dtype)
        self.self_attn = Attention(c, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, c.jnp_param_dtype)
        self.mlp = MLP(c, rngs=rngs)

    def __call__(self, x, sin, cos, mask, kv=None, write_slots=None, paging=None):
        attn_out, kv = self.self_attn(self.input_layernorm(x), sin, cos, mask, kv, write_slots, paging)
        x = x + attn_out
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class Transformer(nnx.Module):
    """Embedding -> L scanned decoder layers -> final RMSNorm -> LM head (tied or not)."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        c = config
        self.config = c
        self.embed_tokens = nnx.Embed(c.vocab_size, c.hidden_size, dtype=c.jnp_dtype,
                                      param_dtype=c.jnp_param_dtype, embedding_init=_init(), rngs=rngs)

        @nnx.split_rngs(splits=c.num_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make_layers(rngs):
            return DecoderLayer(c, rngs=rngs)

        self.layers = make_layers(rngs)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps, c.jnp_param_dtype)
        if not c.tie_word_embeddings:
            self.lm_head = _linear(c, c.hidden_size, c.vocab_size, False, rngs)

    def unembed(self, hidden):
        """hidden [..., D] -> logits [..., V] through the (tied or separate) LM head."""
        return self.embed_tokens.attend(hidden) if self.config.tie_word_embeddings else self.lm_head(hidden)

    def __call__(self, tokens, positions, cache: KVCache | PagedKVCache | PackedKVCache | None = None,
                 attention_mask=None, return_logits=True, segments=None):
        c = self.config
        B, S = tokens.shape
        valid = jnp.ones((B, S), bool) if attention_mask is None else attention_mask.astype(bool)
        sin, cos = sin_cos(c, positions)
        x = self.embed_tokens(tokens)
        layer_def, layer_state = nnx.split(self.layers)
        middle = None
        if cache is None:
            mask = CausalMask(valid) if segments is None else CausalMask(valid, *segments)

            def body(h, state):
                h, _ = nnx.merge(layer_def, state)(h, sin, cos, mask)
                return h, None

            # Differentiated, each layer keeps its weight matmuls' outputs ("dots": attention scores are
            # recomputed) or only its input ("layer"); forward-only calls are unaffected.
            body = jax.checkpoint(body, prevent_cse=False, policy=_REMAT[c.remat])
            x, _ = jax.lax.scan(body, x, layer_state)
            new_cache = None
        else:
            write_slots = cache.lengths[:, None] + jnp.arange(S)[None, :]  # [B, S]
            mask = _cached_mask(cache.lengths, valid, cache.max_len)
            new_lengths = cache.lengths + valid.sum(axis=1, dtype=jnp.int32)
            paging = cache.writes(valid, new_lengths) if isinstance(cache, (PagedKVCache, PackedKVCache)) else None

            # A Python loop over layers: each layer's cache buffer is updated in place and read
            # directly (slicing a stacked cache inside a scan costs a copy per layer per step on
            # the decode hot path). The cache-free (training) path keeps the compact scan.
            ks, vs = [], []
            for i in range(c.num_layers):
                layer = nnx.merge(layer_def, jax.tree.map(lambda p: p[i], layer_state))
                x, (k, v) = layer(x, sin, cos, mask, (cache.k[i], cache.v[i]), write_slots, paging)
                ks.append(k)
                vs.append(v)
                if i + 1 == middle_layers(c):
                    middle = _rms_normalize(x, c.rms_norm_eps)
            new_cache = cache.replace(k=tuple(ks), v=tuple(vs), lengths=new_lengths)

        hidden = self.norm(x)
        return (self.unembed(hidden) if return_logits else None), hidden, middle, new_cache


def middle_layers(config: ModelConfig) -> int:
    """Decoder layers behind a cached pass's `middle` states (a predictor feature): half, at least one."""
    return max(1, config.num_layers // 2)


def _rms_normalize(x, eps: float):
    """x / rms(x) over the model width in float32, no learned scale."""
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)).astype(x.dtype)


def _cached_mask(lengths, valid, max_len):
    """[B, S, T]: query s of row b sees the row's cached slots and the chunk's valid tokens up to s.

    The chunk is right-padded: its valid tokens come first and land in slots lengths[b] + s.
    """
    S = valid.shape[1]
    rel = jnp.arange(max_len)[None, :] - lengths[:, None]  # [B, T]: slot's index within the chunk
    in_chunk_valid = jnp.take_along_axis(valid, jnp.clip(rel, 0, S - 1), axis=1) & (rel < S)
    causal = rel[:, None, :] <= jnp.arange(S)[None, :, None]  # [B, S, T]
    return (rel < 0)[:, None, :] | (causal & in_chunk_valid[:, None, :])


@functools.lru_cache(maxsize=None)
def _abstract(config: ModelConfig):
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0))))
    return graphdef, state


def param_shapes(config: ModelConfig) -> Params:
    """The params pytree as jax.ShapeDtypeStruct leaves (no memory touched)."""
    return nnx.to_pure_dict(_abstract(config)[1])


def num_params(config: ModelConfig) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(param_shapes(config)))


def init_params(config: ModelConfig, seed: int | jax.Array = 0) -> Params:
    """Random params (normal(0.02) weights, unit norms, zero biases) as a plain nested dict."""
    key = jax.random.key(seed) if isinstance(seed, int) else seed
    return nnx.to_pure_dict(nnx.state(Transformer(config, rngs=nnx.Rngs(params=key))))


@struct.dataclass
class ForwardOutput:
    """What `forward` returns (a pytree, so jitted callers can return it whole)."""

    logits: jax.Array | None  # [B, S, V] in the compute dtype; None with return_logits=False
    hidden: jax.Array  # [B, S, D] final-normed hidden states
    cache: KVCache | PagedKVCache | None  # the cache with the chunk written (None for a full-sequence pass)
    # [B, S, D] the residual stream after `middle_layers(config)` layers, RMS-normalised (no learned scale):
    # computed by cached passes (the sampler's, a feature of the success predictor), None without a cache.
    middle: jax.Array | None = None


def forward(config: ModelConfig, params: Params, tokens, positions, cache: KVCache | PagedKVCache | None = None,
            attention_mask=None, *, return_logits: bool = True, segments=None) -> ForwardOutput:
    """The model as a pure function.

    Args:
      config: static model config.
      params: plain nested dict, as from `init_params` or `hf_io.load`.
      tokens: [B, S] int token ids.
      positions: [B, S] int RoPE positions.
      cache: None for a full-sequence pass; else a KVCache (or PagedKVCache) whose row b gets the chunk
        written at slots lengths[b] + s. The returned cache has lengths advanced by the
        number of valid tokens per row.
      attention_mask: [B, S] bool/int, True for real tokens. With a cache the chunk must be
        right-padded (valid tokens first); without one any pattern works (keys are masked).
      return_logits: False skips the LM head (logits None): a prefill that needs only the
        last position's logits applies `unembed` to that hidden state instead of [B, S, V].
      segments: (enter, exit) [B, S] for packed trees without a cache (`CausalMask`): each token
        attends to its own path's earlier tokens only.

    Returns:
      ForwardOutput(logits, hidden, cache, middle).
    """
    model = nnx.merge(_abstract(config)[0], params)
    if segments is not None and cache is not None:
        raise ValueError("segments (packed trees) apply to a full-sequence pass, not to a cached one")
    logits, hidden, middle, cache = model(tokens, positions, cache=cache, attention_mask=attention_mask,
                                          return_logits=return_logits, segments=segments)
    return ForwardOutput(logits=logits, hidden=hidden, cache=cache, middle=middle)


def unembed(config: ModelConfig, params: Params, hidden):
    """Final-normed hidden [..., D] -> logits [..., V] (the LM head alone)."""
    return nnx.merge(_abstract(config)[0], params).unembed(hidden)
