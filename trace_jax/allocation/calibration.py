"""Calibration of success predictions against outcomes seen after them (docs/design.md section 3):
Brier score, expected calibration error, ROC AUC."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True, kw_only=True)
class Calibration:
    """Attributes:
      brier: mean squared error of the predictions.
      ece: expected calibration error over 10 equal-width bins.
      auc: ROC AUC (NaN when every outcome is one class).
      n: predictions scored.
    """

    brier: float
    ece: float
    auc: float
    n: int


def calibration(predicted: np.ndarray, outcomes: np.ndarray, bins: int = 10) -> Calibration:
    """Brier score, expected calibration error and ROC AUC (NaN when one class is absent)."""
    p = np.asarray(predicted, np.float64)
    y = np.asarray(outcomes, np.float64)
    if len(p) == 0:
        return Calibration(brier=float("nan"), ece=float("nan"), auc=float("nan"), n=0)
    brier = float(np.mean((p - y) ** 2))
    which = np.minimum((p * bins).astype(int), bins - 1)
    ece = sum(abs(p[which == b].mean() - y[which == b].mean()) * np.mean(which == b)
              for b in range(bins) if np.any(which == b))
    return Calibration(brier=brier, ece=float(ece), auc=auc(p, y), n=int(len(p)))


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) formula, ties averaged; labels may be fractional
    (back-up values): each example counts as `label` positive and `1 - label` negative."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels, np.float64)
    pos, neg = labels.sum(), (1 - labels).sum()
    if pos <= 0 or neg <= 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores, sorted_labels = scores[order], labels[order]
    _, starts = np.unique(sorted_scores, return_index=True)
    pos_group = np.add.reduceat(sorted_labels, starts)
    neg_group = np.add.reduceat(1 - sorted_labels, starts)
    neg_below = np.cumsum(neg_group) - neg_group
    return float(np.sum(pos_group * (neg_below + 0.5 * neg_group)) / (pos * neg))
