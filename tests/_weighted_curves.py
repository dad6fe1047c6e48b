"""Weighted ROC / precision-recall curves: tied weighted data sets, and the checks every curve must pass.

A curve over sums of weights must keep the shape of a curve over counts: rates in [0, 1] that never decrease, exactly
0 before a class's first sample of positive weight and exactly 1 at the end; precision in [0, 1], exactly 1 where no
negative weight is at or above the threshold. Values are scikit-learn's (``sample_weight``, no dropped points) of the
scores the curve is over, in float32.
"""

from __future__ import annotations

import math
import warnings
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
import torch
from _float32 import f32
from sklearn.metrics import precision_recall_curve, roc_curve

TOL = 1e-9
# Weights whose float64 sums round: a difference of running totals of them goes below 0 (the 0.3, 0.2, 0.1).
AWKWARD = (0.1, 0.2, 0.3, 0.7, 1 / 3, 0.6, 1.1, 2.7, 1e-3, 123.456)


def weighted_set(
    n: int, seed: int, levels: int, zeros: float = 0.2, separation: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` float64 scores in [0, 1] on ``levels + 1`` values (heavy ties), 0/1 labels (positives score
    ``separation`` higher: the top scores are positives only), float64 weights drawn from :data:`AWKWARD` or uniform
    (a fraction ``zeros`` of them 0); both classes keep a positive weight.
    """
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    target[0], target[1] = 0, 1
    noise = torch.rand(n, generator=gen, dtype=torch.float64) * (1 - separation) + separation * target
    preds = torch.round(noise * levels) / levels
    pool = torch.tensor(AWKWARD, dtype=torch.float64)
    weight = pool[torch.randint(0, len(AWKWARD), (n,), generator=gen)]
    uniform = torch.rand(n, generator=gen) < 0.3
    weight = torch.where(uniform, torch.rand(n, generator=gen, dtype=torch.float64) * 3, weight)
    weight[torch.rand(n, generator=gen) < zeros] = 0.0
    weight[0], weight[1] = 0.3, 0.1
    return preds, target, weight


def _floats(t: Any) -> list[float]:
    return [float(v) for v in (t.double().tolist() if isinstance(t, torch.Tensor) else t)]


def _mass_at_or_above(scores: np.ndarray, mask: np.ndarray, weight: np.ndarray, thresholds: list[float]) -> list[bool]:
    """Whether any sample of ``mask`` with a positive weight scores at or above each threshold."""
    top = scores[mask & (weight > 0)]
    best = float(top.max()) if top.size else -math.inf
    return [best >= t for t in thresholds]


def check_roc(curve: Any, scores: Any, positives: Any, weight: Any, *, sklearn: bool = True) -> None:
    """The exact weighted ROC curve ``(fpr, tpr, thresholds)`` of ``scores`` (the values the curve is over):
    torchmetrics' origin at threshold 1, then one point per distinct score of positive weight, highest first.
    """
    fpr, tpr, thr = (_floats(c) for c in curve)
    s, p, w = np.asarray(scores, dtype=np.float64), np.asarray(positives, dtype=bool), np.asarray(weight, np.float64)
    assert fpr[0] == tpr[0] == 0.0
    for rate, mask in ((fpr, ~p), (tpr, p)):
        assert all(0.0 <= r <= 1.0 for r in rate), rate
        assert all(b >= a for a, b in pairwise(rate)), rate
        reached = _mass_at_or_above(s, mask, w, thr[1:])
        assert [r != 0.0 for r in rate[1:]] == reached, (rate, reached)  # exactly 0 until the class's first sample
        assert rate[-1] == (1.0 if reached and reached[-1] else 0.0)
    if sklearn:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sk_fpr, sk_tpr, sk_thr = roc_curve(p, s, sample_weight=w, drop_intermediate=False)
        assert thr[1:] == sk_thr[1:].tolist()
        assert fpr == pytest.approx(f32(sk_fpr), abs=TOL)
        assert tpr == pytest.approx(f32(sk_tpr), abs=TOL)


def check_pr(curve: Any, scores: Any, positives: Any, weight: Any, *, sklearn: bool = True) -> None:
    """The exact weighted precision-recall curve: one point per distinct score of positive weight, increasing, then
    torchmetrics' final ``(1, 0)``.
    """
    precision, recall, thr = (_floats(c) for c in curve)
    s, p, w = np.asarray(scores, dtype=np.float64), np.asarray(positives, dtype=bool), np.asarray(weight, np.float64)
    assert (precision[-1], recall[-1]) == (1.0, 0.0)
    assert all(0.0 <= v <= 1.0 for v in precision + recall), (precision, recall)
    assert all(b <= a for a, b in pairwise(recall)), recall
    assert recall[0] == 1.0
    positive_above = _mass_at_or_above(s, p, w, thr)
    negative_above = _mass_at_or_above(s, ~p, w, thr)
    assert [r != 0.0 for r in recall[:-1]] == positive_above
    for v, pos, neg in zip(precision[:-1], positive_above, negative_above, strict=True):
        assert v == (1.0 if not neg else 0.0 if not pos else v), (precision, positive_above, negative_above)
    if sklearn:
        sk_p, sk_r, sk_thr = precision_recall_curve(p, s, sample_weight=w, drop_intermediate=False)
        assert thr == sk_thr.tolist()
        assert precision == pytest.approx(f32(sk_p), abs=TOL)
        assert recall == pytest.approx(f32(sk_r), abs=TOL)


def binned_reference(scores: Any, positives: Any, weight: Any, thresholds: Any) -> dict[str, list[float]]:
    """The binned curves from exact sums (``math.fsum``): at each threshold (decreasing for ROC, increasing for PR)
    the weight of each class scoring at or above it, over the class's total.
    """
    s, p, w = np.asarray(scores, dtype=np.float64), np.asarray(positives, dtype=bool), np.asarray(weight, np.float64)
    thr = sorted(_floats(thresholds))
    total_pos, total_neg = math.fsum(w[p]), math.fsum(w[~p])
    tp = [math.fsum(w[p & (s >= t)]) for t in thr]
    fp = [math.fsum(w[~p & (s >= t)]) for t in thr]
    tpr = [v / total_pos if total_pos else 0.0 for v in tp]
    fpr = [v / total_neg if total_neg else 0.0 for v in fp]
    precision = [a / (a + b) if a + b else math.nan for a, b in zip(tp, fp, strict=True)]
    return {"fpr": fpr[::-1], "tpr": tpr[::-1], "precision": [*precision, 1.0], "recall": [*tpr, 0.0]}


def check_binned(roc: Any, pr: Any, scores: Any, positives: Any, weight: Any, thresholds: Any) -> None:
    """Binned weighted curves over increasing ``thresholds`` whose lowest is at most every score: rates in [0, 1],
    never decreasing as the threshold falls, exactly 0 above a class's highest score, exactly 1 at the lowest.
    """
    ref = binned_reference(scores, positives, weight, thresholds)
    fpr, tpr = _floats(roc[0]), _floats(roc[1])
    precision, recall = _floats(pr[0]), _floats(pr[1])
    thr = sorted(_floats(thresholds))
    s, p, w = np.asarray(scores, dtype=np.float64), np.asarray(positives, dtype=bool), np.asarray(weight, np.float64)
    for rate, mask, name in ((fpr, ~p, "fpr"), (tpr, p, "tpr")):
        assert all(0.0 <= r <= 1.0 for r in rate), rate
        assert all(b >= a for a, b in pairwise(rate)), rate
        assert [r != 0.0 for r in rate] == _mass_at_or_above(s, mask, w, thr[::-1])
        assert rate[-1] == 1.0
        assert rate == pytest.approx(f32(ref[name]), abs=TOL)
    assert recall == pytest.approx(f32(ref["recall"]), abs=TOL)
    assert all(b <= a for a, b in pairwise(recall)), recall
    assert precision == pytest.approx(f32(ref["precision"]), abs=TOL, nan_ok=True)
    assert all(0.0 <= v <= 1.0 for v in precision if not math.isnan(v))
