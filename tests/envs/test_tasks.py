"""Synthetic task sources: determinism, disjoint splits, oracle success, retrieval quality, limits."""

import numpy as np
import pytest

from trace_jax.envs import SOURCES, Limits
from trace_jax.envs.oracle import run_episode
from trace_jax.envs.splits import SPLITS

SMALL = {"multihop": dict(num_questions=300), "math": dict(num_questions=300), "funcall": dict(num_questions=300)}


@pytest.fixture(scope="module", params=sorted(SOURCES))
def source(request):
    return SOURCES[request.param](0, **SMALL[request.param])


def test_same_seed_same_tasks_and_trajectories(source):
    again = type(source)(0, **SMALL[source.name])
    for split in SPLITS:
        assert [(t.id, t.question, t.answers) for t in source.tasks(split)] == \
               [(t.id, t.question, t.answers) for t in again.tasks(split)]
    task = source.tasks("train")[3]
    one = run_episode(source.make_env(), task, source.oracle(0.3), seed=5)
    two = run_episode(again.make_env(), task, again.oracle(0.3), seed=5)
    assert one.turns == two.turns and one.reward == two.reward


def test_other_seed_other_tasks(source):
    other = type(source)(1, **SMALL[source.name])
    assert [t.question for t in source.tasks("train")[:20]] != [t.question for t in other.tasks("train")[:20]]


def test_splits_never_share_questions(source):
    questions = {split: {t.question for t in source.tasks(split)} for split in SPLITS}
    assert all(questions.values())
    assert not questions["train"] & questions["validation"]
    assert not questions["train"] & questions["test"]
    assert not questions["validation"] & questions["test"]
    with pytest.raises(ValueError, match="unknown split"):
        source.tasks("dev")


def _success_by_difficulty(source, rate, tasks):
    env, oracle, out = source.make_env(), source.oracle(rate), {}
    for task in tasks:
        out.setdefault(task.difficulty, []).append(run_episode(env, task, oracle, seed=0).success)
    return {d: float(np.mean(v)) for d, v in out.items()}


def test_oracle_solves_everything_without_mistakes(source):
    tasks = source.tasks("train")[:120]
    assert set(_success_by_difficulty(source, 0.0, tasks).values()) == {1.0}


def test_oracle_with_mistakes_fails_more_on_hard_tasks(source):
    tasks = source.tasks("train")[:240]
    rates = _success_by_difficulty(source, 0.3, tasks)
    levels = sorted(rates)
    assert np.mean(list(rates.values())) < 0.95
    assert rates[levels[-1]] < rates[levels[0]]


def test_turn_limit_ends_with_zero_reward(source):
    env = source.make_env(Limits(max_turns=2))
    episode = env.start(source.tasks("train")[0])
    assert not episode.step("Action: nonsense").done
    result = episode.step("Thought: still thinking")
    assert result.done and result.reward == 0.0 and result.info["limit"] == "turn"
    with pytest.raises(RuntimeError, match="already done"):
        episode.step("Action: finish[x]")


def test_token_limit_ends_with_zero_reward(source):
    env = source.make_env(Limits(max_tokens=10))
    result = env.start(source.tasks("train")[0]).step("Thought: long", num_tokens=11)
    assert result.done and result.reward == 0.0 and result.info["limit"] == "token"


def test_malformed_actions_become_error_observations(source):
    env = source.make_env()
    episode = env.start(source.tasks("train")[0])
    for text in ["", "Action: search[", "Action: teleport[x]", "\udcff\x00garbage", "Action: call[{bad json]",
                 "Action: calculate[__import__('os')]", "x" * 10000]:
        result = episode.step(text)
        assert not result.done and "Error" in result.observation, (text[:30], result.observation)


def test_bm25_finds_each_entitys_document_in_top3():
    source = SOURCES["multihop"](0, **SMALL["multihop"])
    docs = source.world.documents
    hits = []
    for name in source.world.entities:
        ranked = [docs[i].id for i, _ in source.index.retrieve(name, k=3)]
        hits.append(any(doc_id.split("#")[0] == name for doc_id in ranked))
    assert np.mean(hits) >= 0.95, np.mean(hits)


def test_multihop_questions_cover_one_to_four_hops():
    source = SOURCES["multihop"](0, **SMALL["multihop"])
    assert {t.difficulty for t in source.tasks("train")} == {1, 2, 3, 4}
    task = next(t for t in source.tasks("train") if t.difficulty == 3)
    env = source.make_env()
    assert env.start(task).step(f"Action: finish[{task.answers[0].upper()}.]").reward == 1.0
    assert env.start(task).step("Action: finish[somebody else]").reward == 0.0


def test_funcall_reward_needs_the_calls_not_just_the_answer():
    source = SOURCES["funcall"](0, **SMALL["funcall"])
    task = next(t for t in source.tasks("train") if t.difficulty == 2)
    result = source.make_env().start(task).step(f"Action: finish[{task.answers[0]}]")
    assert result.reward == 0.0 and result.info["answer_correct"] == 1.0 and result.info["call_recall"] == 0.0


def test_math_difficulty_one_gives_one_operation_problems_and_zero_is_refused():
    tasks = SOURCES["math"](0, num_questions=50, max_steps=1).tasks("train")
    assert tasks and {t.difficulty for t in tasks} == {1}
    with pytest.raises(ValueError, match="at least 1 operation"):
        SOURCES["math"](0, num_questions=5, max_steps=0)
