"""Tiny random `transformers` (PyTorch) models of each supported family: the references for parity tests."""

import numpy as np
import torch
import transformers

VOCAB = 160


def hf_config(family: str, **overrides):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    if family == "qwen3":  # QK-norm, GQA, head_dim != hidden / heads, tied embeddings
        cfg = transformers.Qwen3Config(**common, head_dim=24, tie_word_embeddings=True)
    elif family == "qwen2":  # q/k/v bias, untied
        cfg = transformers.Qwen2Config(**common, tie_word_embeddings=False)
    elif family == "llama":  # untied, non-default theta with llama3 scaling, attention and MLP biases
        cfg = transformers.LlamaConfig(
            **common, tie_word_embeddings=False, attention_bias=True, mlp_bias=True,
            rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                                 high_freq_factor=4.0, original_max_position_embeddings=64))
    else:
        raise ValueError(family)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def random_model(config, seed: int = 0):
    """A transformers causal LM with every weight random (norm scales around 1, biases non-zero)."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model


def logits_and_hidden(model, tokens):
    with torch.no_grad():
        out = model(torch.as_tensor(tokens), output_hidden_states=True)
        hidden = model.model(torch.as_tensor(tokens)).last_hidden_state
    return out.logits.float().numpy(), hidden.float().numpy()


def middle_states(model, tokens, layers: int, eps: float):
    """The residual stream after `layers` decoder layers (transformers' hidden_states[layers]), RMS-normalised
    without a learned scale: what our cached passes return as `middle`."""
    with torch.no_grad():
        x = model(torch.as_tensor(tokens), output_hidden_states=True).hidden_states[layers].double().numpy()
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
