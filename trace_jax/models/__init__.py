"""Policy models: the Qwen3/Qwen2/Llama decoder, its KV cache, HF checkpoint and tokenizer I/O, presets."""

from trace_jax.models.cache import KVCache, init_cache
from trace_jax.models.config import ModelConfig, RopeConfig
from trace_jax.models.transformer import ForwardOutput, forward, init_params, num_params, param_shapes, unembed

__all__ = ["ForwardOutput", "KVCache", "ModelConfig", "RopeConfig", "forward", "init_cache", "init_params",
           "num_params", "param_shapes", "unembed"]
