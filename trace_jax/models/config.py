"""The model's typed configuration and its translation to and from Hugging Face `config.json`.

One frozen dataclass describes every supported family (Qwen3, Qwen2/Qwen2.5, Llama-3):
the differences are flags (QK-norm, q/k/v bias, tied embeddings) and the RoPE variant.
Frozen and hashable, so it can be a static argument of `jax.jit`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp

SUPPORTED_MODEL_TYPES = ("qwen3", "qwen2", "llama")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
REMAT_POLICIES = ("dots", "layer")

_ARCHITECTURES = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "llama": "LlamaForCausalLM",
}


class UnsupportedConfigError(ValueError):
    """A model config this codebase cannot run faithfully (it never guesses)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RopeConfig:
    """Rotary position embedding parameters, as in transformers' `rope_parameters`.

    Attributes:
      rope_type: one of SUPPORTED_ROPE_TYPES.
      theta: the base wavelength (`rope_theta`).
      factor: context-extension factor (linear, llama3, yarn).
      low_freq_factor, high_freq_factor: llama3 smoothing band.
      original_max_position_embeddings: pre-extension context (llama3, yarn).
      beta_fast, beta_slow, attention_factor, truncate: yarn parameters
        (attention_factor None means derived from factor, as transformers does).
    """

    rope_type: str = "default"
    theta: float = 10000.0
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    truncate: bool = True

    def to_hf(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rope_type": self.rope_type, "rope_theta": self.theta}
        if self.rope_type == "linear":
            out["factor"] = self.factor
        elif self.rope_type == "llama3":
            out.update(
                factor=self.factor,
                low_freq_factor=self.low_freq_factor,
                high_freq_factor=self.high_freq_factor,
                original_max_position_embeddings=self.original_max_position_embeddings,
            )
        elif self.rope_type == "yarn":
            out.update(
                factor=self.factor,
                original_max_position_embeddings=self.original_max_position_embeddings,
                beta_fast=self.beta_fast,
                beta_slow=self.beta_slow,
                truncate=self.truncate,
            )
            if self.attention_factor is not None:
                out["attention_factor"] = self.attention_factor
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shape and numerics of a decoder-only LM of the Qwen3/Qwen2/Llama families.

    Attributes:
      model_type: "qwen3", "qwen2" or "llama" (the HF `model_type`).
      vocab_size: rows of the embedding table (may exceed the tokenizer's size).
      hidden_size: residual width D.
      intermediate_size: SwiGLU width F.
      num_layers: decoder layers L.
      num_heads: query heads N.
      num_kv_heads: key/value heads K (N % K == 0: grouped-query attention).
      head_dim: per-head width H, independent of D / N.
      rms_norm_eps: epsilon of every RMSNorm.
      rope: rotary embedding parameters.
      qk_norm: RMSNorm on each head's query and key before RoPE (Qwen3).
      qkv_bias: bias on the q/k/v projections (Qwen2; `attention_bias` elsewhere).
      o_bias: bias on the output projection (`attention_bias` in Llama/Qwen3).
      mlp_bias: bias on the MLP projections (Llama `mlp_bias`).
      tie_word_embeddings: the LM head reuses the embedding table.
      max_position_embeddings: the context the checkpoint was trained for.
      bos_token_id, eos_token_ids: special ids carried through HF round trips.
      param_dtype: storage dtype of the weights ("float32", "bfloat16").
      dtype: compute dtype of activations ("float32" on CPU, "bfloat16" on accelerators).
      remat: what a differentiated full-sequence pass keeps of each layer for the backward pass (an
        execution choice, not part of the checkpoint): "dots" its weight matmuls' outputs (attention
        scores recomputed), "layer" only its input (the whole layer recomputed: the least memory, its
        forward run twice).
    """

    model_type: str = "qwen3"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = RopeConfig()
    qk_norm: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: str = "dots"

    def __post_init__(self):
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedConfigError(
                f"model_type={self.model_type!r} is not supported; expected one of {SUPPORTED_MODEL_TYPES}")
        if self.rope.rope_type not in SUPPORTED_ROPE_TYPES:
            raise UnsupportedConfigError(
                f"rope_type={self.rope.rope_type!r} is not supported; expected one of {SUPPORTED_ROPE_TYPES}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim"):
            if int(getattr(self, name)) <= 0:
                raise UnsupportedConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise UnsupportedConfigError(
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise UnsupportedConfigError(f"head_dim={self.head_dim} must be even for RoPE")
        if self.remat not in REMAT_POLICIES:
            raise UnsupportedConfigError(f"remat={self.remat!r} is not one of {REMAT_POLICIES}")
        for name in ("param_dtype", "dtype"):
            try:
                jnp.dtype(getattr(self, name))
            except TypeError as e:
                raise UnsupportedConfigError(f"{name}={getattr(self, name)!r} is not a dtype") from e

    @property
    def jnp_param_dtype(self):
        return jnp.dtype(self.param_dtype)

    @property
    def jnp_dtype(self):
        return jnp.dtype(self.dtype)

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)


def _rope_from_hf(hf: dict[str, Any], where: str) -> RopeConfig:
    """Reads RoPE from transformers 5 `rope_parameters` or the legacy `rope_theta`/`rope_scaling`."""
    params = dict(hf.get("rope_parameters") or {})
    legacy = dict(hf.get("rope_scaling") or {})
    theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    merged = {**legacy, **params}
    rope_type = merged.get("rope_type", merged.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise UnsupportedConfigError(
            f"{where}: rope_type {rope_type!r} is not supported; expected one of {SUPPORTED_ROPE_TYPES}")
    fields = {f.name for f in dataclasses.fields(RopeConfig)}
    kwargs = {k: merged[k] for k in fields & merged.keys() if merged[k] is not None}
    kwargs.pop("theta", None)
    kwargs.pop("rope_type", None)
    if rope_type in ("llama3", "yarn") and "original_max_position_embeddings" not in kwargs:
        raise UnsupportedConfigError(f"{where}: rope_type {rope_type!r} needs original_max_position_embeddings")
    for key, value in kwargs.items():
        number = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        if (key == "truncate" and not isinstance(value, bool)) or (key != "truncate" and not number):
            raise UnsupportedConfigError(f"{where}: RoPE field {key!r}={value!r} must be "
                                         f"{'true or false' if key == 'truncate' else 'a finite number'}")
    return RopeConfig(rope_type=rope_type, theta=float(theta), **kwargs)


_POSITIVE_INTS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
_OPTIONAL_POSITIVE_INTS = ("num_key_value_heads", "head_dim", "max_position_embeddings")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_hf_fields(hf: dict[str, Any], where: str) -> None:
    """Types and ranges of the config.json fields the model is built from, each error naming the file and field:
    sizes are integers >= 1 (not strings, floats or null), heads divide evenly, the norm epsilon is a finite
    positive number, token ids are integers inside the vocabulary, rope_scaling is an object or null."""
    def bad(field: str, why: str):
        raise UnsupportedConfigError(f"{where}: field {field!r}={hf.get(field)!r} {why}")

    # null means "the default" for the kv heads and head_dim (HF's convention), not for the positions
    given = tuple(f for f in _OPTIONAL_POSITIVE_INTS if hf.get(f) is not None or (f == "max_position_embeddings"
                                                                                    and f in hf))
    for field in _POSITIVE_INTS + given:
        if not _is_int(hf[field]) or hf[field] < 1:
            bad(field, "must be an integer >= 1")
    heads, kv = hf["num_attention_heads"], hf.get("num_key_value_heads") or hf["num_attention_heads"]
    if heads % kv:
        bad("num_key_value_heads", f"must divide num_attention_heads={heads}")
    if hf.get("head_dim") is None and hf["hidden_size"] % heads:
        bad("hidden_size", f"must be a multiple of num_attention_heads={heads} when head_dim is not given")
    eps = hf.get("rms_norm_eps", 1e-6)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        bad("rms_norm_eps", "must be a finite number > 0")
    if hf.get("rope_theta") is not None and (isinstance(hf["rope_theta"], bool)
                                             or not isinstance(hf["rope_theta"], (int, float))
                                             or not math.isfinite(hf["rope_theta"]) or hf["rope_theta"] <= 0):
        bad("rope_theta", "must be a finite number > 0")
    for field in ("rope_scaling", "rope_parameters"):
        if hf.get(field) is not None and not isinstance(hf[field], dict):
            bad(field, "must be an object or null")
    for field in ("bos_token_id", "eos_token_id", "pad_token_id"):
        ids = hf.get(field)
        ids = ids if isinstance(ids, list) else [] if ids is None else [ids]
        if not all(_is_int(i) and 0 <= i < hf["vocab_size"] for i in ids):
            bad(field, f"must be token ids (integers in [0, vocab_size={hf['vocab_size']}))")


def _rope(hf: dict[str, Any], where: str):
    """The RoPE settings, a malformed value inside rope_scaling / rope_parameters named instead of a raw error."""
    try:
        return _rope_from_hf(hf, where)
    except UnsupportedConfigError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise UnsupportedConfigError(f"{where}: malformed RoPE settings (rope_scaling / rope_parameters / "
                                     f"rope_theta): {type(e).__name__}: {e}") from None


def config_from_hf(hf: dict[str, Any], *, param_dtype: str = "float32", dtype: str | None = None,
                   where: str = "config.json") -> ModelConfig:
    """Translates an HF `config.json` dict; `where` names the file in error messages. Every field is checked
    with the run config's field-level rules (`check_hf_fields`) before anything is built from it."""
    if not isinstance(hf, dict):
        raise UnsupportedConfigError(f"{where}: expected a JSON object, got {type(hf).__name__}")
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        archs = hf.get("architectures")
        raise UnsupportedConfigError(
            f"{where}: unsupported architecture model_type={model_type!r} (architectures={archs}); "
            f"supported: {SUPPORTED_MODEL_TYPES}")
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise UnsupportedConfigError(f"{where}: hidden_act={act!r} is not supported (only 'silu')")
    if hf.get("use_sliding_window"):
        raise UnsupportedConfigError(f"{where}: use_sliding_window=true is not supported")
    missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads") if k not in hf]
    if missing:
        raise UnsupportedConfigError(f"{where}: missing required fields {missing}")
    check_hf_fields(hf, where)
    heads = hf["num_attention_heads"]
    attention_bias = bool(hf.get("attention_bias", False))
    eos = hf.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))
    return ModelConfig(
        model_type=model_type,
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope=_rope(hf, where),
        qk_norm=model_type == "qwen3",
        qkv_bias=True if model_type == "qwen2" else attention_bias,
        o_bias=False if model_type == "qwen2" else attention_bias,
        mlp_bias=bool(hf.get("mlp_bias", False)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        max_position_embeddings=int(hf.get("max_position_embeddings", 32768)),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_ids=eos_ids,
        param_dtype=param_dtype,
        dtype=dtype or param_dtype,
    )


def config_to_hf(config: ModelConfig) -> dict[str, Any]:
    """The `config.json` dict that transformers' AutoConfig reads back to the same model."""
    if config.model_type == "qwen2" and (not config.qkv_bias or config.o_bias):
        raise UnsupportedConfigError("qwen2 checkpoints always have q/k/v bias and no o_proj bias")
    if config.model_type != "qwen2" and config.qkv_bias != config.o_bias:
        raise UnsupportedConfigError(f"{config.model_type}: attention_bias covers q/k/v and o together")
    if config.qk_norm != (config.model_type == "qwen3"):
        raise UnsupportedConfigError("qk_norm is a property of the qwen3 family alone")
    rope = config.rope.to_hf()
    hf: dict[str, Any] = {
        "architectures": [_ARCHITECTURES[config.model_type]],
        "model_type": config.model_type,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps,
        "max_position_embeddings": config.max_position_embeddings,
        "tie_word_embeddings": config.tie_word_embeddings,
        "rope_parameters": rope,
        "rope_theta": config.rope.theta,
        "attention_bias": config.o_bias if config.model_type != "qwen2" else False,
        "dtype": config.param_dtype,
        "use_cache": True,
    }
    if config.model_type == "llama":
        hf["mlp_bias"] = config.mlp_bias
    elif config.mlp_bias:
        raise UnsupportedConfigError(f"{config.model_type}: mlp_bias exists only in the llama family")
    if config.bos_token_id is not None:
        hf["bos_token_id"] = config.bos_token_id
    if config.eos_token_ids:
        ids = list(config.eos_token_ids)
        hf["eos_token_id"] = ids[0] if len(ids) == 1 else ids
    return hf
