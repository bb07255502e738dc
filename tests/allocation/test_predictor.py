"""The success predictor: neutral at init, learns a prefix feature, state round-trips, featurizer variants."""

import numpy as np
import pytest

from trace_jax.allocation.calibration import auc
from trace_jax.allocation.predictor import SuccessPredictor


def test_untrained_predictor_says_one_half():
    p = SuccessPredictor(36).predict(np.random.default_rng(0).normal(size=(300, 36)) * 5)
    assert np.abs(p - 0.5).max() <= 0.05


def test_learns_success_that_depends_on_a_feature():
    rng = np.random.default_rng(0)
    predictor = SuccessPredictor(21)

    def stream(n):
        x = rng.normal(size=(n, 21)).astype(np.float32)
        y = (rng.random(n) < 1 / (1 + np.exp(-4 * x[:, 3]))).astype(np.float32)
        return x, y

    for _ in range(6):  # six "steps" of outcomes through the replay buffer
        x, y = stream(400)
        predictor.fit(x, y, np.ones(len(y), np.float32))
    x, y = stream(1000)
    assert auc(predictor.predict(x), y) > 0.9


def test_state_round_trip():
    a, b = SuccessPredictor(9, seed=0), SuccessPredictor(9, seed=1)
    x = np.random.default_rng(2).normal(size=(50, 9)).astype(np.float32)
    a.fit(x, (x[:, 0] > 0).astype(np.float32), np.ones(50, np.float32))
    b.load_state(a.state())
    np.testing.assert_allclose(a.predict(x), b.predict(x))


@pytest.mark.parametrize("features,ignored,used", [  # a featurize row of D = 16: hidden, middle, prompt mean, 3 scalars
    ("scalars", slice(0, 48), slice(48, 51)), ("hidden", slice(16, 51), slice(0, 16)),
    ("layers+scalars", slice(32, 48), slice(16, 32)), ("prompt_mean+scalars", slice(0, 32), slice(32, 48)),
    ("prompt_mean+hidden+scalars", slice(16, 32), slice(32, 51))])
def test_featurizer_variants_see_only_their_columns(features, ignored, used):
    from trace_jax.allocation.predictor import PredictorConfig
    rng = np.random.default_rng(0)
    predictor = SuccessPredictor(51, PredictorConfig(features=features))
    x = rng.normal(size=(64, 51)).astype(np.float32)
    predictor.fit(x, (x[:, 49] > 0).astype(np.float32), np.ones(64, np.float32))  # non-trivial weights
    changed = x.copy()
    changed[:, ignored] = rng.normal(size=changed[:, ignored].shape)
    np.testing.assert_array_equal(predictor.predict(changed), predictor.predict(x))
    changed = x.copy()
    changed[:, used] = rng.normal(size=changed[:, used].shape)
    assert not np.allclose(predictor.predict(changed), predictor.predict(x), atol=1e-3)


def test_a_row_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="not a featurize row width"):
        SuccessPredictor(8)


def test_standardised_inputs_let_a_tiny_scale_scalar_drive_the_prediction():
    """Success depends on a scalar column that varies by ~1% (as log1p(prefix length) / 8 does) next to
    32 unit-variance hidden dimensions: per-column standardisation finds it (a per-row LayerNorm, the
    predictor's first normalisation, scored 0.1 lower here and was deleted)."""
    rng = np.random.default_rng(0)

    def stream(n):
        z = rng.normal(size=n)
        x = np.concatenate([rng.normal(size=(n, 32)), 0.5 + 0.005 * z[:, None]], axis=1).astype(np.float32)
        return x, (rng.random(n) < 1 / (1 + np.exp(-3 * z))).astype(np.float32)

    predictor = SuccessPredictor(33)
    for _ in range(4):
        predictor.fit(*stream(400), np.ones(400, np.float32))
    x, y = stream(2000)
    assert auc(predictor.predict(x), y) > 0.75


def test_root_targets_count_only_rollouts_sampled_at_the_root():
    from trace_jax.rollout.tree import RolloutTree

    tree = RolloutTree(type("T", (), {"id": "t"})(), [1, 2])
    tree.mark_anchor(0, prefix_length=2, hidden=np.zeros(8, np.float32))  # D = 4: final and middle layer
    tree.root.prompt_mean = np.zeros(4, np.float32)
    turn = tree.add(0, tokens=[3], origin=0)
    tree.mark_anchor(turn.id, prefix_length=3, hidden=np.ones(8, np.float32))
    tree.add(turn.id, tokens=[4], origin=0, terminal=True, success=False)       # the bare rollout: failed
    for _ in range(3):                                                           # branches chosen to flip it
        tree.add(turn.id, tokens=[5], origin=turn.id, terminal=True, success=True)
    x, y, w = SuccessPredictor(15).targets([tree])
    assert y.tolist() == [0.0, 0.75] and w.tolist() == [1.0, 4.0]  # root: the bare leaf only; prefix: all four
