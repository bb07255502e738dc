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


def within_group_auc(groups, scores, outcomes, *, samples: int = 1000, seed: int = 0) -> dict:
    """How well `scores` rank outcomes *inside* each group (e.g. the prefixes of one prompt's tree), with the
    prompt's own difficulty taken out: over every pair of one group whose outcomes differ, the share where
    the higher score has the higher outcome (ties in score count 1/2). Returns {"auc", "ci95", "pairs",
    "groups"}: ci95 from a bootstrap over groups (pairs of one group are not independent); auc None when no
    group has a pair with different outcomes."""
    groups, scores, outcomes = (np.asarray(x) for x in (groups, scores, outcomes))
    per_group = []  # (concordant + ties / 2, discordant pairs) per group with any
    for g in dict.fromkeys(groups.tolist()):
        s, y = scores[groups == g], outcomes[groups == g]
        i, j = np.triu_indices(len(s), 1)
        differ = y[i] != y[j]
        if not differ.any():
            continue
        i, j = i[differ], j[differ]
        sign = np.sign(s[i] - s[j]) * np.sign(y[i] - y[j])
        per_group.append((float(np.sum(sign > 0) + 0.5 * np.sum(sign == 0)), float(differ.sum())))
    if not per_group:
        return {"auc": None, "ci95": None, "pairs": 0, "groups": 0}
    hits, pairs = np.array(per_group).T
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(hits), (samples, len(hits)))
    boot = hits[draws].sum(1) / pairs[draws].sum(1)
    return {"auc": float(hits.sum() / pairs.sum()), "ci95": [float(x) for x in np.percentile(boot, [2.5, 97.5])],
            "pairs": int(pairs.sum()), "groups": len(hits)}
