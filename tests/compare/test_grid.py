"""The comparison grid: its config section, variants and per-run configs, validated before compute."""

import dataclasses

import pytest

from configs import compare_multihop
from trace_jax.compare import grid
from trace_jax.config.schema import ConfigError


def test_main_grid_is_every_allocator_times_every_seed():
    compare, base = grid.split_config(compare_multihop.get_config())
    runs = grid.validate(base, compare)
    assert [v.name for v in grid.variants(compare)] == list(grid.ALL_ALLOCATORS)
    assert len(runs) == len(grid.ALL_ALLOCATORS) * 3 == 8 * 3
    assert {(r.allocator.name, r.seed) for _, _, r in runs} == {(a, s) for a in grid.ALL_ALLOCATORS for s in (0, 1, 2)}
    # everything but the allocator and the seed is shared
    budgets = {r.budget for _, _, r in runs}
    assert len(budgets) == 1 and len({r.rl.steps for _, _, r in runs}) == 1


@pytest.mark.parametrize("ablation,check", [
    ("stages", lambda rs: [dataclasses.astuple(r.allocator)[:3] for r in rs] ==
     [("grpo",), ("trace", "predicted", "none"), ("trace", "uniform", "uniform"), ("trace", "predicted", "uniform"),
      ("trace", "uniform", "agreement"), ("trace", "predicted", "agreement")]),
    ("stage2", lambda rs: [(r.allocator.prefix_budget, r.allocator.prefixes) for r in rs] ==
     [("global", "agreement"), ("global", "posterior"), ("local", "agreement"), ("local", "posterior")]),
    ("lambda_local", lambda rs: [r.advantage.lambda_local for r in rs] == [0.5, 0.0]),
    ("featurizer", lambda rs: [r.predictor.features for r in rs] == ["hidden+scalars", "hidden", "scalars",
                                                                     "layers+scalars", "prompt_mean+scalars",
                                                                     "prompt_mean+hidden+scalars"]),
])
def test_ablation_variants(ablation, check):
    compare, base = grid.split_config(compare_multihop.get_config())
    compare = dataclasses.replace(compare, ablation=ablation, seeds=(0,))
    assert check([r for _, _, r in grid.validate(base, compare)])


def test_advantage_ablation_pairs_each_baseline_with_trace_tree_and_the_mechanism_holds_one_estimator():
    compare, base = grid.split_config(compare_multihop.get_config())
    runs = grid.validate(base, dataclasses.replace(compare, ablation="advantage", seeds=(0,)))
    pairs = [(r.allocator.name, r.advantage.name) for _, _, r in runs]
    assert pairs[:2] == [("grpo", "grpo"), ("grpo", "trace_tree")]
    assert ("treepo", "tree_grpo") in pairs and ("treepo", "trace_tree") in pairs and len(pairs) == 14
    assert "trace" not in {a for a, _ in pairs}
    mechanism = grid.mechanism_variants(base, compare)
    assert {r.advantage.name for _, r in mechanism} == {"trace_tree"}
    own = grid.mechanism_variants(base, dataclasses.replace(compare, mechanism_advantage=""))
    assert dict((n, r.advantage.name) for n, r in own)["treepo"] == "tree_grpo"


def test_the_tokens_framing_puts_every_variant_on_the_same_measured_cap():
    compare, base = grid.split_config(compare_multihop.get_config())
    compare = dataclasses.replace(compare, unit="tokens", seeds=(0,))
    runs = grid.validate(grid.framed(base, compare, 4321), compare)
    assert {(r.budget.unit, r.budget.tokens) for _, _, r in runs} == {("tokens", 4321)}
    assert grid.suffix(compare) == "_tokens" and grid.framed(base, dataclasses.replace(compare, unit="rollouts"), 1) == base
    with pytest.raises(ValueError, match="unit must be"):
        dataclasses.replace(compare, unit="seconds")
    with pytest.raises(ValueError, match="mechanism_learner_window must be in"):  # windows fit the study's steps
        dataclasses.replace(compare, mechanism_steps=10, mechanism_learner_window=11)


def test_bad_compare_fields_are_named():
    c = compare_multihop.get_config()
    c.compare.seedz = (1,)
    with pytest.raises(ConfigError, match=r"compare\.seedz"):
        grid.split_config(c)
    c = compare_multihop.get_config()
    c.compare.allocators = ("grpo", "ppo")
    with pytest.raises(ConfigError, match="ppo"):
        grid.split_config(c)
    c = compare_multihop.get_config()
    c.compare.ablation = "colour"
    with pytest.raises(ConfigError, match="colour"):
        grid.split_config(c)


def test_a_bad_run_config_names_its_variant():
    c = compare_multihop.get_config()
    c.compare.ablation = "featurizer"
    c.budget.unit = "seconds"
    compare, base = grid.split_config(c)
    with pytest.raises(ConfigError, match=r"variant 'trace features=hidden\+scalars', seed 0.*budget"):
        grid.validate(base, compare)


def test_runlocal_variant_is_smaller():
    small = grid.split_config(compare_multihop.get_config("runlocal"))
    full = grid.split_config(compare_multihop.get_config())
    assert small[1]["rl"]["steps"] < full[1]["rl"]["steps"]
    assert small[0].seeds == full[0].seeds == (0, 1, 2)


@pytest.mark.parametrize("name,source,steps", [("compare_multihop", "multihop", 60), ("compare_math", "math", 60),
                                               ("compare_funcall", "funcall", 30)])
def test_every_domain_config_validates_with_one_shared_sft_recipe(name, source, steps):
    import importlib
    module = importlib.import_module(f"configs.{name}")
    for arg, want_steps in ((None, steps), ("runlocal", 5)):
        compare, base = grid.split_config(module.get_config(arg))
        runs = grid.validate(base, compare)
        assert len(runs) == 24 and {r.task.source for _, _, r in runs} == {source}
        assert {r.rl.steps for _, _, r in runs} == {want_steps}
        # :runlocal and the full comparison restore the same SFT checkpoint from one workdir
        assert len({(r.sft, r.model, r.task) for _, _, r in runs}) == 1
    assert grid.split_config(module.get_config())[1]["sft"] == grid.split_config(module.get_config("runlocal"))[1]["sft"]


def test_the_trace_arm_is_the_papers_local_mode_with_holdout_anchors_and_trace_global_is_the_pool():
    compare, base = grid.split_config(compare_multihop.get_config())
    compare = dataclasses.replace(compare, allocators=("grpo", "trace", "trace_global"), seeds=(0,))
    runs = {v.name: r for v, _, r in grid.validate(base, compare)}
    assert (runs["trace"].allocator.prefix_budget, runs["trace"].allocator.holdout) == ("local", grid.TRACE_HOLDOUT)
    assert (runs["trace_global"].allocator.prefix_budget, runs["trace_global"].allocator.holdout) == ("global", 0)
    assert runs["trace_global"].allocator.name == runs["trace"].allocator.name == "trace"
    with pytest.raises(ValueError, match="trace_local"):
        dataclasses.replace(compare, allocators=("trace_local",))


def test_a_sweep_runs_every_arm_at_every_setting_and_arm_settings_tune_each_arm_apart():
    config = compare_multihop.get_config()
    config.compare.allocators = ("grpo", "trace")
    config.compare.sweep = dict(learner=dict(learning_rate=(1e-4, 1e-3), mini_batches=(1, 4)))
    compare, base = grid.split_config(config)
    compare = dataclasses.replace(compare, seeds=(0,))
    runs = grid.validate(base, compare)
    names = [v.name for v, _, _ in runs]
    assert names[:3] == ["grpo learning_rate=0.0001 mini_batches=1", "trace learning_rate=0.0001 mini_batches=1",
                         "grpo learning_rate=0.0001 mini_batches=4"]  # setting by setting
    assert len(names) == 8 and {grid.arm_of(n) for n in names} == {"grpo", "trace"}
    assert {(r.allocator.name, r.learner.learning_rate, r.learner.mini_batches) for _, _, r in runs} == {
        (a, lr, mb) for a in ("grpo", "trace") for lr in (1e-4, 1e-3) for mb in (1, 4)}
    config.compare.sweep = {}
    config.compare.arm_settings = dict(trace=dict(learner=dict(learning_rate=1e-3)))
    compare, base = grid.split_config(config)
    runs = {v.name: r for v, _, r in grid.validate(base, dataclasses.replace(compare, seeds=(0,)))}
    assert (runs["trace"].learner.learning_rate, runs["grpo"].learner.learning_rate) == (1e-3, 1e-4)
    config.compare.arm_settings = dict(pcl=dict(learner=dict(learning_rate=1e-3)))
    with pytest.raises(ConfigError, match="arm_settings for \\['pcl'\\]"):
        grid.split_config(config)
    config.compare.arm_settings = dict(trace=dict(learner=dict(learning_rte=1e-3)))
    compare, base = grid.split_config(config)
    with pytest.raises(ConfigError, match="'trace'.*learning_rte"):
        grid.validate(base, compare)


def test_a_study_names_its_own_arms_and_gets_exactly_them():
    arms = {"stage1_only": {"allocator": {"name": "trace", "prefixes": "none"}},
            "trace": {"allocator": {"name": "trace", "prefix_budget": "local", "prefix_cost": "rollouts"}}}
    compare = grid.CompareSection(allocators=("grpo", "stage1_only", "trace"), arms=arms)
    got = {v.name: v.overrides for v in grid.variants(compare)}
    assert got["stage1_only"] == {"allocator.name": "trace", "allocator.prefixes": "none"}
    assert got["trace"]["allocator.prefix_cost"] == "rollouts" and "allocator.holdout" not in got["trace"]
    base = grid.split_config(compare_multihop.get_config())[1]
    assert [n for n, _ in grid.mechanism_variants(base, compare)] == ["grpo", "stage1_only", "trace"]
    with pytest.raises(ValueError, match="stage_one"):
        grid.CompareSection(allocators=("stage_one",), arms=arms)
    with pytest.raises(ValueError, match="arms.stage1_only"):
        grid.CompareSection(allocators=("stage1_only",), arms={"stage1_only": {"allocator": "trace"}})
