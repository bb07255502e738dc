"""Eval sets: the separate generator's tasks are new, numerous, deterministic and run in their own
worlds; grouped evaluation equals evaluating each group alone; bad requests are named."""

import dataclasses

import numpy as np
import pytest

from trace_jax.envs import SOURCES, Limits
from trace_jax.envs.eval_sets import EVAL_WORLD_SEED, flat_tasks, separate_eval_set, split_eval_set
from trace_jax.envs.oracle import run_episode
from trace_jax.envs.splits import SPLITS

SMALL = {"multihop": dict(num_questions=120), "math": dict(num_questions=120), "funcall": dict(num_questions=120)}


def _world(name):
    def make(seed):
        source = SOURCES[name](seed, **SMALL[name])
        return source, source.make_env(Limits(max_turns=10))
    return make


@pytest.fixture(scope="module", params=sorted(SOURCES))
def name(request):
    return request.param


def test_separate_tasks_are_new_deterministic_and_as_many_as_asked(name):
    train_source, _ = _world(name)(0)
    groups = separate_eval_set(_world(name), train_source, 200, seed=0)
    tasks = flat_tasks(groups)
    assert len(tasks) == 200 and len({t.id for t in tasks}) == 200
    held = {(t.question, t.answers) for split in SPLITS for t in train_source.tasks(split)}
    assert not {(t.question, t.answers) for t in tasks} & held
    assert [t.id for t in flat_tasks(separate_eval_set(_world(name), train_source, 200, seed=0))] == \
        [t.id for t in tasks]
    assert {t.question for t in flat_tasks(separate_eval_set(_world(name), train_source, 200, seed=1))} != \
        {t.question for t in tasks}
    assert all(t.split == "test" for t in tasks)
    assert len(train_source.tasks("train")) == len(_world(name)(0)[0].tasks("train"))  # training set unchanged


def test_each_group_runs_in_its_own_world(name):
    """The oracle of each eval world solves that world's tasks in the group's environment."""
    train_source, _ = _world(name)(0)
    groups = separate_eval_set(_world(name), train_source, 150, seed=0)
    for group in groups:
        assert group.source.make_env  # the world that made the tasks
        for task in group.tasks[:6]:
            assert run_episode(group.env, task, group.source.oracle(0.0)).success, task


def test_world_bound_tasks_fail_in_the_training_world():
    """A multi-hop question about an eval world cannot be answered from the training corpus."""
    train_source, train_env = _world("multihop")(0)
    group = separate_eval_set(_world("multihop"), train_source, 30, seed=0)[0]
    assert group.source.seed == EVAL_WORLD_SEED
    in_own = [run_episode(group.env, t, group.source.oracle(0.0)).success for t in group.tasks]
    in_train = [run_episode(train_env, t, group.source.oracle(0.0)).success for t in group.tasks]
    assert all(in_own) and np.mean(in_train) < 0.5


def test_too_many_asked_is_named():
    train_source, _ = _world("funcall")(0)
    with pytest.raises(ValueError, match=r"eval worlds hold only \d+ new tasks, fewer than the 100000 asked"):
        separate_eval_set(_world("funcall"), train_source, 100_000, seed=0)
    with pytest.raises(ValueError, match="positive number of tasks"):
        separate_eval_set(_world("funcall"), train_source, 0, seed=0)


def test_split_eval_set_is_the_split():
    source, env = _world("math")(0)
    group, = split_eval_set(source, env, "test", 5)
    assert group.tasks == tuple(source.tasks("test")[:5]) and group.env is env
    assert split_eval_set(source, env, "validation", 0)[0].tasks == tuple(source.tasks("validation"))
    heldout = split_eval_set(source, env, "heldout", 0)[0].tasks  # every question RL never trains on, test first
    assert heldout == tuple(source.tasks("test") + source.tasks("validation"))
    assert not {t.id for t in heldout} & {t.id for t in source.tasks("train")}


@pytest.mark.slow
def test_grouped_outcomes_equal_each_group_alone(tiny_setup):
    from trace_jax.run.evaluation import grouped_outcomes, task_outcomes
    source = tiny_setup.source
    make = lambda seed: (type(source)(seed, num_questions=40), tiny_setup.env)  # noqa: E731
    groups = separate_eval_set(make, source, 50, seed=0)
    groups = [dataclasses.replace(g, env=g.source.make_env()) for g in groups]
    policy = tiny_setup.policy
    both = grouped_outcomes(policy, groups, greedy=False, k=2, seed=7, limit=45)
    first = task_outcomes(policy, groups[0].env, groups[0].tasks, greedy=False, k=2, seed=7)
    n = len(groups[0].tasks)
    second = task_outcomes(policy, groups[1].env, groups[1].tasks[:45 - n], greedy=False, k=2, seed=7 + n)
    assert len(both.task_ids) == 45 and both.task_ids == first.task_ids + second.task_ids
    assert both.successes == first.successes + second.successes
