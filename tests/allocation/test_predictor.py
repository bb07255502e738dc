"""The success predictor: neutral at init, learns a prefix feature, state round-trips, featurizer variants."""

import numpy as np
import pytest

from trace_jax.allocation.calibration import auc
from trace_jax.allocation.predictor import SuccessPredictor


def test_untrained_predictor_says_one_half():
    p = SuccessPredictor(35).predict(np.random.default_rng(0).normal(size=(300, 35)) * 5)
    assert np.abs(p - 0.5).max() <= 0.05


def test_learns_success_that_depends_on_a_feature():
    rng = np.random.default_rng(0)
    predictor = SuccessPredictor(20)

    def stream(n):
        x = rng.normal(size=(n, 20)).astype(np.float32)
        y = (rng.random(n) < 1 / (1 + np.exp(-4 * x[:, 3]))).astype(np.float32)
        return x, y

    for _ in range(6):  # six "steps" of outcomes through the replay buffer
        x, y = stream(400)
        predictor.fit(x, y, np.ones(len(y), np.float32))
    x, y = stream(1000)
    assert auc(predictor.predict(x), y) > 0.9


def test_state_round_trip():
    a, b = SuccessPredictor(8, seed=0), SuccessPredictor(8, seed=1)
    x = np.random.default_rng(2).normal(size=(50, 8)).astype(np.float32)
    a.fit(x, (x[:, 0] > 0).astype(np.float32), np.ones(50, np.float32))
    b.load_state(a.state())
    np.testing.assert_allclose(a.predict(x), b.predict(x))


@pytest.mark.parametrize("features,ignored,used", [("scalars", slice(0, 32), slice(32, 35)),
                                                   ("hidden", slice(32, 35), slice(0, 32))])
def test_featurizer_variants_see_only_their_columns(features, ignored, used):
    from trace_jax.allocation.predictor import PredictorConfig
    rng = np.random.default_rng(0)
    predictor = SuccessPredictor(35, PredictorConfig(features=features))
    x = rng.normal(size=(64, 35)).astype(np.float32)
    predictor.fit(x, (x[:, 33] > 0).astype(np.float32), np.ones(64, np.float32))  # non-trivial weights
    changed = x.copy()
    changed[:, ignored] = rng.normal(size=changed[:, ignored].shape)
    np.testing.assert_array_equal(predictor.predict(changed), predictor.predict(x))
    changed = x.copy()
    changed[:, used] = rng.normal(size=changed[:, used].shape)
    assert not np.allclose(predictor.predict(changed), predictor.predict(x), atol=1e-3)
