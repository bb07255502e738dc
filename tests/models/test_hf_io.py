"""HF checkpoint I/O: round trips through transformers, sharded checkpoints, sharded placement, errors."""

import json
import os
import shutil

import jax
import numpy as np
import pytest
import torch
import transformers
from jax.sharding import NamedSharding, PartitionSpec as P
from safetensors.numpy import load_file, save_file

from tests.models.hf_reference import VOCAB, hf_config, logits_and_hidden, random_model
from trace_jax.models import forward, hf_io, init_params
from trace_jax.models.hf_io import CheckpointError
from trace_jax.models.presets import get_preset

_forward = jax.jit(forward, static_argnums=0)
TOKENS = np.random.RandomState(0).randint(0, VOCAB, (2, 11))
POSITIONS = np.broadcast_to(np.arange(11), TOKENS.shape)


@pytest.mark.parametrize("family", ["qwen3", "qwen2", "llama"])
def test_save_then_transformers_load_gives_same_logits(hf_checkpoint, tmp_path, family):
    config, params = hf_io.load(hf_checkpoint(family)[0])
    hf_io.save(str(tmp_path), config, params)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ours = _forward(config, params, TOKENS, POSITIONS).logits
    np.testing.assert_allclose(logits_and_hidden(reloaded, TOKENS)[0], np.asarray(ours), atol=1e-4, rtol=0)


def test_save_of_fresh_params_loads_in_transformers_and_back(tmp_path):
    config = get_preset("tiny", vocab_size=VOCAB)
    params = init_params(config, 3)
    hf_io.save(str(tmp_path), config, params, max_shard_bytes=20_000)
    assert os.path.exists(tmp_path / hf_io.INDEX_FILE)  # several shard files
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".safetensors")]) > 1
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ours = _forward(config, params, TOKENS, POSITIONS).logits
    np.testing.assert_allclose(logits_and_hidden(reloaded, TOKENS)[0], np.asarray(ours), atol=1e-4, rtol=0)
    config2, params2 = hf_io.load(str(tmp_path))
    assert config2 == config
    jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_load_of_transformers_sharded_checkpoint(tmp_path):
    model = random_model(hf_config("llama"), seed=5)
    model.save_pretrained(tmp_path, max_shard_size="40KB")
    assert os.path.exists(tmp_path / hf_io.INDEX_FILE)
    config, params = hf_io.load(str(tmp_path))
    ours = _forward(config, params, TOKENS, POSITIONS).logits
    np.testing.assert_allclose(np.asarray(ours), logits_and_hidden(model, TOKENS)[0], atol=1e-4, rtol=0)


def test_load_places_params_with_given_shardings(hf_checkpoint):
    path, _ = hf_checkpoint("qwen2")
    _, reference = hf_io.load(path)
    mesh = jax.make_mesh((2, 4), ("data", "fsdp"), devices=jax.devices()[:8])

    def spec(x):  # shard the first axis divisible by 4 over fsdp, replicate the rest
        axes = [None] * x.ndim
        for i, d in enumerate(x.shape):
            if d % 4 == 0:
                axes[i] = "fsdp"
                break
        return NamedSharding(mesh, P(*axes))

    shardings = jax.tree.map(spec, reference)
    config, params = hf_io.load(path, shardings=shardings)
    kernel = params["layers"]["mlp"]["up_proj"]["kernel"]
    assert kernel.sharding == shardings["layers"]["mlp"]["up_proj"]["kernel"]
    assert kernel.shape == (2, 64, 96)
    assert {s.data.shape for s in kernel.addressable_shards} == {(2, 16, 96)}  # really split 4 ways
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, reference)


def test_load_casts_to_bfloat16(hf_checkpoint):
    config, params = hf_io.load(hf_checkpoint("qwen3")[0], dtype="bfloat16", compute_dtype="float32")
    assert {x.dtype for x in jax.tree.leaves(params)} == {np.dtype(jax.numpy.bfloat16)}
    assert config.dtype == "float32"
    logits = _forward(config, params, TOKENS, POSITIONS).logits
    assert np.isfinite(np.asarray(logits)).all()


# --- errors name the culprit --------------------------------------------------------------------

@pytest.fixture
def checkpoint_copy(hf_checkpoint, tmp_path):
    src = hf_checkpoint("qwen3")[0]
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def _edit_tensors(path, edit):
    file = path / "model.safetensors"
    tensors = load_file(file)
    edit(tensors)
    save_file(tensors, file, metadata={"format": "pt"})
    return file


def test_missing_directory_is_reported(tmp_path):
    with pytest.raises(CheckpointError, match="nope"):
        hf_io.load(str(tmp_path / "nope"))


def test_unsupported_architecture_names_config(checkpoint_copy):
    cfg = json.loads((checkpoint_copy / "config.json").read_text())
    cfg.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    (checkpoint_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config\.json.*gpt2"):
        hf_io.load(str(checkpoint_copy))


def test_unreadable_config_names_file(checkpoint_copy):
    (checkpoint_copy / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config\.json"):
        hf_io.load(str(checkpoint_copy))


def test_missing_tensor_is_named(checkpoint_copy):
    _edit_tensors(checkpoint_copy, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensors.*model\.layers\.1\.mlp\.up_proj\.weight"):
        hf_io.load(str(checkpoint_copy))


def test_extra_tensor_is_named(checkpoint_copy):
    _edit_tensors(checkpoint_copy, lambda t: t.update({"model.layers.0.mystery.weight": np.zeros(3, np.float32)}))
    with pytest.raises(CheckpointError, match=r"model\.layers\.0\.mystery\.weight.*model\.safetensors"):
        hf_io.load(str(checkpoint_copy))


def test_shape_mismatch_names_file_and_tensor(checkpoint_copy):
    def shrink(t):
        t["model.layers.0.self_attn.q_proj.weight"] = t["model.layers.0.self_attn.q_proj.weight"][:-1]
    _edit_tensors(checkpoint_copy, shrink)
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*q_proj\.weight.*shape"):
        hf_io.load(str(checkpoint_copy))


def test_a_non_float_tensor_is_named_not_cast(checkpoint_copy):
    def integers(t):
        name = "model.layers.0.mlp.down_proj.weight"
        t[name] = t[name].astype(np.int32)
    _edit_tensors(checkpoint_copy, integers)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor 'model\.layers\.0\.mlp\.down_proj\.weight' "
                                              r"is stored as I32, not a float dtype"):
        hf_io.load(str(checkpoint_copy))


@pytest.mark.parametrize("change,culprit", [({"num_attention_heads": 0}, "num_attention_heads"),
                                            ({"rms_norm_eps": "tiny"}, "rms_norm_eps")])
def test_a_malformed_config_field_is_a_checkpoint_error_naming_it(checkpoint_copy, change, culprit):
    cfg = json.loads((checkpoint_copy / "config.json").read_text())
    cfg.update(change)
    (checkpoint_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=rf"config\.json: field '{culprit}'"):
        hf_io.load(str(checkpoint_copy))


def test_corrupt_file_is_named(checkpoint_copy):
    (checkpoint_copy / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        hf_io.load(str(checkpoint_copy))


def test_truncated_file_is_named(checkpoint_copy):
    file = checkpoint_copy / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-4096])
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        hf_io.load(str(checkpoint_copy))


def test_index_pointing_to_missing_shard_is_named(tmp_path):
    model = random_model(hf_config("qwen2"), seed=1)
    model.save_pretrained(tmp_path, max_shard_size="40KB")
    shard = sorted(f for f in os.listdir(tmp_path) if f.endswith(".safetensors"))[-1]
    os.remove(tmp_path / shard)
    with pytest.raises(CheckpointError, match=shard):
        hf_io.load(str(tmp_path))


def test_save_rejects_params_of_another_config(tmp_path):
    params = init_params(get_preset("tiny"), 0)
    with pytest.raises(CheckpointError, match="shape"):
        hf_io.save(str(tmp_path), get_preset("tiny", hidden_size=32), params)


def test_a_checkpoint_without_tokenizer_files_or_with_a_larger_tokenizer_is_named_before_its_tensors(tmp_path):
    """A checkpoint directory without tokenizer files gave an empty AutoTokenizer and a misleading error later; a
    tokenizer larger than the embedding gave out-of-range ids. Both are refused by `build`, before any tensor is read."""
    from configs import quickstart
    from trace_jax.config.schema import ConfigError
    from trace_jax.run import experiment
    from trace_jax.testing.checkpoints import write_tiny_qwen3_checkpoint

    checkpoint = write_tiny_qwen3_checkpoint(str(tmp_path / "checkpoint"))
    c = quickstart.get_config("runlocal")
    c.model.checkpoint, c.task.action_format = checkpoint, "hermes"
    experiment.build(c, str(tmp_path / "ok"))  # as written: loads
    cfg = json.loads((tmp_path / "checkpoint" / "config.json").read_text())
    cfg["vocab_size"] = 64  # fewer rows than the tokenizer has tokens
    (tmp_path / "checkpoint" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"tokenizer has \d+ tokens but the checkpoint's config .* vocab_size 64"):
        experiment.build(c, str(tmp_path / "small_vocab"))
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tmp_path / "checkpoint" / name, bare / name)
    c.model.checkpoint = str(bare)
    with pytest.raises(CheckpointError, match=r"'model\.checkpoint': .*bare: no tokenizer files"):
        experiment.build(c, str(tmp_path / "bare_run"))
