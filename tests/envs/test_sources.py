"""The task-source registry (envs/sources.py): each source's config class is the task section, a field of
another source is refused by name, configs switch sources with `use_source`, and the task settings list the
source's own fields."""

import dataclasses

import pytest

from configs import compare_funcall, quickstart
from trace_jax.compare import grid
from trace_jax.config import schema
from trace_jax.config.files import default_config, from_config_dict, use_source
from trace_jax.config.schema import ConfigError
from trace_jax.envs.sources import TASK_SOURCES, MultiHopTaskConfig, SearchDatasetConfig, SyntheticTaskConfig, build
from trace_jax.envs.tasks.multihop import MultiHopEnv


def test_the_chosen_source_owns_the_task_section():
    run = from_config_dict(default_config())
    assert type(run.task) is MultiHopTaskConfig and run.task.search_top_k == 2
    c = default_config()
    c.task.source = "math"
    run = from_config_dict(c)
    assert type(run.task) is SyntheticTaskConfig and not hasattr(run.task, "search_top_k")
    assert {f.name for f in dataclasses.fields(TASK_SOURCES.entry("hotpotqa").config)} >= {"corpus_path", "f1_success"}
    assert TASK_SOURCES.entry("hotpotqa").config is SearchDatasetConfig


def test_a_field_of_another_source_is_refused_by_name_once_it_is_set():
    c = default_config()
    c.task.update(source="math", search_top_k=5)
    with pytest.raises(ConfigError, match=r"'task\.search_top_k'=5 applies to \['hotpotqa', 'multihop', 'search_r1'\], "
                                          r"not to task source 'math'"):
        from_config_dict(c)
    c = default_config()
    c.task.update(source="math", search_top_k=2)  # another source's default: dropped, not an error
    assert from_config_dict(c).task.source == "math"
    c.task.source = "chess"
    with pytest.raises(ConfigError, match=r"'task\.source': unknown task source 'chess'"):
        from_config_dict(c)


def test_use_source_resets_what_the_new_source_does_not_have():
    c = quickstart.get_config()
    c.task.update(num_questions=300, max_difficulty=4)
    use_source(c, "gsm8k", train_path="/data/train.jsonl", max_turns=10)
    assert (c.task.source, c.task.train_path, c.task.max_turns) == ("gsm8k", "/data/train.jsonl", 10)
    assert (c.task.num_questions, c.task.max_difficulty) == (2000, 2)
    assert schema.parse(c).task.train_path == "/data/train.jsonl"


def test_the_task_settings_list_exactly_the_sources_own_fields():
    """Identity schema 2: the task section lists its source's config fields, no other source's (schema 1 listed
    the union of every source's; studies/migrations/identity_v2.py moved the stored runs)."""
    for config in (default_config(), grid.split_config(compare_funcall.get_config())[1]):
        run = from_config_dict(config)
        fields = {f"task.{f.name}" for f in dataclasses.fields(TASK_SOURCES.entry(run.task.source).config)}
        assert set(schema.settings(run, ("task",))) == fields
    funcall = from_config_dict(grid.split_config(compare_funcall.get_config())[1])
    assert "task.search_top_k" not in schema.settings(funcall, ("task",))


def test_sources_are_built_from_their_config_alone():
    multihop = build("multihop", num_questions=60, search_top_k=1, search_words=5, f1_success=0.3)
    assert (multihop.index.top_k, multihop.index.max_words) == (1, 5)
    env = multihop.make_env()
    assert isinstance(env, MultiHopEnv) and env.f1_success == 0.3
    every = build("funcall", num_questions=200, max_difficulty=0)
    capped = build("funcall", num_questions=200, max_difficulty=2)
    tasks = lambda s: [t for split in ("train", "validation", "test") for t in s.tasks(split)]  # noqa: E731
    assert max(t.difficulty for t in tasks(every)) > 2 and max(t.difficulty for t in tasks(capped)) <= 2
    assert len(tasks(capped)) == 200
    with pytest.raises(ValueError, match="max_calls must be >= 0"):
        build("funcall", num_questions=10, max_difficulty=-1)


def test_the_multihop_world_scales_its_entities_and_refuses_a_bad_scale():
    """task.world_scale multiplies every entity kind (a test split large enough for a >= 2000-task endpoint needs
    about 5x); scale 1 is the default world."""
    small, large = build("multihop", num_questions=40), build("multihop", num_questions=40, world_scale=3)
    for kind, names in small.world.originals.items():
        assert len(large.world.originals[kind]) == 3 * len(names)
    c = default_config()
    c.task.world_scale = 3
    assert schema.settings(from_config_dict(c), ("task",))["task.world_scale"] == 3
    for bad in (0, 2.0, True, 51):
        raw = default_config().to_dict()
        raw["task"]["world_scale"] = bad
        with pytest.raises(ConfigError, match="world_scale"):
            from_config_dict(raw)
