"""Presets: real shapes agree with transformers' own models of the same configs (built on the meta device)."""

import pytest
import torch
import transformers

from trace_jax.models import num_params
from trace_jax.models.config import config_to_hf
from trace_jax.models.presets import PRESETS, get_preset


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_param_count_matches_transformers(name):
    config = get_preset(name)
    hf_config = transformers.AutoConfig.for_model(**config_to_hf(config))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    hf_count = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    assert num_params(config) == hf_count


@pytest.mark.parametrize("name,billions", [("qwen3-0.6b", 0.60), ("qwen3-8b", 8.19), ("qwen3-14b", 14.77),
                                           ("llama-3.2-1b", 1.24)])
def test_real_presets_have_published_sizes(name, billions):
    assert num_params(get_preset(name)) / 1e9 == pytest.approx(billions, abs=0.01)


def test_small_preset_is_a_few_million_params():
    assert 1e6 < num_params(get_preset("small")) < 1e7


def test_unknown_preset_is_named():
    with pytest.raises(KeyError, match="qwen9"):
        get_preset("qwen9")
