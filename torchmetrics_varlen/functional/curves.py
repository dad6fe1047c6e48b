"""Exact and binned ROC and precision-recall curves (binary, multiclass one-vs-rest, multilabel)."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from torchmetrics_varlen._checks import (
    Normalization,
    Thresholds,
    histogram_dtype,
    threshold_tensor,
    validate_normalization,
    validate_ranking_args,
)
from torchmetrics_varlen.functional._ranking import (
    _NO_POSITIVES_PR,
    _roc_from_counts,
    _safe_ratio,
    as_output,
    descending,
)
from torchmetrics_varlen.functional._sort import Column, Counts, materialize
from torchmetrics_varlen.functional._tasks import (
    binned_state,
    exact_columns,
    format_inputs,
    histogram_columns,
    histogram_state,
    validate_inputs,
    validate_task_args,
)

Curve = tuple[Tensor, Tensor, Tensor] | tuple[list[Tensor], list[Tensor], list[Tensor]]


def _binary_roc(counts: Counts) -> tuple[Tensor, Tensor, Tensor]:
    fps, tps, thr = descending(counts)
    fpr, tpr = _roc_from_counts(fps, tps)
    return as_output(fpr), as_output(tpr), torch.cat([thr.new_ones(1), thr])


def _binary_pr(counts: Counts) -> tuple[Tensor, Tensor, Tensor]:
    fps, tps, thr = descending(counts)
    precision = _safe_ratio(tps, tps + fps, float("nan"))
    if tps.numel() == 0 or int(tps[-1]) == 0:
        warnings.warn(_NO_POSITIVES_PR, UserWarning, stacklevel=3)
        recall = torch.ones_like(precision)
    else:
        recall = tps.double() / float(tps[-1])
    one, zero = precision.new_ones(1), precision.new_zeros(1)
    return as_output(torch.cat([precision.flip(0), one])), as_output(torch.cat([recall.flip(0), zero])), thr.flip(0)


def _t(x: Tensor) -> Tensor:
    """Columns first: ``(T, K) -> (K, T)``; vectors unchanged."""
    return x.transpose(0, 1) if x.ndim == 2 else x


def _binned_roc(confmat: Tensor, thresholds: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    tps, fps, fns, tns = confmat[..., 1, 1], confmat[..., 0, 1], confmat[..., 1, 0], confmat[..., 0, 0]
    tpr = _safe_ratio(tps, tps + fns, 0.0).flip(0)
    fpr = _safe_ratio(fps, fps + tns, 0.0).flip(0)
    return as_output(_t(fpr)), as_output(_t(tpr)), thresholds.flip(0)


def _binned_pr(confmat: Tensor, thresholds: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    tps, fps, fns = confmat[..., 1, 1], confmat[..., 0, 1], confmat[..., 1, 0]
    precision = _safe_ratio(tps, tps + fps, float("nan"))
    recall = _safe_ratio(tps, tps + fns, float("nan"))
    precision = _t(torch.cat([precision, precision.new_ones((1, *precision.shape[1:]))]))
    recall = _t(torch.cat([recall, recall.new_zeros((1, *recall.shape[1:]))]))
    return as_output(precision), as_output(recall), thresholds


def _from_columns(kind: str, cols: list[Column], task: str) -> Curve:
    one = _binary_roc if kind == "roc" else _binary_pr
    if task == "binary":
        return one(materialize(cols[0], with_scores=True))
    parts = [one(materialize(col, with_scores=True)) for col in cols]
    return [p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts]


def _compute_curve(kind: str, preds: Tensor, target: Tensor, task: str) -> Curve:
    """Exact curve(s) of inputs in their stored form: one tuple for binary, lists per class / label otherwise."""
    return _from_columns(kind, exact_columns(preds, target, task, None, True), task)


def _compute_curve_histogram(kind: str, hist: Tensor, dtype: torch.dtype, task: str) -> Curve:
    """Exact curve(s) of the 16-bit-rounded scores, from histograms."""
    return _from_columns(kind, histogram_columns(hist, dtype, task, None, True), task)


def _compute_curve_binned(kind: str, confmat: Tensor, thresholds: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Binned curve(s): ``(T + ...)`` vectors for binary, ``(K, ...)`` matrices per class / label otherwise."""
    return (_binned_roc if kind == "roc" else _binned_pr)(confmat, thresholds)


def _curve(
    kind: str,
    preds: Tensor,
    target: Tensor,
    task: str,
    num_classes: int | None,
    num_labels: int | None,
    thresholds: Thresholds,
    ignore_index: int | None,
    validate_args: bool,
    normalization: Normalization,
) -> Curve:
    if validate_args:
        validate_task_args(task, num_classes, num_labels, None)
        validate_ranking_args(thresholds=thresholds, ignore_index=ignore_index)
        validate_normalization(normalization)
        validate_inputs(preds, target, task, num_classes, num_labels, ignore_index, normalization)
    thr, dtype = threshold_tensor(thresholds, preds.device), histogram_dtype(thresholds)
    scores, labels, _ = format_inputs(preds, target, task, ignore_index, normalization)
    if thr is not None:
        return _compute_curve_binned(kind, binned_state(scores, labels, task, thr), thr)
    if dtype is not None:
        return _compute_curve_histogram(kind, histogram_state(scores, labels, task, dtype), dtype, task)
    return _compute_curve(kind, scores, labels, task)


def roc(
    preds: Tensor,
    target: Tensor,
    *,
    task: str = "binary",
    num_classes: int | None = None,
    num_labels: int | None = None,
    thresholds: Thresholds = None,
    ignore_index: int | None = None,
    validate_args: bool = True,
    normalization: Normalization = "sigmoid",
) -> Curve:
    r"""The ROC curve ``(fpr, tpr, thresholds)``, exact by default, with torchmetrics' conventions.

    Inputs, and the normalisation of logits (so thresholds are probabilities), as for
    :func:`~torchmetrics_varlen.functional.auroc`. Exact mode has one point per distinct score, highest first, after
    a starting point ``(0, 0)`` whose threshold is ``1.0`` (torchmetrics' convention; scikit-learn's ``roc_curve``
    uses ``inf`` there and may drop collinear points). Rates are computed from integer counts and returned as
    float32, thresholds in the dtype of the scores, as torchmetrics does. For multiclass / multilabel tasks each
    element is a list with one tensor per class / label (exact) or a ``(K, T)`` tensor (binned). A class absent
    from ``target`` gives a zero rate and a warning.

    Args:
        preds: Scores.
        target: Labels.
        task: ``"binary"``, ``"multiclass"`` or ``"multilabel"``.
        num_classes: Number of classes (multiclass).
        num_labels: Number of labels (multilabel).
        thresholds: ``None`` for the exact curve, otherwise the thresholds of the binned approximation.
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs.
        normalization: ``"sigmoid"`` (default), ``"softmax"`` (only for scores in [0, 1] in the binary task) or
            ``None`` (keep raw scores), as torchmetrics' ``normalization``.

    Returns:
        ``(fpr, tpr, thresholds)``.

    Example:
        >>> from torch import tensor
        >>> fpr, tpr, thr = roc(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        >>> fpr
        tensor([0.0000, 0.0000, 0.5000, 0.5000, 1.0000])
        >>> tpr
        tensor([0.0000, 0.5000, 0.5000, 1.0000, 1.0000])
        >>> thr
        tensor([1.0000, 0.8000, 0.4000, 0.3500, 0.1000])
    """
    return _curve(
        "roc", preds, target, task, num_classes, num_labels, thresholds, ignore_index, validate_args, normalization
    )


def precision_recall_curve(
    preds: Tensor,
    target: Tensor,
    *,
    task: str = "binary",
    num_classes: int | None = None,
    num_labels: int | None = None,
    thresholds: Thresholds = None,
    ignore_index: int | None = None,
    validate_args: bool = True,
    normalization: Normalization = "sigmoid",
) -> Curve:
    r"""The precision-recall curve ``(precision, recall, thresholds)``, exact by default, as torchmetrics returns it.

    Inputs and logits as for :func:`roc`; precision and recall are float32, thresholds in the dtype of the scores.
    Exact mode has one point per distinct score in increasing order of threshold, then the final point
    ``(precision=1, recall=0)`` without a threshold. Unlike scikit-learn's ``precision_recall_curve`` the points
    after full recall are kept (torchmetrics' convention). Multiclass / multilabel: lists per class / label
    (exact) or ``(K, T + 1)`` tensors (binned).

    Args:
        preds: Scores.
        target: Labels.
        task: ``"binary"``, ``"multiclass"`` or ``"multilabel"``.
        num_classes: Number of classes (multiclass).
        num_labels: Number of labels (multilabel).
        thresholds: ``None`` for the exact curve, otherwise the thresholds of the binned approximation.
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs.
        normalization: ``"sigmoid"`` (default), ``"softmax"`` (only for scores in [0, 1] in the binary task) or
            ``None`` (keep raw scores), as torchmetrics' ``normalization``.

    Returns:
        ``(precision, recall, thresholds)``.

    Example:
        >>> from torch import tensor
        >>> precision, recall, thr = precision_recall_curve(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        >>> precision
        tensor([0.5000, 0.6667, 0.5000, 1.0000, 1.0000])
        >>> recall
        tensor([1.0000, 1.0000, 0.5000, 0.5000, 0.0000])
        >>> thr
        tensor([0.1000, 0.3500, 0.4000, 0.8000])
    """
    return _curve(
        "pr", preds, target, task, num_classes, num_labels, thresholds, ignore_index, validate_args, normalization
    )
