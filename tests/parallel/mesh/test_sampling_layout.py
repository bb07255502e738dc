"""The sampling layout on 8 CPU devices: multi-turn rollouts with branching give the tokens of one device
(log-probs within 1e-5), rows, KV heads and params are laid out as `parallel/rules.py` says, and forks
place children on their parent's shard where the row bucket allows."""

import dataclasses

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from trace_jax.parallel.mesh import make_mesh
from trace_jax.parallel.rules import sampling_param_shardings, to_sampling_layout
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.sampling import SamplingParams

MESHES = [(8, 1, 1), (2, 2, 2), (1, 2, 4)]


def _grow_trees(world, params, seed=5):
    """Roots of 3 prompts, 2 branches each, then 2 more from every turn boundary: greedy, multi-turn."""
    greedy = SamplingParams(temperature=0.0, max_new_tokens=world.policy.sampling.max_new_tokens)
    policy = dataclasses.replace(world.policy, params=params, sampling=greedy)
    engine = RolloutEngine(policy, world.env, seed=seed)
    trees = engine.roots(world.source.tasks("train")[:3])
    engine.expand(trees, [(i, 0, 2) for i in range(3)])
    anchors = [(i, n.id, 2) for i, t in enumerate(trees) for n in t.nodes[1:] if not n.terminal]
    engine.expand(trees, anchors)
    return engine, trees, anchors


def _nodes(trees):
    """Per tree, each node's path of turns (tokens) -> its log-probs: node ids follow the order in which rows
    finished, which a mesh may change (forks go to their parent's shard), so nodes are keyed by their path."""
    return [sorted(((tuple(tuple(m.tokens) for m in t.path(n.id)[1:]), np.asarray(n.logprobs)) for n in t.nodes[1:]),
                   key=lambda x: x[0]) for t in trees]


@pytest.fixture(scope="module")
def one_device(tiny_setup):
    return _grow_trees(tiny_setup, tiny_setup.policy.params)


@pytest.mark.parametrize("shape", MESHES)
def test_rollouts_on_a_mesh_match_one_device(tiny_setup, one_device, shape):
    assert jax.device_count() >= 8
    _, reference, anchors = one_device
    assert anchors, "the test needs turn boundaries to branch from"
    mesh = make_mesh(*shape)
    engine, trees, _ = _grow_trees(tiny_setup, to_sampling_layout(tiny_setup.policy.params, mesh))
    got, want = _nodes(trees), _nodes(reference)
    assert [[path for path, _ in g] for g in got] == [[path for path, _ in w] for w in want]
    for g, w in zip(got, want):
        for (_, logprobs_got), (_, logprobs_want) in zip(g, w):
            np.testing.assert_allclose(logprobs_got, logprobs_want, atol=1e-5, rtol=0)
    state = engine.prefixes.states[max(engine.prefixes.states)]
    data, fsdp, tensor = shape
    k = state.cache.k[0]  # [B, K, H, T]: rows over data x fsdp; the tiny model's 2 KV heads over tensor when it divides
    heads_split = tensor > 1 and 2 % tensor == 0  # else the KV heads are replicated over tensor
    assert {s.data.shape[:2] for s in k.addressable_shards} == {(k.shape[0] // (data * fsdp), 1 if heads_split else 2)}


@pytest.mark.parametrize("keep_prefixes", [True, False], ids=["archived", "prefilled-again"])
def test_continuous_batching_on_a_mesh_matches_one_device(tiny_setup, keep_prefixes):
    """Slots refilled, archived (or dropped and their prefixes prefilled again in waves) and compacted on a
    (2, 2, 2) mesh: greedy, the synchronous loop's trees on one device."""
    from tests.rollout.sync_reference import TurnSynchronousEngine
    from tests.rollout.test_continuous import grow, leaf_paths
    from trace_jax.rollout.continuous import Batching

    _, want, _ = grow(tiny_setup, Batching(), temperature=0.0, engine_class=TurnSynchronousEngine)
    params = to_sampling_layout(tiny_setup.policy.params, make_mesh(2, 2, 2))
    engine, got, _ = grow(tiny_setup, Batching(chunk=3, slots=8, keep_prefixes=keep_prefixes), temperature=0.0,
                          params=params)
    assert leaf_paths(got) == leaf_paths(want)
    assert (engine.ledger.tokens_reprefilled > 0) == (not keep_prefixes)


def test_sampling_params_are_tensor_parallel_and_replicated_over_the_batch_axes(tiny_setup):
    mesh = make_mesh(2, 2, 2)
    params = tiny_setup.policy.params
    placed = to_sampling_layout(params, mesh)
    up = placed["layers"]["mlp"]["up_proj"]["kernel"]  # [L, D, F]: F over tensor, D whole (not over fsdp)
    assert {s.data.shape for s in up.addressable_shards} == {(up.shape[0], up.shape[1], up.shape[2] // 2)}
    gathered = sampling_param_shardings(params, mesh, gather_fsdp=True)["layers"]["mlp"]["up_proj"]["kernel"]
    assert gathered.spec == P(None, "fsdp", "tensor")
    assert to_sampling_layout(params, None) is params


def test_forks_cross_shards_only_where_the_bucket_is_full(tiny_setup):
    engine, trees, _ = _grow_trees(tiny_setup, to_sampling_layout(tiny_setup.policy.params, make_mesh(8, 1, 1)))
    assert engine.counters.cross_shard_rows > 0  # 3 roots on 8 shards: 6 children cannot all stay on shards 0-2
    reference, _, _ = _grow_trees(tiny_setup, tiny_setup.policy.params)
    assert reference.counters.cross_shard_rows == 0


def _random_state(mesh, rows, seed=0):
    from trace_jax.models.presets import get_preset
    from trace_jax.sampling.state import empty_state, map_fields

    config = get_preset("tiny")
    state = empty_state(config, rows, 64, mesh)
    rng = np.random.default_rng(seed)
    return map_fields(lambda _, x: jax.device_put(rng.integers(0, 100, x.shape).astype(x.dtype), x.sharding), state)


@pytest.mark.parametrize("shape", MESHES)
def test_gather_with_the_cross_shard_exchange_equals_a_plain_take(shape):
    from trace_jax.sampling.fork import gather_rows

    mesh = make_mesh(*shape)
    state = _random_state(mesh, 16)
    source = np.random.default_rng(1).integers(0, 16, 24 if shape[0] * shape[1] != 8 else 32)
    got = gather_rows(state, source)
    want = jax.tree.map(lambda x: np.asarray(x)[source], state)
    jax.tree.map(lambda g, w: np.testing.assert_array_equal(np.asarray(g), w), got, want)
    assert got.cache.k[0].sharding.spec[0] is not None  # still row-sharded


def test_concat_is_shard_local_and_merged_rows_are_where_it_says():
    from trace_jax.sampling.fork import _concat, concat_states, merged_row
    from trace_jax.sampling.state import grow

    mesh = make_mesh(8, 1, 1)
    a, b = _random_state(mesh, 8, seed=2), grow(_random_state(mesh, 16, seed=3), 128)
    merged, offsets = concat_states([a, b])
    assert merged.batch_size == 32 and merged.capacity == 128
    for k, s in enumerate([a, b]):
        tokens = np.asarray(s.tokens)
        for r in range(s.batch_size):
            m = merged_row(offsets[k], r, s.batch_size, merged.batch_size, mesh)
            np.testing.assert_array_equal(np.asarray(merged.tokens[m])[: 64], tokens[r][: 64])
    hlo = _concat.lower([grow(a, 128), b], mesh, 8, 4).compile().as_text()
    assert "all-gather" not in hlo and "all-to-all" not in hlo and "collective-permute" not in hlo


def test_fork_plan_keeps_children_home_as_far_as_the_bucket_allows():
    import itertools

    from trace_jax.sampling.fork import plan_fork

    mesh = make_mesh(4, 1, 1)  # 4 row shards
    rng = np.random.default_rng(0)
    for _ in range(30):
        n, source_rows = int(rng.integers(1, 9)), 8
        parents = rng.integers(0, source_rows, n)
        plan = plan_fork(parents, source_rows, mesh)
        bucket = len(plan.source)
        assert sorted(plan.rows) == sorted(set(plan.rows)) and plan.active.sum() == n
        np.testing.assert_array_equal(plan.source[plan.rows], parents)
        home, per_target = parents // (source_rows // 4), bucket // 4
        best = min(sum(r // per_target != h for r, h in zip(rows, home))
                   for rows in itertools.permutations(range(bucket), n))  # brute force over all placements
        assert plan.cross_shard == best
    one = plan_fork([3, 1, 1], 4, None)
    assert one.rows.tolist() == [0, 1, 2] and one.cross_shard == 0 and one.source.tolist() == [3, 1, 1, 0]
