"""experiments/dry_run.py compiles a config's programs ahead of time on fake devices and reports per-device
bytes from XLA's memory analysis; a config whose micro-batch the mesh cannot split is refused first."""

import json
import os
import subprocess
import sys

import pytest

from configs import qwen3_8b_multihop
from trace_jax.config import schema
from trace_jax.config.files import from_config_dict

pytestmark = pytest.mark.slow  # the dry run compiles every paper program: `python -m pytest -m slow`

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_dry_run_reports_every_program_per_device():
    out = subprocess.run([sys.executable, "experiments/dry_run.py", "--config", "configs/quickstart.py:runlocal"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result["per_device_bytes"]) == {"learner", "decode", "prefill", "tree_expand", "roots"}
    assert set(result["sampling_layout"].values()) <= {"replicated", "fsdp_gathered"}
    assert all(v > 0 for v in result["per_device_bytes"].values()) and all(result["fits"].values())
    assert "estimate (models/memory.py" in out.stdout and "loop-invariant code motion disabled" in result["source"]


def test_a_micro_batch_the_mesh_cannot_split_is_named(tmp_path):
    (tmp_path / "ckpt").mkdir()
    c = qwen3_8b_multihop.get_config(f"checkpoint={tmp_path / 'ckpt'}")
    c.learner.micro_batch = 4
    with pytest.raises(schema.ConfigError, match=r"'learner\.micro_batch'=4 and 'mesh' \(data x fsdp = 8\) "
                                                     r"conflict.*multiple of 8"):
        from_config_dict(c)


def test_decoding_in_waves_bounds_the_resident_sampler_states(tmp_path):
    """With a slot table and dropped prefixes, the decode loop runs on `rl.decode_slots` rows and what stays
    resident beside it is one wave of prefixes, not the archive of every rollout of the step."""
    from tests import experiment_scripts
    from trace_jax.models.presets import get_preset
    from trace_jax.parallel.mesh import make_mesh

    dry_run = experiment_scripts.load("dry_run")
    (tmp_path / "ckpt").mkdir()
    c = qwen3_8b_multihop.get_config(f"checkpoint={tmp_path / 'ckpt'}")
    c.mesh.update(data=1, fsdp=1, tensor=1)
    c.learner.micro_batch = 1
    c.rl.update(decode_chunk=16, decode_slots=64, keep_prefixes=True)
    archived = from_config_dict(c)
    c.rl.keep_prefixes = False
    waves = from_config_dict(c)
    mesh = make_mesh(1, 1, 1)
    model = get_preset(archived.model.preset, param_dtype=archived.model.param_dtype, dtype=archived.model.dtype)
    assert dry_run.decoding_rows(waves, mesh) == 64
    kept = dry_run.resident_states(archived, model, mesh, 4608, 512)
    dropped = dry_run.resident_states(waves, model, mesh, 4608, 512)
    assert set(dropped) == {"prefix_wave"} and kept["prompts"] > 0
    assert dropped["prefix_wave"] * archived.budget.rollouts == kept["archive"] * 64
    # 36 layers x 8 KV heads x 128 x (k, v) x bf16 = 147456 bytes a token: 64 rows x 4608 tokens, plus small fields
    assert 64 * 4608 * 147456 <= dropped["prefix_wave"] < 1.01 * 64 * 4608 * 147456


# libtpu's environment (`experiments/install_libtpu.sh`, which CI runs): the TPU compiler plans here, off a TPU
TPU_PYTHON = os.environ.get("TRACE_JAX_TPU_PYTHON", "/tmp/tpu/bin/python")


def _dry_run_for(target: str, mesh: str, python: str) -> dict:
    out = subprocess.run([python, "experiments/dry_run.py", "--config", "configs/quickstart.py", "--target", target,
                          "--mesh", mesh], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_tpu_compiler_plans_a_tiny_config_for_a_v5e_slice():
    has_libtpu = os.path.exists(TPU_PYTHON) and subprocess.run(
        [TPU_PYTHON, "-c", "import libtpu"], capture_output=True).returncode == 0
    if not has_libtpu:
        pytest.skip(f"no libtpu environment at {TPU_PYTHON} (make one: bash experiments/install_libtpu.sh; "
                    "or set TRACE_JAX_TPU_PYTHON)")
    result = _dry_run_for("v5e:2x2", "1,2,2", TPU_PYTHON)
    assert result["compiler"].startswith("libtpu") and "TPU v5 lite" in result["compiler"]
    assert result["target"] == "v5e:2x2" and result["devices"] == 4 and result["fits"] is True
    assert set(result["per_device_bytes"]) == {"learner", "decode", "prefill", "tree_expand", "roots"}
    assert all(v > 0 for v in result["per_device_bytes"].values())
    assert result["hbm_per_device_bytes"] == 16 * 2 ** 30
    # the compiled decode program takes the KV cache as the sampling layout declares it: rows over the batch
    # axes (the mini model's single KV head is not split over tensor: `parallel/rules.py`)
    kv = result["kv_cache_sharding"]
    assert kv["compiled"] == kv["layout"] == "P(('data', 'fsdp'), None, None, None)"
    roofline = result["roofline"]
    assert roofline["decode"]["min_bytes_per_step"] > 0 and roofline["decode"]["tokens_per_s_per_chip_at_min"] > 0
    assert all(roofline[p]["roofline_s"] > 0 for p in ("learner", "decode", "prefill", "tree_expand", "roots"))


def test_without_libtpu_a_target_falls_back_to_xla_cpu_and_says_so():
    result = _dry_run_for("v5e:2x2", "1,2,2", sys.executable)
    assert result["compiler"].startswith("XLA:CPU (fallback: libtpu is not importable")
    assert result["devices"] == 4 and isinstance(result["fits"], bool) and result["roofline"]
