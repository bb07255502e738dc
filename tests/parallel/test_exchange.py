"""The host exchange of multi-host runs: what a process sends for a turn (the StepResult and the episode's
state) survives the trip for every environment, and an episode restored from it continues exactly as the
one that ran the turn. (Two real processes: tests/parallel/test_multiprocess.py.)"""

import dataclasses
import hashlib
import itertools
import pickle

import numpy as np
import pytest

from tests.envs.test_datasets import FILE_SOURCES, _files
from trace_jax.envs import SOURCES
from trace_jax.envs.sources import build
from trace_jax.parallel import exchange


def test_one_process_gathers_its_own_value():
    assert exchange.all_gather({"a": 1}) == [{"a": 1}]


def _sources(tmp_path):
    out = {name: SOURCES[name](0, num_questions=60) for name in sorted(SOURCES)}
    files = _files(tmp_path)
    for name in FILE_SOURCES:
        if name == "bfcl_multi_turn":
            pytest.importorskip("bfcl_eval", reason="pip install --no-deps bfcl-eval==2026.3.23")
        out[name] = build(name, **files[name])
    return out


def _play(env, task, episode, policy, turns, seed, observation=None):
    """Up to `turns` oracle turns on `episode`; returns (results, last observation)."""
    rng = np.random.default_rng([seed, int(hashlib.sha256(task.id.encode()).hexdigest()[:8], 16)])
    results = []
    for _ in range(turns):
        if episode.done:
            break
        text = env.action_format.from_react(policy(task, episode, observation, rng), env)
        result = episode.step(text, num_tokens=len(text.split()))
        results.append(result)
        observation = result.observation
    return results, observation


def test_an_episode_restored_from_the_exchange_continues_as_the_one_that_ran(tmp_path):
    for name, source in _sources(tmp_path).items():
        env, policy = source.make_env(), source.oracle(0.3)  # mistakes too: error observations travel as well
        for task in [t for split in ("train", "test") for t in source.tasks(split)][:4]:
            ran = env.start(task)
            results, observation = _play(env, task, ran, policy, turns=1, seed=0)
            sent = pickle.loads(pickle.dumps((results[-1], ran.state())))
            assert sent[0] == results[-1], (name, task.id)
            received = dataclasses.replace(env.start(task), **sent[1])
            assert received.state().keys() == ran.state().keys()
            went_on, _ = _play(env, task, ran, policy, turns=20, seed=1, observation=observation)
            restored, _ = _play(env, task, received, policy, turns=20, seed=1, observation=observation)
            assert restored == went_on and received.history == ran.history, (name, task.id)
            assert (received.done, received.tool_calls, received.turns) == (ran.done, ran.tool_calls, ran.turns)


class _FakeStore:
    """The runtime client's key-value calls, with process 1's values already in it (or never, `silent`)."""

    def __init__(self, silent=False):
        self.values, self.silent, self.deleted = {}, silent, []

    def key_value_set_bytes(self, key, value):
        assert key not in self.values
        self.values[key] = value

    def blocking_key_value_get_bytes(self, key, timeout_ms):
        if self.silent:
            raise RuntimeError(f"DEADLINE_EXCEEDED: {key} after {timeout_ms} ms")
        return self.values.get(key) or pickle.dumps({"from": 1, "key": key})

    def key_value_delete(self, key):
        self.deleted.append(key)


@pytest.fixture
def two_processes(monkeypatch):
    from jax._src import distributed

    monkeypatch.setattr(exchange.jax, "process_count", lambda: 2)
    monkeypatch.setattr(exchange.jax, "process_index", lambda: 0)
    monkeypatch.setattr(exchange, "_previous_key", [])  # this test's exchanges only
    monkeypatch.setattr(exchange, "_sequence", itertools.count())

    def use(store):
        monkeypatch.setattr(distributed.global_state, "client", store)
        return store
    return use


def test_each_exchange_has_its_own_keys_and_the_last_but_one_is_deleted(two_processes):
    store = two_processes(_FakeStore())
    first = exchange.all_gather("a")
    second = exchange.all_gather("b")
    assert first[0] == "a" and second[0] == "b" and first[1]["key"] != second[1]["key"]
    assert pickle.loads(store.values[first[1]["key"][:-1] + "0"]) == "a"
    assert store.deleted == [first[1]["key"][:-1] + "0"]  # the first exchange's own key, once the second completed


def test_a_silent_peer_is_named(two_processes):
    two_processes(_FakeStore(silent=True))
    with pytest.raises(RuntimeError, match="process 1 did not send its host values .* within 7 s"):
        exchange.all_gather("a", timeout_s=7)
