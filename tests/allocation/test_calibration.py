"""Calibration metrics: AUC by its pairwise definition, Brier/ECE of perfect and constant predictors."""

import numpy as np
import pytest

from trace_jax.allocation.calibration import Calibration, auc, calibration


def test_auc_matches_pairwise_definition():
    rng = np.random.default_rng(1)
    s, y = rng.integers(0, 5, 60).astype(float), rng.integers(0, 2, 60).astype(float)
    pairs = [(1.0 if a > b else 0.5 if a == b else 0.0) for a, ya in zip(s, y) for b, yb in zip(s, y)
             if ya == 1 and yb == 0]
    assert auc(s, y) == pytest.approx(np.mean(pairs))
    assert np.isnan(auc(s, np.ones(60)))


def test_calibration_of_a_perfect_and_a_constant_predictor():
    y = np.array([0, 0, 1, 1], float)
    assert calibration(y, y) == Calibration(brier=0.0, ece=0.0, auc=1.0, n=4)
    constant = calibration(np.full(4, 0.5), y)
    assert constant.brier == pytest.approx(0.25) and constant.auc == 0.5 and constant.ece == 0.0
    assert np.isnan(calibration(np.zeros(0), np.zeros(0)).auc)
