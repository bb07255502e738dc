"""Config translation to and from HF config.json, and the errors that name the offending field."""

import pytest

from tests.models.hf_reference import hf_config
from trace_jax.models.config import ModelConfig, UnsupportedConfigError, config_from_hf, config_to_hf


@pytest.mark.parametrize("family", ["qwen3", "qwen2", "llama"])
def test_round_trip_through_hf_dict(family):
    config = config_from_hf(hf_config(family).to_dict())
    assert config_from_hf(config_to_hf(config)) == config


def test_legacy_rope_theta_and_rope_scaling_are_read():
    hf = {"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
          "num_hidden_layers": 1, "num_attention_heads": 2, "rope_theta": 123.0,
          "rope_scaling": {"type": "linear", "factor": 2.0}}
    config = config_from_hf(hf)
    assert (config.rope.rope_type, config.rope.theta, config.rope.factor) == ("linear", 123.0, 2.0)
    assert config.head_dim == 4 and config.num_kv_heads == 2


@pytest.mark.parametrize("change,culprit", [
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"use_sliding_window": True}, "use_sliding_window"),
    ({"model_type": "mistral"}, "mistral"),
])
def test_unsupported_fields_are_named(change, culprit):
    hf = {**hf_config("qwen2").to_dict(), **change}
    with pytest.raises(UnsupportedConfigError, match=culprit):
        config_from_hf(hf, where="ckpt/config.json")


def test_missing_field_is_named():
    hf = hf_config("qwen3").to_dict()
    del hf["num_hidden_layers"]
    with pytest.raises(UnsupportedConfigError, match="num_hidden_layers"):
        config_from_hf(hf)


def test_invalid_shapes_are_rejected():
    with pytest.raises(UnsupportedConfigError, match="num_kv_heads"):
        ModelConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=1, num_heads=3,
                    num_kv_heads=2, head_dim=4)
    with pytest.raises(UnsupportedConfigError, match="dtype"):
        ModelConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=1, num_heads=2,
                    num_kv_heads=2, head_dim=4, dtype="float99")


@pytest.mark.parametrize("change,culprit", [
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"hidden_size": "64"}, "hidden_size"),
    ({"intermediate_size": 128.0}, "intermediate_size"),
    ({"num_hidden_layers": True}, "num_hidden_layers"),
    ({"rms_norm_eps": float("nan")}, "rms_norm_eps"),
    ({"rms_norm_eps": -1e-6}, "rms_norm_eps"),
    ({"rms_norm_eps": "1e-6"}, "rms_norm_eps"),
    ({"max_position_embeddings": None}, "max_position_embeddings"),
    ({"num_key_value_heads": 3}, "num_key_value_heads"),
    ({"rope_scaling": "linear"}, "rope_scaling"),
    ({"rope_scaling": {"rope_type": "linear", "factor": "two"}}, "RoPE"),
    ({"rope_theta": -5}, "rope_theta"),
    ({"eos_token_id": 10 ** 9}, "eos_token_id"),
    ({"bos_token_id": "<s>"}, "bos_token_id"),
])
def test_a_malformed_field_is_named_with_its_file_not_a_raw_error(change, culprit):
    """HF config.json fields get the run config's field-level rules (issue 57, class 2): a bad value is an
    UnsupportedConfigError naming the file and field (hf_io.load turns it into a CheckpointError), before any
    tensor is read; before, these were AttributeError / ZeroDivisionError / shape errors, or loaded silently."""
    hf = {**hf_config("qwen3").to_dict(), **change}
    with pytest.raises(UnsupportedConfigError, match=rf"ckpt/config\.json: .*{culprit}"):
        config_from_hf(hf, where="ckpt/config.json")


@pytest.mark.parametrize("hf", [[1, 2], "qwen3", None])
def test_a_config_that_is_not_an_object_is_named(hf):
    with pytest.raises(UnsupportedConfigError, match="expected a JSON object"):
        config_from_hf(hf, where="ckpt/config.json")
