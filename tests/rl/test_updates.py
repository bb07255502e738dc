"""Several clipped updates per RL step: mini-batch split, one update = the single step bit for bit, the ratio
moving and the clip acting from the second update on."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax import allocation
from trace_jax.rl import learner, updates
from trace_jax.rl.batches import paths
from trace_jax.rl.advantages import AdvantageConfig, Sequence, estimate
from trace_jax.rl.losses import LossConfig
from trace_jax.rollout.agent_loop import RolloutEngine


@pytest.fixture(scope="module")
def trees(tiny_setup):
    budget = allocation.BudgetConfig(rollouts=16, prompts=4, candidates=4, m_min=2, m_max=4)
    engine = RolloutEngine(tiny_setup.policy, tiny_setup.env, seed=3)
    return allocation.make("treepo", budget).step(engine, tiny_setup.source.tasks("train")[:4]).trees


def _learn(tiny_setup, config):
    optimizer = learner.make_optimizer(config)
    policy = tiny_setup.policy

    def learn(p, o, b):
        return learner.train_step(policy.config, LossConfig(), optimizer, p, o, jax.device_put(b))

    params = jax.tree.map(jnp.array, policy.params)
    return learn, params, optimizer.init(params)


def test_one_update_is_the_single_step_bit_for_bit(tiny_setup, trees):
    config = learner.LearnerConfig(learning_rate=1e-3, micro_batch=4)
    seqs = estimate(trees, AdvantageConfig())
    learn, params, opt_state = _learn(tiny_setup, config)
    want_params, _, want = learn(params, opt_state, paths.build(trees, seqs, config.micro_batch))
    want_params = jax.tree.map(np.asarray, want_params)
    learn, params, opt_state = _learn(tiny_setup, config)
    batches = updates.plan(trees, seqs, config, seed=5)
    assert len(batches) == 1
    got_params, _, got = updates.run(learn, params, opt_state, batches)
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, got_params), want_params)
    assert got.loss == float(want["loss"]) and got.updates == 1 and got.grad_norm_last == got.grad_norm


@pytest.mark.parametrize("split_trees", [False, True])
def test_mini_batches_cover_every_sequence_once_per_epoch_and_keep_trees_together(trees, split_trees):
    seqs = estimate(trees, AdvantageConfig(name="grpo"))
    config = learner.LearnerConfig(mini_batches=3, epochs=2, micro_batch=2, split_trees=split_trees)
    rng = np.random.default_rng(0)
    first, second = (updates.mini_batches(trees, seqs, config, rng) for _ in range(2))
    for groups in (first, second):
        assert sorted(i for g in groups for i in g) == list(range(len(seqs)))
        if not split_trees:
            owners = {seqs[i].tree: k for k, g in enumerate(groups) for i in g}
            assert all(owners[seqs[i].tree] == k for k, g in enumerate(groups) for i in g)
    assert first != second  # each epoch reshuffled
    batches = updates.plan(trees, seqs, config, seed=1)
    assert len(batches) == 6 and len({tuple(b["tokens"].shape) for b in batches}) == 1  # one compiled shape
    # every trained token trained once per epoch
    per_epoch = sum(int(b["mask"].sum()) for b in batches[:3])
    assert per_epoch == int(paths.build(trees, seqs, 2)["mask"].sum())


def test_a_second_update_moves_the_ratio_and_the_clip_acts(tiny_setup, trees):
    """The first update's ratio is 1 (the learner's log-probs are the sampler's), so nothing is clipped;
    after a large step the later updates see ratios outside [0.8, 1.28] and clip."""
    config = learner.LearnerConfig(learning_rate=3e-2, micro_batch=4, mini_batches=2, epochs=2)
    # the tiny random policy fails every task (all advantages 0): give the turns advantages of both signs
    seqs = [Sequence(s.tree, s.leaf, {n: (-1.0) ** (s.leaf + i) for i, n in enumerate(s.advantages)})
            for s in estimate(trees, AdvantageConfig(name="grpo"))]
    learn, params, opt_state = _learn(tiny_setup, config)
    batches = updates.plan(trees, seqs, config, seed=0)
    per_update = []
    for batch in batches:
        params, opt_state, m = learn(params, opt_state, batch)
        per_update.append(learner.LearnerMetrics.from_device(m))
    assert per_update[0].clip_fraction == 0.0 and per_update[0].approx_kl < 1e-5
    assert per_update[-1].clip_fraction > 0.05 and per_update[-1].approx_kl > 100 * per_update[0].approx_kl
    summary = updates.summarize(per_update, epochs=2)
    assert summary.updates == 4 and summary.clip_fraction_last == per_update[-1].clip_fraction
    np.testing.assert_allclose(summary.clip_fraction, np.mean([m.clip_fraction for m in per_update]))
    np.testing.assert_allclose(summary.trained_tokens, sum(m.trained_tokens for m in per_update[:2]))


def test_a_tree_larger_than_the_others_still_lands_whole_and_empty_mini_batches_are_skipped(trees):
    seqs = [s for s in estimate(trees, AdvantageConfig(name="grpo")) if s.tree == 0]  # one tree
    config = learner.LearnerConfig(mini_batches=4, micro_batch=2)
    batches = updates.plan(trees, seqs, config, seed=0)
    assert len(batches) == 1  # three mini-batches were empty: no zero-gradient Adam steps
