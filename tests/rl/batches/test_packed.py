"""The packed tree layout equals the per-path layout: on random trees (depth 1-4, branching 1-4, observations
between turns, several trees per row) the same per-token log-probs, loss and gradients; on chains (GRPO's
single rollouts) packing changes nothing but padding; the attention rule and the layout itself."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax.models import init_params
from trace_jax.models.attention import CausalMask
from trace_jax.models.presets import get_preset
from trace_jax.rl import learner, updates
from trace_jax.rl.batches import packed as packed_layout, paths as paths_layout
from trace_jax.rl.advantages import AdvantageConfig, Sequence, estimate
from trace_jax.rl.losses import LossConfig
from trace_jax.rollout.tree import RolloutTree

VOCAB = 64


def _random_tree(rng, depth: int, branching: int) -> RolloutTree:
    tree = RolloutTree(task=None, prompt=rng.integers(1, VOCAB, rng.integers(3, 9)).tolist())
    frontier = [0]
    for level in range(depth):
        below = []
        for parent in frontier:
            for _ in range(int(rng.integers(1, branching + 1))):
                n = int(rng.integers(1, 6))
                node = tree.add(parent, tokens=rng.integers(1, VOCAB, n).tolist(),
                                logprobs=(-rng.random(n) * 3).tolist(), entropy=[0.0] * n)
                if level < depth - 1 and rng.random() < 0.8:  # an observation between turns
                    node.observation = rng.integers(1, VOCAB, rng.integers(1, 5)).tolist()
                below.append(node.id)
        frontier = below
    for leaf in frontier:
        node = tree.nodes[leaf]
        node.terminal, node.success = True, bool(rng.random() < 0.5)
        node.reward = float(node.success)
    return tree


def _trees(seed: int, count: int = 3):
    rng = np.random.default_rng(seed)
    return [_random_tree(rng, int(rng.integers(1, 5)), int(rng.integers(1, 5))) for _ in range(count)]


@pytest.fixture(scope="module")
def model():
    config = get_preset("tiny")
    config = config.replace(vocab_size=max(config.vocab_size, VOCAB))
    return config, init_params(config, 0)


def _per_token(model, batch, packed: bool):
    """{(row entry key): log-prob} keyed by what each trained target is, for comparing the layouts."""
    config, params = model
    from trace_jax.rl.logprobs import packed_logprobs, sequence_logprobs

    flat = {k: jnp.asarray(v.reshape(-1, v.shape[-1])) for k, v in batch.items()}
    if packed:
        logp, _ = packed_logprobs(config, params, flat, 1.0)
    else:
        logp, _ = sequence_logprobs(config, params, flat["tokens"], flat["valid"], flat["targets"], 1.0)
    mask = np.asarray(flat["mask"])
    return np.sort(np.asarray(logp)[mask]), np.sort(np.asarray(flat["old_logprobs"])[mask])


# one case in the default tier, the rest in the slow one (each compiles two learner gradients)
SLOW_CASES = [(e, s, a) for e in ("trace_tree", "tree_grpo") for s in (0, 1, 2) for a in ("sequence_mean", "token_mean")
              if (e, s, a) != ("trace_tree", 0, "sequence_mean")]


@pytest.mark.parametrize("estimator,seed,aggregation", [("trace_tree", 0, "sequence_mean")] + [
    pytest.param(*case, marks=pytest.mark.slow) for case in SLOW_CASES])
def test_packed_and_per_path_layouts_give_the_same_logprobs_loss_and_gradients(model, seed, estimator, aggregation):
    config, params = model
    trees = _trees(seed)
    sequences = estimate(trees, AdvantageConfig(name=estimator))
    paths = paths_layout.build(trees, sequences, micro_batch=2)
    packed = packed_layout.build(trees, sequences, micro_batch=2)
    assert packed["tokens"].size < paths["tokens"].size or len(trees[0].nodes) == 2
    assert int(packed["mask"].sum()) == int(paths["mask"].sum())  # the same trained targets
    new_paths, old_paths = _per_token(model, paths, packed=False)
    new_packed, old_packed = _per_token(model, packed, packed=True)
    np.testing.assert_allclose(old_packed, old_paths)  # matched target for target (sorted by sampler log-prob)
    np.testing.assert_allclose(new_packed, new_paths, atol=1e-5)
    loss = LossConfig(aggregation=aggregation)
    g_paths, t_paths = learner.gradients(config, loss, params, jax.tree.map(jnp.asarray, paths))
    g_packed, t_packed = learner.gradients(config, loss, params, jax.tree.map(jnp.asarray, packed))
    np.testing.assert_allclose(float(t_packed["loss"]), float(t_paths["loss"]), rtol=1e-5, atol=1e-7)
    assert float(t_packed["tokens"]) == float(t_paths["tokens"])
    for a, b in zip(jax.tree.leaves(g_packed), jax.tree.leaves(g_paths)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_on_chains_packing_changes_nothing_but_padding(model):
    """Trees of one rollout each (no shared turn but the prompt): the same tokens, one tree after another."""
    rng = np.random.default_rng(5)
    trees = [_random_tree(rng, 3, 1) for _ in range(4)]
    sequences = estimate(trees, AdvantageConfig(name="grpo"))
    paths = paths_layout.build(trees, sequences, micro_batch=4)
    packed = packed_layout.build(trees, sequences, micro_batch=4)
    assert int(paths["valid"].sum()) == int(packed["valid"].sum())  # every token once either way
    np.testing.assert_array_equal(np.sort(paths["tokens"][paths["valid"]]), np.sort(packed["tokens"][packed["valid"]]))
    new_paths, _ = _per_token(model, paths, packed=False)
    new_packed, _ = _per_token(model, packed, packed=True)
    np.testing.assert_allclose(new_packed, new_paths, atol=1e-5)


def test_a_shared_turn_is_laid_out_once_and_each_child_sees_only_its_path():
    tree = RolloutTree(task=None, prompt=[1, 2, 3])
    a = tree.add(0, tokens=[4, 5], logprobs=[-0.1, -0.2], entropy=[0, 0])
    a.observation = [6]
    b = tree.add(a.id, tokens=[7], logprobs=[-0.3], entropy=[0])
    c = tree.add(a.id, tokens=[8, 9], logprobs=[-0.4, -0.5], entropy=[0, 0])
    for leaf in (b, c):
        leaf.terminal = True
    unit = packed_layout.tree_unit(tree, [Sequence(0, b.id, {a.id: 1.0, b.id: 1.0}), Sequence(0, c.id, {c.id: -1.0})])
    assert unit.tokens == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert unit.positions == [0, 1, 2, 3, 4, 5, 6, 6, 7]  # b and c both start after the 6 tokens of their path
    # sources: a's tokens from 3 and 4, b's first token and c's first token both from the observation (5)
    assert [(s, t) for s, t, *_ in unit.entries] == [(2, 4), (3, 5), (5, 7), (5, 8), (7, 9)]
    assert [w for *_, w in unit.entries] == [1 / 3] * 3 + [1 / 2] * 2
    enter, exit_ = jnp.asarray([unit.enter]), jnp.asarray([unit.exit])
    mask = np.asarray(CausalMask(jnp.ones((1, 9), bool), enter, exit_).dense())[0]
    assert mask[7].tolist() == [True] * 6 + [False, True, False]  # c's first token: its path, not b's token
    assert mask[8].tolist() == [True] * 6 + [False, True, True]
    assert mask[6].tolist() == [True] * 7 + [False, False]
    # query blocks (the long-sequence path) build the same rows
    blocks = [np.asarray(CausalMask(jnp.ones((1, 9), bool), enter, exit_).dense(s, 4))[0] for s in (0, 4, 8)]
    np.testing.assert_array_equal(np.concatenate(blocks)[:9], mask)


def test_several_trees_share_a_row_and_never_attend_across():
    trees = _trees(7, count=4)
    sequences = estimate(trees, AdvantageConfig(name="trace_tree"))
    layouts = packed_layout.units(trees, sequences)
    length = max(len(u.tokens) for u in layouts) * 2
    rows = packed_layout.pack(layouts, length)
    assert len(rows) < len(layouts)
    batch = packed_layout.batch(layouts, 1, length, len(rows), 512)
    enter, exit_ = batch["enter"][:, 0], batch["exit"][:, 0]
    for r in range(len(rows)):
        mask = np.asarray(CausalMask(jnp.asarray(batch["valid"][r]), jnp.asarray(enter[r:r + 1]),
                                     jnp.asarray(exit_[r:r + 1])).dense())[0]
        starts = np.cumsum([0] + [len(u.tokens) for u in sorted(rows[r], key=lambda u: -len(u.tokens))])
        owner = np.searchsorted(starts, np.arange(length), side="right") - 1
        real = batch["valid"][r, 0]
        assert not (mask & (owner[:, None] != owner[None, :]))[real].any()  # padding queries are never read


def test_the_update_plan_packs_every_mini_batch_to_one_shape():
    trees = _trees(3, count=6)
    sequences = estimate(trees, AdvantageConfig(name="trace_tree"))
    config = learner.LearnerConfig(micro_batch=2, mini_batches=2, epochs=2, layout="packed")
    batches = updates.plan(trees, sequences, config, seed=0)
    assert len(batches) == 4 and len({tuple((k, v.shape) for k, v in sorted(b.items())) for b in batches}) == 1
    per_epoch = sum(int(b["mask"].sum()) for b in batches) / 2
    assert per_epoch == int(paths_layout.build(trees, sequences, micro_batch=2)["mask"].sum())


def test_an_unknown_layout_is_refused_by_name():
    with pytest.raises(ValueError, match=r"'learner.layout'='tree' is out of range: allowed \('paths', 'packed'\)"):
        learner.LearnerConfig(layout="tree")


@pytest.mark.parametrize("gradients", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_long_packed_rows_attend_in_causal_blocks_with_the_same_result(model, monkeypatch, gradients):
    """Rows over PACKED_ATTENTION_BLOCK tokens take the causal blocks (the mask built per block of queries,
    each block over the keys up to its last query): the same log-probs as one block and as the per-path layout;
    in the slow tier also the same loss and gradients (two more learner compilations)."""
    from trace_jax.models import transformer

    config, params = model
    trees = _trees(11)
    sequences = estimate(trees, AdvantageConfig(name="trace_tree"))
    packed = packed_layout.build(trees, sequences, micro_batch=2)
    loss = LossConfig(aggregation="sequence_mean")

    def step():
        logp, _ = _per_token(model, packed, packed=True)
        if not gradients:
            return logp, None, None
        fresh = jax.jit(lambda p, b: learner._gradients(config, loss, p, b))  # traced anew: sees the patch
        grads, totals = fresh(params, jax.tree.map(jnp.asarray, packed))
        return logp, grads, float(totals["loss"])

    whole, whole_grads, whole_loss = step()
    monkeypatch.setattr(transformer, "PACKED_ATTENTION_BLOCK", 16)
    assert packed["tokens"].shape[-1] > 3 * 16, "4 blocks or more: 2 groups or more, the later scoring more keys"
    blocked, blocked_grads, blocked_loss = step()
    paths, _ = _per_token(model, paths_layout.build(trees, sequences, micro_batch=2), packed=False)
    np.testing.assert_allclose(blocked, whole, atol=1e-5)
    np.testing.assert_allclose(blocked, paths, atol=1e-5)
    if gradients:
        np.testing.assert_allclose(blocked_loss, whole_loss, rtol=1e-5, atol=1e-7)
        for a, b in zip(jax.tree.leaves(blocked_grads), jax.tree.leaves(whole_grads)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
