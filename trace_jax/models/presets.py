"""Named model configs: `tiny` for tests, `mini` for the 10-minute CPU quickstart, `small` for CPU
experiments and benchmarks, and real model shapes.

The real shapes (Qwen3 0.6B-14B, Llama-3.2-1B) let users size meshes and budgets before
they bring weights; `hf_io.load` reads the actual config from the checkpoint directory.
"""

from __future__ import annotations

from trace_jax.models.config import ModelConfig, RopeConfig

# Vocabulary of the project's bundled BPE tokenizer (`tokenizer.build_tokenizer`).
BUNDLED_VOCAB = 1024

_QWEN3 = dict(model_type="qwen3", qk_norm=True, rms_norm_eps=1e-6, head_dim=128, num_kv_heads=8,
              vocab_size=151936, max_position_embeddings=40960, rope=RopeConfig(theta=1_000_000.0),
              bos_token_id=151643, eos_token_ids=(151645,))

PRESETS: dict[str, dict] = {
    "tiny": dict(model_type="qwen3", qk_norm=True, vocab_size=BUNDLED_VOCAB, hidden_size=64,
                 intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                 tie_word_embeddings=True, max_position_embeddings=2048),
    "mini": dict(model_type="qwen3", qk_norm=True, vocab_size=BUNDLED_VOCAB, hidden_size=128,
                 intermediate_size=384, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=64,
                 tie_word_embeddings=True, max_position_embeddings=4096),
    "small": dict(model_type="qwen3", qk_norm=True, vocab_size=BUNDLED_VOCAB, hidden_size=256,
                  intermediate_size=768, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=64,
                  tie_word_embeddings=True, max_position_embeddings=4096),
    "qwen3-0.6b": dict(_QWEN3, hidden_size=1024, intermediate_size=3072, num_layers=28, num_heads=16,
                       tie_word_embeddings=True),
    "qwen3-1.7b": dict(_QWEN3, hidden_size=2048, intermediate_size=6144, num_layers=28, num_heads=16,
                       tie_word_embeddings=True),
    "qwen3-4b": dict(_QWEN3, hidden_size=2560, intermediate_size=9728, num_layers=36, num_heads=32,
                     tie_word_embeddings=True),
    "qwen3-8b": dict(_QWEN3, hidden_size=4096, intermediate_size=12288, num_layers=36, num_heads=32,
                     tie_word_embeddings=False),
    "qwen3-14b": dict(_QWEN3, hidden_size=5120, intermediate_size=17408, num_layers=40, num_heads=40,
                      tie_word_embeddings=False),
    "llama-3.2-1b": dict(model_type="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                         num_layers=16, num_heads=32, num_kv_heads=8, head_dim=64, rms_norm_eps=1e-5,
                         tie_word_embeddings=True, max_position_embeddings=131072,
                         rope=RopeConfig(rope_type="llama3", theta=500_000.0, factor=32.0, low_freq_factor=1.0,
                                         high_freq_factor=4.0, original_max_position_embeddings=8192),
                         bos_token_id=128000, eos_token_ids=(128001, 128008, 128009)),
}


def get_preset(name: str, **overrides) -> ModelConfig:
    """The named config, with field overrides (e.g. `param_dtype="bfloat16"`)."""
    if name not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}")
    return ModelConfig(**{**PRESETS[name], **overrides})
