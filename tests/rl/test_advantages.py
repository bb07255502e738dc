"""Advantages on hand-built trees with known values."""

import numpy as np
import pytest

from trace_jax.registry import RegistryError
from trace_jax.rl.advantages import AdvantageConfig, estimate
from trace_jax.rollout.tree import RolloutTree, step_statistics


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
    seqs = estimate([tree], AdvantageConfig(name="trace_tree", lambda_local=lam, eps=0.0))
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
    grpo = estimate([tree], AdvantageConfig(name="grpo", eps=0.0))
    assert sum(c1 in s.advantages for s in grpo) == 2
    z = (np.array([1.0, 0.0, 0.0]) - 1 / 3) / np.std([1.0, 0.0, 0.0])
    assert [s.advantages[s.leaf] for s in grpo] == pytest.approx(list(z))
    tg = estimate([tree], AdvantageConfig(name="tree_grpo", eps=1e-9))
    intra = [1.0, -1.0, 0.0]  # (a, b) form one sub-tree, c2 its own
    assert [s.advantages[s.leaf] for s in tg] == pytest.approx(list(np.array(intra) + z), abs=1e-6)


def test_step_statistics():
    tree, c1, a, b, c2 = branched_tree()
    seqs = estimate([tree], AdvantageConfig())
    adv = np.zeros(len(tree.nodes))
    for s in seqs:
        for n, v in s.advantages.items():
            adv[n] = v
    stats = step_statistics([tree], [adv])
    assert stats["effective_ratio"] == 1.0 and stats["expanded_mixed_share"] == 1.0
    assert stats["nonzero_advantage_token_share"] == 1.0


def test_unknown_estimator_is_named():
    with pytest.raises(RegistryError, match="unknown advantage estimator 'vanilla'"):
        estimate([], AdvantageConfig(name="vanilla"))
    with pytest.raises(ValueError, match="advantage.scale"):
        AdvantageConfig(scale="mad")
