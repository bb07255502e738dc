"""Advantages on hand-built trees with known values."""

import numpy as np
import pytest

from trace_jax.registry import RegistryError
from trace_jax.rl.advantages import AdvantageConfig, estimate, nonzero_advantage_token_share
from trace_jax.rollout.tree import RolloutTree, contrast_statistics, step_statistics


class _Task:
    id = "t"


def _leaf(tree, parent, success):
    node = tree.add(parent, tokens=[5, 6], logprobs=[-1.0, -1.0])
    node.terminal, node.success, node.reward = True, success, float(success)
    return node


def branched_tree():
    """root -> c1 -> {c1a: success, c1b: fail};  root -> c2: fail."""
    tree = RolloutTree(_Task(), [1, 2, 3])
    c1 = tree.add(0, tokens=[4], logprobs=[-0.5], observation=[9, 9])
    a = _leaf(tree, c1.id, True)
    b = _leaf(tree, c1.id, False)
    c2 = _leaf(tree, 0, False)
    return tree, c1.id, a.id, b.id, c2.id


def test_backup_values_and_counts():
    tree, c1, a, b, c2 = branched_tree()
    values, counts = tree.values()
    np.testing.assert_allclose(values[[0, c1, a, b, c2]], [1 / 3, 0.5, 1, 0, 0])
    np.testing.assert_array_equal(counts[[0, c1, a, b, c2]], [3, 2, 1, 1, 1])
    assert tree.is_mixed(0) and tree.is_mixed(c1) and not tree.is_mixed(c2)


def test_trace_tree_advantages_by_hand():
    tree, c1, a, b, c2 = branched_tree()
    lam, sigma = 0.5, np.std([1.0, 0.0, 0.0])
    seqs = estimate([tree], AdvantageConfig(name="trace_tree", lambda_local=lam, eps=1e-12))
    got = {n: adv for s in seqs for n, adv in s.advantages.items()}
    want = {c1: (0.5 - 1 / 3) / sigma + lam * (0.5 - 1 / 3), a: (1 - 1 / 3) / sigma + lam * (1 - 0.5),
            b: (0 - 1 / 3) / sigma + lam * (0 - 0.5), c2: (0 - 1 / 3) / sigma + lam * (0 - 1 / 3)}
    assert got == pytest.approx(want)
    trained = [n for s in seqs for n in s.advantages]
    assert sorted(trained) == sorted(want)  # every turn trained exactly once
    assert [s.leaf for s in seqs] == [a, b, c2]


def test_trace_tree_without_branching_and_lambda_zero_is_grpo():
    tree = RolloutTree(_Task(), [1, 2])
    for success in [True, False, False, True, False]:
        mid = tree.add(0, tokens=[3], logprobs=[-1.0], observation=[7])
        _leaf(tree, mid.id, success)
    trace = estimate([tree], AdvantageConfig(name="trace_tree", lambda_local=0.0))
    grpo = estimate([tree], AdvantageConfig(name="grpo"))
    assert [s.advantages for s in trace] == [pytest.approx(s.advantages) for s in grpo]


def test_grpo_duplicates_shared_prefixes_and_tree_grpo_adds_intra_and_inter():
    tree, c1, a, b, c2 = branched_tree()
    grpo = estimate([tree], AdvantageConfig(name="grpo", eps=1e-12))
    assert sum(c1 in s.advantages for s in grpo) == 2
    z = (np.array([1.0, 0.0, 0.0]) - 1 / 3) / np.std([1.0, 0.0, 0.0])
    assert [s.advantages[s.leaf] for s in grpo] == pytest.approx(list(z))
    tg = estimate([tree], AdvantageConfig(name="tree_grpo", eps=1e-9))
    intra = [1.0, -1.0, 0.0]  # (a, b) form one sub-tree, c2 its own
    assert [s.advantages[s.leaf] for s in tg] == pytest.approx(list(np.array(intra) + z), abs=1e-6)


def test_step_and_contrast_statistics():
    tree, c1, a, b, c2 = branched_tree()
    tree.nodes[b].origin = c1  # b branched from the boundary after c1; a finished the bare rollout through c1
    stats = step_statistics([tree])
    assert stats["effective_ratio"] == 1.0 and stats["expanded_mixed_share"] == 1.0
    assert nonzero_advantage_token_share([tree], estimate([tree], AdvantageConfig())) == 1.0
    contrast = contrast_statistics([tree])
    # bare rollouts a (success) and c2 (failure) are mixed alone; one leaf of three is a branch, from depth 1
    assert contrast == {"prompts_mixed": 1, "root_groups_mixed": 1, "branch_leaf_share": 1 / 3, "anchor_depths": (1,)}
    tree.nodes[a].success = False  # now only the branch succeeded: the tree is mixed, its bare group is not
    contrast = contrast_statistics([tree])
    assert (contrast["prompts_mixed"], contrast["root_groups_mixed"]) == (0, 0)
    tree.nodes[b].success = True
    assert contrast_statistics([tree])["prompts_mixed"] == 1 and contrast_statistics([tree])["root_groups_mixed"] == 0


def test_the_nonzero_advantage_share_is_the_estimators_own():
    """All bare rollouts agree and a branch succeeds: grpo gives every leaf a non-zero advantage, trace_tree
    trains c1 and the branch leaf with non-zero advantages too, but with lambda 0 and the root-rollout
    baseline a leaf at V(x) gets 0."""
    tree, c1, a, b, c2 = branched_tree()
    tree.nodes[b].origin = c1
    for leaf, success in ((a, False), (b, True), (c2, False)):
        tree.nodes[leaf].success = success
    grpo = nonzero_advantage_token_share([tree], estimate([tree], AdvantageConfig(name="grpo")))
    root = nonzero_advantage_token_share([tree], estimate([tree], AdvantageConfig(baseline="root_rollouts",
                                                                                  lambda_local=0.0)))
    assert grpo == 1.0 and root < 1.0


def test_the_root_rollout_baseline_leaves_branch_leaves_out_of_v_x_and_sigma_x():
    tree, c1, a, b, c2 = branched_tree()  # bare: a (success), c2 (failure); branch: b (failure)
    tree.nodes[b].origin = c1
    lam = 0.5
    got = {n: v for s in estimate([tree], AdvantageConfig(baseline="root_rollouts", lambda_local=lam, eps=1e-12))
           for n, v in s.advantages.items()}
    v_x, sigma = 0.5, 0.5  # over a and c2 alone (all leaves: 1/3 and 0.471)
    assert got[c2] == pytest.approx((0 - v_x) / sigma + lam * (0 - 1 / 3))
    assert got[a] == pytest.approx((1 - v_x) / sigma + lam * (1 - 0.5))
    tree.nodes[a].success = False  # bare rollouts agree: sigma_x falls back to the std over all leaves
    tree.nodes[b].success = True
    got = {n: v for s in estimate([tree], AdvantageConfig(baseline="root_rollouts", lambda_local=0.0, eps=1e-12))
           for n, v in s.advantages.items()}
    assert got[b] == pytest.approx((1 - 0.0) / np.std([0.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="advantage.baseline"):
        AdvantageConfig(baseline="median")


def test_unknown_estimator_is_named():
    with pytest.raises(RegistryError, match="unknown advantage estimator 'vanilla'"):
        estimate([], AdvantageConfig(name="vanilla"))
    with pytest.raises(ValueError, match="advantage.scale"):
        AdvantageConfig(scale="mad")
