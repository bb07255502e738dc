"""The continuous scheduler grows the same trees as the turn-synchronous reference (`sync_reference.py`), token
for token, at every chunk size, in fewer slot-steps."""

import dataclasses

import numpy as np
import pytest

from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.rollout.continuous import Batching
from trace_jax.sampling.state import length_bucket
from tests.rollout.sync_reference import TurnSynchronousEngine

STOPS = tuple(range(40, 100))  # ~12% of the tiny vocabulary ends a turn: turns of mixed lengths


def _policy(tiny_setup, batching: Batching, temperature: float, params=None, pages=None):
    policy = tiny_setup.policy
    sampling = dataclasses.replace(policy.sampling, temperature=temperature, max_new_tokens=24, stop_ids=STOPS)
    return dataclasses.replace(policy, sampling=sampling, batching=batching,
                               params=policy.params if params is None else params, pages=pages)


def _paths(tree, node_id):
    return tuple(tuple(n.tokens) for n in tree.path(node_id)[1:])


def grow(tiny_setup, batching: Batching, temperature: float = 1.0, params=None, engine_class=RolloutEngine,
         pages=None):
    """Stage 1 (3 prompts, 2-3 rollouts each), then stage 2 from every turn boundary (2 each), anchors in a
    canonical order (node ids depend on the order in which rows finished)."""
    engine = engine_class(_policy(tiny_setup, batching, temperature, params, pages), tiny_setup.env, seed=11)
    trees = engine.roots(tiny_setup.source.tasks("train")[:3])
    engine.expand(trees, [(0, 0, 3), (1, 0, 2), (2, 0, 3)])
    boundaries = sorted(((i, _paths(t, n.id), n.id) for i, t in enumerate(trees) for n in t.nodes[1:]
                         if t.is_anchor(n.id)))
    engine.expand(trees, [(i, node_id, 2) for i, _, node_id in boundaries])
    return engine, trees, len(boundaries)


def leaf_paths(trees):
    """Per tree, every leaf's turns, reward and origin path, canonically ordered (log-probs left out)."""
    return [[(p, r, o) for p, _, r, o in t] for t in _leaves(trees)]


def _leaves(trees):
    """Per tree: every leaf's path of turns (tokens, log-probs), reward and origin path, in canonical order."""
    out = []
    for tree in trees:
        leaves = []
        for leaf in tree.leaves():
            path = tree.path(leaf.id)[1:]
            leaves.append((tuple(tuple(n.tokens) for n in path), [n.logprobs for n in path], leaf.reward,
                           _paths(tree, leaf.origin)))
        out.append(sorted(leaves, key=lambda x: (x[0], x[3])))
    return out


@pytest.fixture(scope="module")
def synchronous(tiny_setup):
    return grow(tiny_setup, Batching(), engine_class=TurnSynchronousEngine)


@pytest.mark.parametrize("batching", [pytest.param(Batching(chunk=3, slots=4, overlap_tools=True), marks=pytest.mark.slow),
                                      pytest.param(Batching(chunk=3, slots=4), marks=pytest.mark.slow), Batching()],
                         ids=["tools-overlap-decode", "tools-between-chunks", "whole-turns"])
def test_the_scheduler_samples_the_synchronous_loops_trajectories(tiny_setup, synchronous, batching):
    """Same row ids and per-turn token positions: with the same seed both loops draw the same tokens.
    4 slots for 8 (then 32) branches: slots are refilled, and stage 2 forks from archived rows. With the
    tools overlapping decode, rows rejoin a chunk later: the schedule changes, the trajectories do not. The
    default (whole turns, a slot per branch) is the synchronous schedule itself, with its tail gathered."""
    engine_sync, want_trees, anchors = synchronous
    assert anchors >= 3, "the test needs turn boundaries to branch from"
    engine, trees, _ = grow(tiny_setup, batching)
    got, want = _leaves(trees), _leaves(want_trees)
    assert leaf_paths(trees) == leaf_paths(want_trees)
    for tree_got, tree_want in zip(got, want):
        for (_, lp_got, _, _), (_, lp_want, _, _) in zip(tree_got, tree_want):
            for a, b in zip(lp_got, lp_want):
                np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    assert engine.ledger == engine_sync.ledger
    for tree, tree_sync in zip(trees, want_trees):  # every anchor's prefix is where the engine says it is
        for node in tree.nodes:
            if tree.is_anchor(node.id):
                ref = engine.prefix_of(tree, node.id)
                row = np.asarray(engine.prefixes.states[ref.state].tokens[ref.row, :ref.length])
                assert row.tolist() == tree.context(node.id)
    longest = max(len(t.context(leaf.parent)) + len(leaf.tokens) for t in trees for leaf in t.leaves())
    for state in engine.prefixes.states.values():  # the sizes experiments/dry_run.py plans memory with
        assert length_bucket(state.capacity) == state.capacity <= length_bucket(longest + 24), state.capacity
    lengths = {len(n.tokens) for t in want_trees for n in t.nodes[1:]}
    assert len(lengths) > 3, f"turns of mixed lengths expected, got {lengths}"
    assert engine.counters.decode_tokens == engine_sync.counters.decode_tokens
    utilisation = engine.counters.decode_tokens / engine.counters.decode_slot_steps
    print(f"slot utilisation {utilisation:.3f} against {engine_sync.counters.decode_tokens / engine_sync.counters.decode_slot_steps:.3f}")
    if batching.chunk:
        assert utilisation > 1.5 * engine_sync.counters.decode_tokens / engine_sync.counters.decode_slot_steps
    else:
        assert utilisation >= engine_sync.counters.decode_tokens / engine_sync.counters.decode_slot_steps


@pytest.mark.slow
def test_greedy_trajectories_are_identical(tiny_setup):
    _, want, _ = grow(tiny_setup, Batching(), temperature=0.0, engine_class=TurnSynchronousEngine)
    _, got, _ = grow(tiny_setup, Batching(chunk=3, slots=4), temperature=0.0)
    assert leaf_paths(got) == leaf_paths(want)


@pytest.mark.parametrize("batching", [Batching(keep_prefixes=False),
                                      pytest.param(Batching(chunk=3, slots=4, keep_prefixes=False), marks=pytest.mark.slow)],
                         ids=["whole-turns", "chunks-of-3-in-4-slots"])
def test_dropped_prefixes_are_prefilled_again_in_waves_with_the_same_trajectories(tiny_setup, synchronous, batching,
                                                                                   monkeypatch):
    """keep_prefixes=False: no state outlives the call that made it; stage 1 prefills its prompts and stage 2
    its anchors' prefixes again, at most `slots` at a time, counted in the ledger, and samples what the kept
    rows would have."""
    from trace_jax.rollout import agent_loop

    engine_kept, want_trees, anchors = synchronous
    prefilled = []
    real_start = agent_loop.start
    monkeypatch.setattr(agent_loop, "start", lambda *a, **k: prefilled.append(len(a[2])) or real_start(*a, **k))
    engine, trees, _ = grow(tiny_setup, batching)
    assert leaf_paths(trees) == leaf_paths(want_trees)
    for tree_got, tree_want in zip(_leaves(trees), _leaves(want_trees)):
        for (_, lp_got, _, _), (_, lp_want, _, _) in zip(tree_got, tree_want):
            for a, b in zip(lp_got, lp_want):
                np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
    contexts = sum(len(t.context(n.id)) for t in trees for n in t.nodes if t.is_anchor(n.id) and n.expanded)
    assert engine.ledger.tokens_reprefilled == contexts > sum(len(t.root.tokens) for t in trees)
    assert engine.ledger.tokens_prefilled == engine_kept.ledger.tokens_prefilled + contexts
    assert dataclasses.replace(engine.ledger, tokens_prefilled=0, tokens_reprefilled=0) == dataclasses.replace(
        engine_kept.ledger, tokens_prefilled=0)
    assert engine.prefixes.states == {}, "no sampler state outlives the call that made it"
    waves = prefilled[1:]  # prefilled[0]: the prompts (`roots`); then stage 1's 3 roots, then stage 2's anchors
    assert waves[0] == 3 and sum(waves[1:]) == anchors
    if batching.slots:
        assert max(waves) <= batching.slots and len(waves) == 1 + -(-anchors // batching.slots)
    else:
        assert waves == [3, anchors]


def test_prompts_are_prefilled_in_waves_when_no_state_is_kept(tiny_setup, monkeypatch):
    """keep_prefixes=False with 2 slots: 3 prompts prefilled as 2 + 1 rows, the same roots' features."""
    from trace_jax.rollout import agent_loop

    tasks = tiny_setup.source.tasks("train")[:3]
    want = RolloutEngine(_policy(tiny_setup, Batching(), 1.0), tiny_setup.env, seed=0).roots(tasks)  # kept
    prefilled = []
    real_start = agent_loop.start
    monkeypatch.setattr(agent_loop, "start", lambda *a, **k: prefilled.append(len(a[2])) or real_start(*a, **k))
    engine = RolloutEngine(_policy(tiny_setup, Batching(chunk=3, slots=2, keep_prefixes=False), 1.0), tiny_setup.env,
                           seed=0)
    got = engine.roots(tasks)
    assert prefilled == [2, 1] and engine.prefixes.states == {}
    for g, w in zip(got, want):
        assert g.root.prefix_length == w.root.prefix_length
        np.testing.assert_allclose(g.root.hidden, w.root.hidden, atol=1e-5)
        np.testing.assert_allclose(g.root.prompt_mean, w.root.prompt_mean, atol=1e-5)


def test_bad_batching_is_refused():
    with pytest.raises(ValueError, match="must be >= 0"):
        Batching(chunk=-1)
    with pytest.raises(ValueError, match="must be >= 0"):
        Batching(slots=-4)


@pytest.mark.parametrize("batching", [Batching(), Batching(chunk=3, slots=4), Batching(chunk=3, slots=4, keep_prefixes=False)],
                         ids=["whole-turns", "chunks-of-3-in-4-slots", "dropped-prefixes"])
def test_on_kv_pages_the_scheduler_samples_the_dense_synchronous_trajectories(tiny_setup, synchronous, batching):
    """The same schedules with every row's KV in a page pool (`sampling/paged.py`): forks share prefix pages,
    archiving and gathering rows copy none. Same tokens as the dense reference, log-probs within 1e-5, and
    every page free again once the engine (its prefix table) is gone."""
    import gc

    from trace_jax.sampling.paged import PagePool
    engine_sync, want_trees, _ = synchronous
    pool = PagePool(tiny_setup.policy.config, page_size=8, num_pages=16)  # small: it grows on demand
    engine, trees, _ = grow(tiny_setup, batching, pages=pool)
    assert leaf_paths(trees) == leaf_paths(want_trees)
    for tree_got, tree_want in zip(_leaves(trees), _leaves(want_trees)):
        for (_, lp_got, _, _), (_, lp_want, _, _) in zip(tree_got, tree_want):
            for a, b in zip(lp_got, lp_want):
                np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    prefill = dict(tokens_prefilled=0, tokens_reprefilled=0) if not batching.keep_prefixes else {}
    assert dataclasses.replace(engine.ledger, **prefill) == dataclasses.replace(engine_sync.ledger, **prefill)
    for tree in trees:
        for node in tree.nodes:
            if tree.is_anchor(node.id) and not engine.prefixes.dropped(tree, node.id):
                ref = engine.prefix_of(tree, node.id)
                row = np.asarray(engine.prefixes.states[ref.state].tokens[ref.row, :ref.length])
                assert row.tolist() == tree.context(node.id)
    states = list(engine.prefixes.states.values())
    pool.book.check([p for s in states for p in s.pages])
    assert (pool.book.held > 0) == batching.keep_prefixes and pool.book.num_pages > 16
    del engine, states
    gc.collect()
    assert pool.book.held == 0 and (pool.book.refs == 0).all()
