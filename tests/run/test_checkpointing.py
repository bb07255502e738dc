"""Checkpoints are verified on restore: a damaged, partial, empty or non-finite step is reported with
its path and skipped for the previous good one; nothing raw from orbax reaches the user."""

import glob
import logging
import os

import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax.run.checkpointing import (CHECKSUMS, Checkpointer, CheckpointError, CheckpointMismatchError,
                                         require_checkpoint_dir)


def _arrays(value: float):
    return {"params": {"w": jnp.full((4096,), value), "b": jnp.arange(3.0)}, "opt_state": {"count": jnp.array(7)}}


def _target(record):
    return _arrays(0.0)


@pytest.fixture
def three_steps(tmp_path):
    ckpt = Checkpointer(str(tmp_path / "ckpt"), keep=3)
    for step in (1, 2, 3):
        ckpt.save(step, _arrays(float(step)), {"step": step})
    return ckpt


def _restored_value(ckpt):
    arrays, record, step = ckpt.restore_latest(_target)
    assert record["step"] == step
    return step, float(arrays["params"]["w"][0])


def test_the_newest_good_step_is_restored_with_its_checksums(three_steps):
    assert os.path.exists(os.path.join(three_steps.step_dir(3), CHECKSUMS))
    assert three_steps.verify(3) is True
    assert _restored_value(three_steps) == (3, 3.0)


def _largest_data_file(step_dir):
    files = [f for f in glob.glob(os.path.join(step_dir, "arrays", "**", "*"), recursive=True) if os.path.isfile(f)]
    return max(files, key=os.path.getsize)


def test_flipped_bytes_in_array_data_skip_to_the_previous_step(three_steps, capsys):
    path = _largest_data_file(three_steps.step_dir(3))
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    assert _restored_value(three_steps) == (2, 2.0)  # before: restored without error, training went on NaN
    out = capsys.readouterr().out
    assert "checksum mismatch" in out and three_steps.step_dir(3) in out
    assert os.path.isdir(three_steps.step_dir(3) + ".unusable") and three_steps.steps() == [2, 1]
    three_steps.save(3, _arrays(33.0), {"step": 3})  # the step number is free again
    assert _restored_value(three_steps) == (3, 33.0)


def test_an_empty_newer_step_directory_does_not_block_resume(three_steps):
    os.makedirs(three_steps.step_dir(9))
    assert _restored_value(Checkpointer(three_steps.directory, keep=3)) == (3, 3.0)


def test_a_missing_manifest_is_named_not_an_orbax_error_storm(three_steps, capsys):
    manifests = glob.glob(os.path.join(three_steps.step_dir(3), "arrays", "**", "manifest.ocdbt"), recursive=True)
    assert manifests
    for m in manifests:
        os.remove(m)
    assert _restored_value(three_steps) == (2, 2.0)
    assert "missing" in capsys.readouterr().out


def test_non_finite_params_are_refused(tmp_path):
    ckpt = Checkpointer(str(tmp_path / "ckpt"), keep=3)
    ckpt.save(1, _arrays(1.0), {"step": 1})
    ckpt.save(2, _arrays(float("nan")), {"step": 2})
    with pytest.raises(CheckpointError, match=r"step 2 .*params hold NaN or Inf"):
        ckpt.restore(_arrays(0.0), 2)
    assert _restored_value(ckpt) == (1, 1.0)


def test_a_step_without_checksums_is_restored_unverified_with_a_warning(three_steps, caplog):
    os.remove(os.path.join(three_steps.step_dir(3), CHECKSUMS))
    with caplog.at_level(logging.WARNING, logger="trace_jax.run.checkpointing"):
        assert _restored_value(three_steps) == (3, 3.0)
    assert "restored unverified" in caplog.text


def test_nothing_usable_lists_every_step_and_why(tmp_path):
    ckpt = Checkpointer(str(tmp_path / "ckpt"), keep=3)
    ckpt.save(1, _arrays(float("inf")), {"step": 1})
    os.makedirs(ckpt.step_dir(2))
    with pytest.raises(CheckpointError, match=r"no usable checkpoint .*step 2 .*step 1 .*NaN or Inf"):
        Checkpointer(ckpt.directory).restore_latest(_target)


def test_a_wrong_target_structure_is_a_checkpoint_error_naming_the_step(three_steps):
    with pytest.raises(CheckpointError, match=r"step 3 .*another model.*\['other'\]: checkpoint absent vs run \(2,\)"):
        three_steps.restore({"params": {"other": np.zeros(2)}, "opt_state": {"count": np.array(0)}}, 3)
    with pytest.raises(CheckpointError, match=r"step 3 .*orbax cannot restore"):  # params fit, the rest does not
        three_steps.restore({"params": _arrays(0.0)["params"], "opt_state": {"other": np.array(0)}}, 3)


def test_intact_checkpoints_of_another_model_are_refused_naming_shapes_and_kept(three_steps):
    def other_model(record):
        return {"params": {"w": jnp.zeros((2048,)), "b": jnp.arange(3.0)}, "opt_state": {"count": jnp.array(0)}}

    with pytest.raises(CheckpointMismatchError, match=r"\['w'\]: checkpoint \(4096,\) vs run \(2048,\)"):
        three_steps.restore_latest(other_model)
    assert three_steps.steps() == [3, 2, 1] and not glob.glob(three_steps.directory + "/*.unusable*")


@pytest.mark.parametrize("content", ["null", "7", "[1, 2]", '{"a": 3}'])
def test_a_checksum_file_of_the_wrong_shape_falls_back_to_the_previous_step(three_steps, content):
    with open(os.path.join(three_steps.step_dir(3), CHECKSUMS), "w") as f:
        f.write(content)
    assert _restored_value(Checkpointer(three_steps.directory, keep=3)) == (2, 2.0)


def test_a_checkpoint_directory_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "checkpoints").write_text("not a directory")
    with pytest.raises(CheckpointError, match="exists and is not a directory"):
        Checkpointer(str(tmp_path / "checkpoints"))


def test_keep_zero_and_missing_directories_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="keep=0"):
        Checkpointer(str(tmp_path / "x"), keep=0)
    with pytest.raises(CheckpointError, match="does not exist"):
        require_checkpoint_dir(str(tmp_path / "nowhere"))
