"""Bad configs fail before compute, naming the field; defaults live in one place."""

import dataclasses
import json
import os
import re

import pytest

from configs import quickstart
from trace_jax import ranges
from trace_jax.config import schema
from trace_jax.config.files import config_args, default_config, from_config_dict
from trace_jax.config.schema import ConfigError
from trace_jax.run import train

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quickstart_config_validates():
    run = from_config_dict(quickstart.get_config())
    assert run.allocator.name == "trace" and run.model.preset == "mini"
    assert from_config_dict(quickstart.get_config("runlocal")).rl.steps == 2


def _updated(update):
    c = quickstart.base().to_dict()
    for dotted, value in update.items():
        section, key = dotted.split(".")
        c[section][key] = value
    return c


@pytest.mark.parametrize("update,culprit", [
    ({"rl.stepz": 3}, "rl.stepz"),
    ({"allocator.name": "bogus"}, "allocator.name"),
    ({"advantage.name": "bogus"}, "advantage.name"),
    ({"loss.temperature": 0.5}, "loss.temperature"),
    ({"budget.unit": "seconds"}, "budget"),
    ({"task.source": "chess"}, "task.source"),
    ({"mesh.data": 64}, "mesh"),
    ({"eval.split": "dev"}, "eval.split"),
    ({"eval.split": "separate", "eval.num_tasks": 0}, "eval.num_tasks"),
    ({"allocator.prefixes": "none", "allocator.name": "grpo"}, "allocator.prefixes"),
    ({"allocator.roots": "all"}, "allocator.roots"),
    ({"allocator.stages": "roots"}, "allocator.stages"),
    ({"loss.aggregation": "bogus"}, "loss.aggregation"),
    ({"task.max_turns": 300}, "task.max_turns"),
    # the silent or late failures found by probing (issue 21), now refused before compute
    ({"checkpoint.every": 0}, "checkpoint.every"),
    ({"checkpoint.keep": 0}, "checkpoint.keep"),
    ({"budget.prompts": 0}, "budget.prompts"),
    ({"learner.micro_batch": 0}, "learner.micro_batch"),
    ({"rl.temperature": 0.0, "loss.temperature": 0.0}, "temperature"),
    ({"rl.steps": -1}, "rl.steps"),
    ({"mesh.fsdp": 0}, "mesh.fsdp"),
    ({"eval.num_tasks": -1}, "eval.num_tasks"),
    ({"sft.batch_size": 0}, "sft.batch_size"),
    ({"task.num_questions": 0}, "task.num_questions"),
    ({"rl.top_p": 1.5}, "rl.top_p"),
    ({"rl.steps": 2.5}, "rl.steps"),
    ({"rl.steps": "80"}, "rl.steps"),
    ({"learner.learning_rate": float("nan")}, "learner.learning_rate"),
    ({"budget.m_min": 9, "budget.m_max": 4}, "budget.m_min"),
    ({"budget.prompts": 40}, "budget.prompts"),
    ({"model.preset": "gigantic"}, "unknown preset"),
    ({"predictor.features": "tokens"}, "predictor"),
    ({"sft.max_difficulty": -1}, "sft.max_difficulty"),
    # issue 42: values accepted that failed later, naming no field
    ({"model.param_dtype": "int8"}, "model.param_dtype"),
    ({"model.dtype": "float64"}, "model.dtype"),
    ({"task.seed": 2 ** 40}, "task.seed"),
    ({"learner.mini_batches": 0}, "learner.mini_batches"),
    ({"eval.sample_every": -1}, "eval.sample_every"),
    # issue 55: the KV page pool
    ({"rl.kv_layout": "blocks"}, "rl.kv_layout"),
    ({"rl.kv_page_size": 0}, "rl.kv_page_size"),
    ({"rl.kv_max_pages": 2}, "'rl.kv_max_pages'=2 x 'rl.kv_page_size'=16 = 32 KV tokens cannot hold one rollout row"),
])
def test_bad_fields_are_named(update, culprit):
    with pytest.raises(ConfigError, match=culprit.replace(".", r"\.")):
        from_config_dict(_updated(update))


@pytest.mark.parametrize("key", ["rl.max_new_tokens", "task.max_tokens"])
def test_generation_lengths_past_the_models_positions_are_named_before_compute(tmp_path, key):
    from trace_jax.run import experiment
    with pytest.raises(ConfigError, match=f"'{key}'=100000000 exceeds the model's 4096 positions"):
        experiment.build(_updated({key: 10 ** 8, "model.preset": "mini"}), str(tmp_path))


@pytest.mark.parametrize("seed", [2 ** 64, -1, 1.5])
def test_a_run_seed_numpy_and_jax_cannot_take_is_named(seed):
    c = _updated({})
    c["seed"] = seed
    with pytest.raises(ConfigError, match="'seed'"):
        from_config_dict(c)


@pytest.mark.slow
def test_the_launcher_names_an_unknown_config_field_flag(tmp_path):
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, os.path.join(repo, "experiments", "train.py"), "--config",
                             os.path.join(repo, "configs", "quickstart.py"), "--workdir", str(tmp_path / "w"),
                             "--config.rl.stepz=3", "--config.rl.steps=2"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "unknown config field(s) ['--config.rl.stepz']" in result.stderr
    assert "Traceback" not in result.stderr and not os.path.exists(tmp_path / "w")
    result = subprocess.run([sys.executable, os.path.join(repo, "experiments", "train.py"), "--config",
                             os.path.join(repo, "configs", "quickstart.py"), "--workdir", str(tmp_path / "w"),
                             "--initialization_timeout=-1"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "--initialization_timeout must be > 0" in result.stderr


def test_a_baseline_runs_on_a_config_that_lists_traces_options_at_their_defaults():
    run = from_config_dict(_updated({"allocator.name": "grpo"}))
    assert dataclasses.asdict(run.allocator) == {"name": "grpo"}


@pytest.mark.parametrize("allocator,estimator", [("trace", "trace_tree"), ("grpo", "grpo"), ("dapo", "grpo"),
                                                 ("mopps", "grpo"), ("knapsack", "grpo"), ("pcl", "grpo"),
                                                 ("treepo", "tree_grpo"), ("entropy_branch", "tree_grpo")])
def test_each_allocator_trains_with_its_own_advantage_estimator_unless_one_is_named(allocator, estimator):
    assert from_config_dict(_updated({"allocator.name": allocator})).advantage.name == estimator
    named = from_config_dict(_updated({"allocator.name": allocator, "advantage.name": "trace_tree"}))
    assert named.advantage.name == "trace_tree"


def test_the_dataclasses_are_the_one_home_of_defaults():
    """The comparison and tiny configs build on the library's defaults unchanged (`quickstart.base`); the
    quickstart overrides its RL stage's length and step size only."""
    assert quickstart.base().to_dict() == default_config().to_dict()
    run = from_config_dict({})
    assert run == from_config_dict(quickstart.base())
    assert run.rl.max_new_tokens == 40 and run.model.preset == "mini"
    differ = {(s, k) for s, fields in quickstart.get_config().to_dict().items() if isinstance(fields, dict)
              for k, v in fields.items() if default_config().to_dict()[s][k] != v}
    assert differ == {("rl", "steps"), ("learner", "learning_rate")}


def test_config_args_reject_unknown_parts_naming_them():
    assert config_args("runlocal, checkpoint=/a=b", flags=("runlocal",), values={"checkpoint": ""}) == {
        "runlocal": True, "checkpoint": "/a=b"}
    assert config_args(None, flags=("runlocal",)) == {"runlocal": False}
    with pytest.raises(ConfigError, match=r"unknown argument\(s\) \['runlcoal'\] for configs/quickstart.py; "
                                          r"it takes \['runlocal'\]"):
        quickstart.get_config("runlcoal")
    with pytest.raises(ConfigError, match=r"\['runlocal=1'\]"):
        config_args("runlocal=1", flags=("runlocal",))


def test_unknown_section_is_named():
    c = quickstart.get_config().to_dict()
    c["optimiser"] = {"lr": 1}
    with pytest.raises(ConfigError, match="optimiser"):
        from_config_dict(c)


@pytest.mark.parametrize("field", ["model.checkpoint", "model.tokenizer", "sft.data_path"])
def test_missing_paths_fail_fast(tmp_path, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.") + ".*does not exist"):
        from_config_dict(_updated({field: str(tmp_path / "nowhere")}))


@pytest.mark.parametrize("field,make,kind", [("sft.data_path", "dir", "a readable file"),
                                             ("model.checkpoint", "file", "a directory"),
                                             ("model.tokenizer", "file", "a directory")])
def test_a_path_of_the_wrong_kind_fails_fast(tmp_path, field, make, kind):
    path = tmp_path / "thing"
    path.mkdir() if make == "dir" else path.write_text("{}")
    with pytest.raises(ConfigError, match=field.replace(".", r"\.") + f".*is not {kind}"):
        from_config_dict(_updated({field: str(path)}))


def test_a_dataset_path_that_is_a_directory_fails_fast(tmp_path):
    c = quickstart.base().to_dict()
    c["task"] = {"source": "gsm8k", "train_path": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"'task\.train_path'.*is not a readable file"):
        from_config_dict(c)
    (tmp_path / "train.jsonl").write_text("")
    os.chmod(tmp_path / "train.jsonl", 0)
    c["task"]["train_path"] = str(tmp_path / "train.jsonl")
    if os.access(tmp_path / "train.jsonl", os.R_OK):  # root reads anything: the permission case needs a user
        return
    with pytest.raises(ConfigError, match="cannot be read"):
        from_config_dict(c)


@pytest.mark.parametrize("field", ["rl.temperature", "learner.learning_rate", "advantage.eps"])
def test_a_positive_float_that_is_zero_in_float32_is_refused(field):
    """1e-50 > 0 in Python, but 0.0 in float32 on the device: temperature 1e-50 would sample greedily."""
    update = {field: 1e-50}
    if field == "rl.temperature":
        update["loss.temperature"] = 1e-50
    with pytest.raises(ConfigError, match=field.replace(".", r"\.") + ".*is 0 in float32"):
        from_config_dict(_updated(update))
    ok = {k: 1e-30 for k in update}  # a float32 subnormal: still positive there
    from_config_dict(_updated(ok))


def test_evaluate_without_checkpoint_fails_fast(tmp_path):
    from trace_jax.run.checkpointing import CheckpointError
    with pytest.raises(CheckpointError, match="does not exist"):
        train.evaluate(quickstart.get_config("runlocal"), str(tmp_path / "empty"))


@pytest.mark.slow
def test_launcher_loads_derived_configs_and_fails_fast_without_checkpoint(tmp_path):
    """configs/*_tiny.py import configs.quickstart: the launcher must make that importable from any cwd."""
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, os.path.join(repo, "experiments", "evaluate.py"), "--config",
                             os.path.join(repo, "configs", "funcall_tiny.py"), "--workdir", str(tmp_path / "none")],
                            cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "CheckpointError" in result.stderr and "does not exist" in result.stderr
    assert "ModuleNotFoundError" not in result.stderr


def test_settings_differences_are_named_and_resumable_fields_ignored():
    run = from_config_dict(quickstart.base())
    other = from_config_dict(_updated({"learner.learning_rate": 0.5, "rl.steps": 7}))
    stored, now = schema.settings(run), schema.settings(other)
    with pytest.raises(schema.ConfigError, match=r"learner.learning_rate: 0.0001 there, 0.5 now") as e:
        schema.require_same_settings("ckpt", stored, now)
    assert "rl.steps: 80 there, 7 now" in str(e.value)
    schema.require_same_settings("ckpt", stored, schema.settings(from_config_dict(
        _updated({"rl.steps": 7, "eval.num_tasks": 3, "mesh.data": 2}))), ignore=schema.RESUMABLE_SETTINGS)
    schema.require_same_settings("ckpt", None, now)  # made before settings were recorded
    assert schema.settings(run, schema.SFT_SETTINGS).keys() == {
        k for k in stored if k.split(".")[0] in ("model", "task", "sft")}


def test_range_errors_state_the_allowed_range():
    with pytest.raises(ConfigError, match=r"'checkpoint\.keep'=0 is out of range: allowed \[1, inf\]"):
        from_config_dict(_updated({"checkpoint.keep": 0}))
    with pytest.raises(ConfigError, match=r"'rl\.top_p'=0\.0 is out of range: allowed \(0, 1\]"):
        from_config_dict(_updated({"rl.top_p": 0.0}))
    with pytest.raises(ConfigError, match="'seed'"):
        from_config_dict({**quickstart.get_config().to_dict(), "seed": -3})
    with pytest.raises(ConfigError, match=r"'rl\.decode_slots'=-8 is out of range: allowed \[0, inf\]"):
        from_config_dict(_updated({"rl.decode_slots": -8}))
    assert from_config_dict(_updated({"rl.decode_slots": 8})).rl.decode_slots == 8  # whole turns in 8 slots


@pytest.mark.parametrize("key,value,allowed", [("task.f1_success", 1.5, "[0, 1]"), ("predictor.width", 0, "[1, inf]"),
                                               ("predictor.learning_rate", 0.0, "(0, inf]"),
                                               ("learner.remat", "all", "('dots', 'layer')"),
                                               ("loss.clip_low", 1.0, "[0, 1)")])
def test_each_owner_declares_its_fields_ranges_and_one_walk_checks_them(key, value, allowed):
    """Ranges live on the fields of the dataclass that owns them (a task source's config, PredictorConfig,
    LearnerConfig, LossConfig), `ranged(default, allowed)`; `checks.check_fields` reads them all."""
    section, name = key.split(".")
    owner = dataclasses.fields(type(getattr(from_config_dict(_updated({})), section)))
    assert str(ranges.allowed(next(f for f in owner if f.name == name))) == allowed
    with pytest.raises(ConfigError, match=re.escape(f"'{key}'={value!r} is out of range: allowed {allowed}")):
        from_config_dict(_updated({key: value}))


@pytest.mark.parametrize("name,arg,culprit", [
    ("qwen3_8b_search_r1", "checkpoint={ckpt},train=/nope/train.parquet,corpus=/nope/wiki.jsonl",
     r"'task\.train_path': path '/nope/train\.parquet' does not exist"),
    ("qwen3_8b_gsm8k", "checkpoint=/nope/Qwen3-8B,train={file}", r"'model\.checkpoint': path '/nope/Qwen3-8B'"),
    ("qwen3_8b_bfcl", "checkpoint={ckpt}", r"'task\.train_path' must name the training file of task\.source='bfcl'"),
    ("qwen3_8b_deepscaler", "checkpoint={ckpt}",
     r"'task\.train_path' must name the training file of task\.source='deepscaler'"),
    ("qwen3_14b_hotpotqa", "runlocal,train=/nope/hotpot.json", r"'task\.train_path': path '/nope/hotpot\.json'"),
    ("qwen3_8b_bfcl_multiturn", "checkpoint=/nope/Qwen3-8B", r"'model\.checkpoint': path '/nope/Qwen3-8B'"),
])
def test_paper_configs_on_real_data_name_a_missing_file_before_compute(tmp_path, name, arg, culprit):
    import importlib
    (tmp_path / "train.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    (tmp_path / "ckpt").mkdir()
    config = importlib.import_module(f"configs.{name}").get_config(
        arg.format(ckpt=tmp_path / "ckpt", file=tmp_path / "train.jsonl"))
    with pytest.raises(schema.ConfigError, match=culprit):
        from_config_dict(config)


def test_a_paper_config_with_its_files_validates(tmp_path):
    from configs import qwen3_8b_gsm8k
    (tmp_path / "train.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    (tmp_path / "ckpt").mkdir()
    run = from_config_dict(qwen3_8b_gsm8k.get_config(f"checkpoint={tmp_path / 'ckpt'},"
                                                               f"train={tmp_path / 'train.jsonl'}"))
    assert run.task.source == "gsm8k" and run.model.preset == "qwen3-8b" and run.mesh.fsdp == 8


PAPER_CONFIG_ARGS = {  # every paper-scale config, each path pointing at a file or folder that exists
    "qwen3_8b_multihop": "checkpoint={ckpt}", "qwen3_14b_multihop": "checkpoint={ckpt}",
    "qwen3_8b_gsm8k": "checkpoint={ckpt},train={file}",
    "qwen3_8b_search_r1": "checkpoint={ckpt},train={file},corpus={file}",
    "qwen3_8b_bfcl": "checkpoint={ckpt},data={ckpt}", "qwen3_8b_deepscaler": "checkpoint={ckpt},train={file}",
    "qwen3_14b_hotpotqa": "checkpoint={ckpt},train={file},test={file}", "qwen3_8b_bfcl_multiturn": "checkpoint={ckpt}",
}


def test_every_paper_config_validates_at_scale_on_its_mesh(tmp_path):
    """Each paper-scale config as shipped (not `:runlocal`) passes validation on as many devices as its mesh
    names (16 fake CPU devices in a subprocess): a mesh that cannot split its micro-batch is caught here."""
    import subprocess
    import sys
    (tmp_path / "train.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    (tmp_path / "ckpt").mkdir()
    script = (
        "import importlib, json, sys\n"
        "from trace_jax.config import schema\n"
        "from trace_jax.config.files import from_config_dict\n"
        "out = {}\n"
        "for name, arg in json.loads(sys.argv[1]).items():\n"
        "    try:\n"
        "        run = from_config_dict(importlib.import_module('configs.' + name).get_config(arg))\n"
        "        out[name] = [run.mesh.data, run.mesh.fsdp, run.mesh.tensor, run.learner.micro_batch]\n"
        "    except schema.ConfigError as e:\n"
        "        out[name] = str(e)\n"
        "print(json.dumps(out))\n")
    args = {k: v.format(ckpt=tmp_path / "ckpt", file=tmp_path / "train.jsonl") for k, v in PAPER_CONFIG_ARGS.items()}
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=16", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(args)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    meshes = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(isinstance(m, list) for m in meshes.values()), meshes
    assert meshes["qwen3_14b_multihop"] == meshes["qwen3_14b_hotpotqa"] == [1, 4, 4, 4]


def test_a_multi_process_run_needs_a_mesh_over_every_process(monkeypatch):
    """Under --distributed the default 1-device mesh would leave each process running every turn on its own."""
    import jax

    from configs import quickstart
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"'mesh': data x fsdp x tensor = 1 devices, but this run has 2 processes "
                                          r"with 2 devices in all.*--config\.mesh\.data=2"):
        from_config_dict(quickstart.get_config())
    c = quickstart.get_config()
    c.mesh.data = 2
    c.learner.micro_batch = 8
    assert from_config_dict(c).mesh.data == 2


def test_an_empty_evaluation_set_is_refused_naming_the_field(tmp_path):
    """So few questions that no held-out task remains: before, the run trained and reported accuracy 0.0 over zero
    tasks."""
    from trace_jax.run import experiment
    c = quickstart.get_config("runlocal")
    c.task.num_questions = 3
    with pytest.raises(ConfigError, match=r"'eval\.split'='test': the source holds no task.*task\.num_questions=3"):
        experiment.build(c, str(tmp_path))
