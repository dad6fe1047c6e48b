"""Exact ranking statistics shared by the AUROC and average-precision functions.

Everything here is pure tensor math: no validation, no ``torch.distributed``.

The exact path turns scores into integer counts per distinct threshold (one sort, one cumulative sum) and only
then into float64. Because the counts are integers, the result depends on the multiset of ``(score, target)``
pairs only, never on their order: any split of the data over ranks, batches or shuffles gives the same bits.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from torchmetrics_varlen.functional._sort import Counts

_NO_POSITIVES_ROC = (
    "No positive samples in targets, true positive value should be meaningless."
    " Returning zero tensor in true positive score"
)
_NO_NEGATIVES_ROC = (
    "No negative samples in targets, false positive value should be meaningless."
    " Returning zero tensor in false positive score"
)
_NO_POSITIVES_PR = "No positive samples found in target, recall is undefined. Setting recall to one for all thresholds."


def descending(counts: Counts) -> tuple[Tensor, Tensor, Tensor]:
    """``(fps, tps, thresholds)`` at every distinct score, highest first (scikit-learn's ``_binary_clf_curve``)."""
    assert counts.scores is not None
    if counts.pos_le.numel() == 0:
        return counts.pos_le, counts.all_le, counts.scores
    n_pos, n_all = counts.pos_le[-1], counts.all_le[-1]
    pos_below = torch.cat([counts.pos_le.new_zeros(1), counts.pos_le[:-1]])
    all_below = torch.cat([counts.all_le.new_zeros(1), counts.all_le[:-1]])
    tps = (n_pos - pos_below).flip(0)
    fps = ((n_all - n_pos) - (all_below - pos_below)).flip(0)
    return fps, tps, counts.scores.flip(0)


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """Integer dot product (CUDA has no integer ``dot``)."""
    return torch.dot(a, b) if a.device.type == "cpu" else (a * b).sum()


def totals(counts: Counts) -> tuple[int, int]:
    """``(positives, negatives)``."""
    if counts.pos_le.numel() == 0:
        return 0, 0
    n_pos = int(counts.pos_le[-1])
    return n_pos, int(counts.all_le[-1]) - n_pos


def auroc_from_counts(counts: Counts, max_fpr: float | None = None, warn: bool = True) -> Tensor:
    """Exact AUROC (or McClish partial AUC); one class only gives 0 with torchmetrics' warnings.

    The full area is an integer divided once: exact up to one float64 rounding, whatever the order of the samples.
    """
    n_pos, n_neg = totals(counts)
    if warn and n_neg <= 0:
        warnings.warn(_NO_NEGATIVES_ROC, UserWarning, stacklevel=3)
    if warn and n_pos <= 0:
        warnings.warn(_NO_POSITIVES_ROC, UserWarning, stacklevel=3)
    if n_neg <= 0 or n_pos <= 0:
        return torch.zeros((), dtype=torch.float64, device=counts.pos_le.device)
    if max_fpr is not None and max_fpr != 1:
        return _partial_auroc(*descending(counts)[:2], max_fpr)
    # Each positive beats the negatives below its score and ties with those at it: twice the area times P * N is
    # sum_g pos_g * (neg_below_g + neg_le_g), computed with dot products of views (no per-group temporaries).
    neg_le = counts.all_le - counts.pos_le
    pos_g = torch.diff(counts.pos_le, prepend=counts.pos_le.new_zeros(1))
    twice_area = _dot(pos_g, neg_le) + _dot(pos_g[1:], neg_le[:-1])
    return twice_area.double() / (2.0 * n_pos * n_neg)


def average_precision_from_counts(counts: Counts, warn: bool = True) -> Tensor:
    """Exact average precision; no positives gives 0 with torchmetrics' warning."""
    n_pos, n_neg = totals(counts)
    if n_pos <= 0:
        if warn:
            warnings.warn(_NO_POSITIVES_PR, UserWarning, stacklevel=3)
        return torch.zeros((), dtype=torch.float64, device=counts.pos_le.device)
    zero = counts.pos_le.new_zeros(1)
    pos_below = torch.cat([zero, counts.pos_le[:-1]])
    all_below = torch.cat([zero, counts.all_le[:-1]])
    # At the threshold of each distinct score: TP = positives at or above it, TP + FP = samples at or above it.
    tps = (n_pos - pos_below).double()
    precision = tps / ((n_pos + n_neg) - all_below).double()
    return torch.dot((counts.pos_le - pos_below).double(), precision) / n_pos


def _roc_from_counts(fps: Tensor, tps: Tensor, warn: bool = True) -> tuple[Tensor, Tensor]:
    """Float64 ``(fpr, tpr)`` with the origin prepended; a class that is absent gives a zero rate and a warning."""
    zero = fps.new_zeros(1)
    fps = torch.cat([zero, fps])
    tps = torch.cat([zero, tps])
    n_neg, n_pos = int(fps[-1]), int(tps[-1])
    if n_neg <= 0:
        if warn:
            warnings.warn(_NO_NEGATIVES_ROC, UserWarning, stacklevel=3)
        fpr = torch.zeros_like(fps, dtype=torch.float64)
    else:
        fpr = fps.double() / n_neg
    if n_pos <= 0:
        if warn:
            warnings.warn(_NO_POSITIVES_ROC, UserWarning, stacklevel=3)
        tpr = torch.zeros_like(tps, dtype=torch.float64)
    else:
        tpr = tps.double() / n_pos
    return fpr, tpr


def _partial_auroc(fps: Tensor, tps: Tensor, max_fpr: float) -> Tensor:
    """McClish-standardised partial AUC up to ``max_fpr`` (scikit-learn's ``max_fpr``), both classes present."""
    fpr, tpr = _roc_from_counts(fps, tps, warn=False)
    stop = int(torch.searchsorted(fpr, torch.tensor(max_fpr, dtype=torch.float64, device=fpr.device), right=True))
    x0, x1, y0, y1 = fpr[stop - 1], fpr[stop], tpr[stop - 1], tpr[stop]
    interp = y0 + (y1 - y0) * (max_fpr - x0) / (x1 - x0)
    x = torch.cat([fpr[:stop], fpr.new_tensor([max_fpr])])
    y = torch.cat([tpr[:stop], interp.reshape(1)])
    partial = torch.trapezoid(y, x)
    min_area = 0.5 * max_fpr**2
    return 0.5 * (1 + (partial - min_area) / (max_fpr - min_area))


def _binned_confmat(preds: Tensor, target: Tensor, thresholds: Tensor) -> Tensor:
    """Multi-threshold confusion matrix ``[T, 2, 2]`` (``[t, target, pred >= thr]``) in int64, as torchmetrics lays it.

    One ``bucketize`` and two ``bincount`` calls instead of a ``[N, T]`` comparison.
    """
    n_thr = thresholds.numel()
    sorted_thr, thr_order = torch.sort(thresholds.to(torch.float64))
    # Number of thresholds <= score: the score is ">= thr" for exactly the first `bucket` sorted thresholds.
    bucket = torch.bucketize(preds.to(torch.float64), sorted_thr, right=True)
    positive = target.reshape(-1).to(torch.bool)
    pos_hist = torch.bincount(bucket[positive], minlength=n_thr + 1)
    neg_hist = torch.bincount(bucket[~positive], minlength=n_thr + 1)
    # Predicted positive at sorted threshold i: buckets i+1 .. T.
    tp_sorted = torch.flip(torch.cumsum(torch.flip(pos_hist, [0]), 0), [0])[1:]
    fp_sorted = torch.flip(torch.cumsum(torch.flip(neg_hist, [0]), 0), [0])[1:]
    n_pos, n_neg = pos_hist.sum(), neg_hist.sum()
    confmat = torch.empty((n_thr, 2, 2), dtype=torch.int64, device=preds.device)
    confmat[thr_order, 1, 1] = tp_sorted
    confmat[thr_order, 0, 1] = fp_sorted
    confmat[thr_order, 1, 0] = n_pos - tp_sorted
    confmat[thr_order, 0, 0] = n_neg - fp_sorted
    return confmat


def _safe_ratio(num: Tensor, den: Tensor, fill: float) -> Tensor:
    num, den = num.double(), den.double()
    return torch.where(den == 0, torch.full_like(num, fill), num / torch.where(den == 0, torch.ones_like(den), den))


def _binned_auroc(confmat: Tensor, thresholds: Tensor, max_fpr: float | None = None) -> Tensor:
    """AUROC from a multi-threshold confusion matrix, the way torchmetrics' binned mode computes it."""
    tps, fps, fns, tns = confmat[:, 1, 1], confmat[:, 0, 1], confmat[:, 1, 0], confmat[:, 0, 0]
    tpr = _safe_ratio(tps, tps + fns, 0.0).flip(0)
    fpr = _safe_ratio(fps, fps + tns, 0.0).flip(0)
    if max_fpr is None or max_fpr == 1 or fpr.sum() == 0 or tpr.sum() == 0:
        return torch.trapezoid(tpr, fpr)
    limit = fpr.new_tensor(max_fpr)
    stop = int(torch.bucketize(limit, fpr, right=True))
    weight = (limit - fpr[stop - 1]) / (fpr[stop] - fpr[stop - 1])
    interp = torch.lerp(tpr[stop - 1], tpr[stop], weight)
    partial = torch.trapezoid(torch.cat([tpr[:stop], interp.reshape(1)]), torch.cat([fpr[:stop], limit.reshape(1)]))
    min_area = 0.5 * max_fpr**2
    return 0.5 * (1 + (partial - min_area) / (max_fpr - min_area))


def _binned_average_precision(confmat: Tensor) -> Tensor:
    """Average precision from a multi-threshold confusion matrix, the way torchmetrics' binned mode computes it."""
    tps, fps, fns = confmat[:, 1, 1], confmat[:, 0, 1], confmat[:, 1, 0]
    precision = torch.cat([_safe_ratio(tps, tps + fps, 0.0), tps.new_ones(1).double()])
    recall = torch.cat([_safe_ratio(tps, tps + fns, 0.0), tps.new_zeros(1).double()])
    return -torch.sum((recall[1:] - recall[:-1]) * precision[:-1])


def _format_binary(preds: Tensor, target: Tensor, ignore_index: int | None, binned: bool) -> tuple[Tensor, Tensor]:
    """Flatten, drop ``ignore_index`` positions, and store labels as ``bool``.

    Only the binned mode squashes logits with a sigmoid (its thresholds live in [0, 1]), with torchmetrics' rule:
    a batch with any score outside [0, 1] is treated as logits. The exact mode ranks the raw scores: AUROC and AP
    do not change under a monotone map, and skipping it avoids float32 sigmoid saturation turning distinct logits
    into ties.
    """
    preds = preds.reshape(-1)
    target = target.reshape(-1)
    if ignore_index is not None:
        keep = target != ignore_index
        preds, target = preds[keep], target[keep]
    if binned and preds.numel() and not bool(((preds >= 0) & (preds <= 1)).all()):
        preds = preds.sigmoid()
    return preds, target.to(torch.bool)
