"""The mechanism studies' config (studies/mechanism/config.py): each task's comparison pool as it is, or its
mixed-difficulty version (a warm start on the pool's easy part), refused by name where none is defined."""

import importlib

import pytest

from trace_jax.config.schema import ConfigError

mechanism = importlib.import_module("studies.mechanism.config")


def test_the_mixed_difficulty_pools_warm_start_on_their_easy_part():
    mixed = mechanism.get_config("task=multihop,mixed")
    assert (mixed.task.max_difficulty, mixed.sft.max_difficulty) == (4, 2)
    assert mechanism.get_config("task=multihop").task.max_difficulty == 2
    mixed = mechanism.get_config("task=math,mixed")
    assert (mixed.task.source, mixed.task.max_difficulty, mixed.sft.max_difficulty) == ("math", 5, 3)
    assert mechanism.get_config("task=math").task.max_difficulty == 3
    with pytest.raises(ConfigError, match=r"sources \['math', 'multihop'\], not 'funcall'"):
        mechanism.get_config("task=funcall,mixed")
    with pytest.raises(ConfigError, match="task= one of"):
        mechanism.get_config("mixed")
