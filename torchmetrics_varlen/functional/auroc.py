"""Exact and binned ROC-AUC for binary, multiclass (one-vs-rest) and multilabel tasks."""

from __future__ import annotations

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
    RankSums,
    _binned_auroc,
    as_output,
    auroc_from_sums,
    auroc_of,
    rank_sums,
)
from torchmetrics_varlen.functional._sort import Column, column_device
from torchmetrics_varlen.functional._tasks import (
    Average,
    binned_state,
    column_support,
    exact_columns,
    format_inputs,
    histogram_columns,
    histogram_state,
    reduce_columns,
    reduce_sums,
    validate_inputs,
    validate_task_args,
)


def _validate_args(
    task: str,
    num_classes: int | None,
    num_labels: int | None,
    average: Average,
    max_fpr: float | None,
    thresholds: Thresholds,
    ignore_index: int | None,
) -> None:
    validate_task_args(task, num_classes, num_labels, average)
    validate_ranking_args(max_fpr=max_fpr, thresholds=thresholds, ignore_index=ignore_index)
    if max_fpr is not None and task != "binary":
        msg = f"Argument `max_fpr` (partial AUC) is only defined for task='binary', but got task={task!r}."
        raise ValueError(msg)


def _from_columns(cols: list[Column], task: str, average: Average, max_fpr: float | None) -> Tensor:
    """AUROC of each binary problem, reduced by ``average``."""
    if max_fpr is not None and max_fpr != 1:
        return as_output(auroc_of(cols[0], max_fpr))
    device = column_device(cols[0]) if cols else torch.device("cpu")
    return _from_sums([rank_sums(col, ap=False) for col in cols], task, average, device)


def _from_sums(sums: list[RankSums], task: str, average: Average, device: torch.device) -> Tensor:
    """AUROC of each binary problem from its :class:`RankSums`, reduced by ``average``."""
    return as_output(
        reduce_sums(sums, task, average, device, auroc_from_sums, lambda s: 0 < s.n_pos < s.n_all, "AUROC")
    )


def _compute(preds: Tensor, target: Tensor, task: str, average: Average, max_fpr: float | None) -> Tensor:
    """Exact AUROC of inputs in their stored form (see ``_tasks``)."""
    return _from_columns(exact_columns(preds, target, task, average, max_fpr is not None), task, average, max_fpr)


def _compute_histogram(hist: Tensor, dtype: torch.dtype, task: str, average: Average, max_fpr: float | None) -> Tensor:
    """Exact AUROC of the 16-bit-rounded scores, from histograms."""
    cols = histogram_columns(hist, dtype, task, average, max_fpr is not None)
    return _from_columns(cols, task, average, max_fpr)


def _compute_binned(confmat: Tensor, thresholds: Tensor, task: str, average: Average, max_fpr: float | None) -> Tensor:
    """Binned AUROC from the summed confusion matrices."""
    if task == "binary":
        return as_output(_binned_auroc(confmat, thresholds, max_fpr))
    if task == "multilabel" and average == "micro":
        return as_output(_binned_auroc(confmat.sum(1), thresholds))
    positives, negatives = column_support(confmat)
    values = torch.stack([_binned_auroc(confmat[:, k], thresholds) for k in range(confmat.shape[1])])
    values = torch.where((positives == 0) | (negatives == 0), torch.full_like(values, float("nan")), values)
    return as_output(reduce_columns(values, positives, average, "AUROC"))


def auroc(
    preds: Tensor,
    target: Tensor,
    *,
    task: str = "binary",
    num_classes: int | None = None,
    num_labels: int | None = None,
    average: Average = "macro",
    max_fpr: float | None = None,
    thresholds: Thresholds = None,
    ignore_index: int | None = None,
    validate_args: bool = True,
    normalization: Normalization = "sigmoid",
) -> Tensor:
    r"""Area under the ROC curve, exact by default, for binary, multiclass and multilabel tasks.

    Inputs follow torchmetrics:

    - ``task="binary"``: ``preds`` floating scores of any shape (flattened), ``target`` the same shape, labels in
      {0, 1} (integer, bool, or floating ``0.0`` / ``1.0``).
    - ``task="multiclass"``: ``preds (N, C, ...)`` class scores, ``target (N, ...)`` class indices; one-vs-rest
      AUROC per class.
    - ``task="multilabel"``: ``preds (N, L, ...)`` and ``target`` of the same shape, labels in {0, 1}.

    Logits are normalised as torchmetrics does: if any score of the call is outside [0, 1], a sigmoid (binary,
    multilabel) or a softmax over the classes (multiclass) is applied first. In float32 the sigmoid saturates (every
    logit above ~17 becomes 1.0, a tie), as in torchmetrics; ``normalization=None`` ranks the raw scores instead.

    With ``thresholds=None`` each value is exact: one sort per class, integer counts of positives and negatives
    at every distinct score (tied scores form one step, as scikit-learn's ``roc_auc_score``), float64, rounded once
    to float32 at the end.
    With ``thresholds`` (an int ``n`` for ``linspace(0, 1, n)``, a list or a 1-D tensor) the binned
    approximation of torchmetrics is returned instead. ``thresholds=torch.float16`` or ``torch.bfloat16`` makes
    every value of that dtype a threshold: the exact value for the scores rounded to that dtype, from 65,536-bin
    histograms (constant memory; see the performance guide for the error against unrounded float32 scores).
    Classes / labels without positive or without negative samples have no AUROC: ``average="none"`` gives NaN
    for them and the other averages leave them out (warning).

    Args:
        preds: Scores, see above.
        target: Labels, see above.
        task: ``"binary"``, ``"multiclass"`` or ``"multilabel"``.
        num_classes: Number of classes (multiclass).
        num_labels: Number of labels (multilabel).
        average: ``"macro"``, ``"weighted"`` (by the number of positives), ``"none"`` (per class), or
            ``"micro"`` (multilabel: all entries as one binary problem). Ignored for binary.
        max_fpr: Binary only: the McClish-standardised partial AUC over false positive rates in ``[0, max_fpr]``.
        thresholds: ``None`` for exact values, ``torch.float16`` / ``torch.bfloat16`` for the exact value of the
            rounded scores (histograms), otherwise the thresholds of the binned approximation.
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs.
        normalization: ``"sigmoid"`` (default), ``"softmax"`` (only for scores in [0, 1] in the binary task) or
            ``None`` (keep raw scores); see above.

    Returns:
        A float32 tensor (torchmetrics' dtype; computed exactly, rounded once): a scalar, or one value per class /
        label with ``average="none"``. Binary input with one class only gives ``0.0`` and a ``UserWarning``, as
        torchmetrics does.

    Raises:
        ValueError: On invalid arguments, mismatched shapes, non-finite scores or labels out of range.

    Example:
        >>> from torch import tensor
        >>> auroc(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        tensor(0.7500)
        >>> auroc(tensor([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.3, 0.6], [0.3, 0.4, 0.3]]),
        ...       tensor([0, 1, 2, 1]), task="multiclass", num_classes=3)
        tensor(1.)
    """
    if validate_args:
        _validate_args(task, num_classes, num_labels, average, max_fpr, thresholds, ignore_index)
        validate_normalization(normalization)
        validate_inputs(preds, target, task, num_classes, num_labels, ignore_index, normalization)
    thr, dtype = threshold_tensor(thresholds, preds.device), histogram_dtype(thresholds)
    scores, labels, _ = format_inputs(preds, target, task, ignore_index, normalization)
    if thr is not None:
        return _compute_binned(binned_state(scores, labels, task, thr), thr, task, average, max_fpr)
    if dtype is not None:
        return _compute_histogram(histogram_state(scores, labels, task, dtype), dtype, task, average, max_fpr)
    return _compute(scores, labels, task, average, max_fpr)
