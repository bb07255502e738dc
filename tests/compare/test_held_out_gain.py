"""The held-out gain (compare/held_out_gain.py): the importance-weighted success change computed by hand, and a
window of training on rollouts' successes raising it (on their failures, lowering it) while theta0 stays put."""

import types

import jax
import numpy as np
import pytest

from trace_jax.compare import held_out_gain
from trace_jax.models import init_params
from trace_jax.models.presets import get_preset
from trace_jax.rl.advantages import AdvantageConfig
from trace_jax.rl.learner import LearnerConfig
from trace_jax.rl.losses import LossConfig
from trace_jax.rollout.tree import RolloutTree

VOCAB = 64


def test_the_gain_is_the_mean_of_ratio_minus_one_times_advantage_over_scored_rows():
    mask = np.array([[[True, True, False], [False, False, False]], [[False, True, False], [True, False, False]]])
    advantages = np.where(mask, np.array([[[0.5], [9.0]], [[-0.5], [0.25]]]), 0.0)
    batch = {"mask": mask, "advantages": advantages}
    base, new = np.array([[-1.0, 7.0], [-2.0, -3.0]]), np.array([[-0.5, 3.0], [-2.5, -3.0]])
    out = held_out_gain.gain([batch], [base], [new])
    want = (np.expm1(0.5) * 0.5 + np.expm1(-0.5) * -0.5 + 0.0) / 3  # the empty row (advantage 9) is not scored
    assert out["rollouts"] == 3 and out["gain"] == pytest.approx(want) and out["max_abs_log_ratio"] == 0.5
    with pytest.raises(ValueError, match="no generated tokens"):
        held_out_gain.gain([{"mask": mask & False, "advantages": advantages}], [base], [new])


def _trees(seed: int, flip: bool = False) -> list[RolloutTree]:
    """Groups of 4 one-token answers after random prompts, two even, two odd; even succeeds."""
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(4):
        tree = RolloutTree(task=None, prompt=rng.integers(1, VOCAB, 4).tolist())
        for i in range(4):
            tokens = [int(2 + i % 2 + 2 * rng.integers(0, 2))]  # 2 or 4 (succeeds), 3 or 5 (fails)
            node = tree.add(0, tokens=tokens, logprobs=[0.0], entropy=[0.0])
            node.terminal, node.success = True, (tokens[0] % 2 == 0) != flip
            node.reward = float(node.success)
        trees.append(tree)
    return trees


@pytest.fixture(scope="module")
def setup():
    config = get_preset("tiny")
    config = config.replace(vocab_size=max(config.vocab_size, VOCAB))
    run = types.SimpleNamespace(learner=LearnerConfig(learning_rate=3e-3, micro_batch=8), loss=LossConfig(),
                                advantage=AdvantageConfig(name="grpo"))
    return types.SimpleNamespace(model_config=config, run=run), init_params(config, 0)


@pytest.mark.parametrize("flip,sign", [(False, 1), (True, -1)])
def test_training_a_window_on_successes_raises_the_held_out_gain_and_on_failures_lowers_it(setup, flip, sign):
    s, params = setup
    held = [held_out_gain.held_out_batch(_trees(100), 8)]
    base = held_out_gain.row_logprobs(s, params, held)
    before = jax.tree.map(np.asarray, params)
    trainer = held_out_gain.WindowTrainer(s, s.run, params, held, base, window=3, seed=0)
    for step in range(6):
        trainer.train(step, _trees(step, flip=flip))
    assert len(trainer.gains) == 2 and all(sign * g["gain"] > 0 for g in trainer.gains)
    assert all(g["rollouts"] == 16 for g in trainer.gains)
    # windows restart from theta0, which training never touched (train_step donates only its copies)
    jax.tree.map(np.testing.assert_array_equal, before, jax.tree.map(np.asarray, params))
    with pytest.raises(ValueError, match="window"):
        held_out_gain.WindowTrainer(s, s.run, params, held, base, window=0, seed=0)
