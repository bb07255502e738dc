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


def test_within_group_auc_takes_the_groups_difficulty_out():
    """Scores that only know each group's difficulty rank across groups perfectly but within a group not at all
    (1/2); scores that order each group's members are 1 within; a group whose outcomes agree adds no pair."""
    from trace_jax.allocation.calibration import within_group_auc
    groups = np.repeat(np.arange(20), 4)
    rng = np.random.default_rng(0)
    outcomes = rng.random(80)
    difficulty_only = np.repeat(rng.random(20), 4)
    assert within_group_auc(groups, difficulty_only, outcomes)["auc"] == 0.5
    perfect = within_group_auc(groups, outcomes + 10 * groups, outcomes)
    assert perfect["auc"] == 1.0 and perfect["pairs"] == 20 * 6 and perfect["groups"] == 20
    reversed_ = within_group_auc(groups, -outcomes, outcomes)
    assert reversed_["auc"] == 0.0 and reversed_["ci95"] == [0.0, 0.0]
    noisy = within_group_auc(groups, outcomes + rng.normal(0, 0.3, 80), outcomes)
    assert 0.5 < noisy["auc"] < 1 and noisy["ci95"][0] < noisy["auc"] < noisy["ci95"][1]
    assert within_group_auc([0, 0, 1], [0.1, 0.9, 0.3], [1.0, 1.0, 0.0]) == {"auc": None, "ci95": None, "pairs": 0,
                                                                            "groups": 0}
