"""Exact and binned average precision for binary, multiclass (one-vs-rest) and multilabel tasks."""

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
    _binned_average_precision,
    as_output,
    average_precision_from_sums,
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
    thresholds: Thresholds,
    ignore_index: int | None,
) -> None:
    validate_task_args(task, num_classes, num_labels, average)
    validate_ranking_args(thresholds=thresholds, ignore_index=ignore_index)


def _from_columns(cols: list[Column], task: str, average: Average) -> Tensor:
    """Average precision of each binary problem, reduced by ``average``."""
    device = column_device(cols[0]) if cols else torch.device("cpu")
    return _from_sums([rank_sums(col, area=False) for col in cols], task, average, device)


def _from_sums(sums: list[RankSums], task: str, average: Average, device: torch.device) -> Tensor:
    """Average precision of each binary problem from its :class:`RankSums`, reduced by ``average``."""
    return as_output(
        reduce_sums(
            sums, task, average, device, average_precision_from_sums, lambda s: s.n_pos > 0, "Average precision"
        )
    )


def _compute(preds: Tensor, target: Tensor, task: str, average: Average) -> Tensor:
    """Exact average precision of inputs in their stored form (see ``_tasks``)."""
    return _from_columns(exact_columns(preds, target, task, average, False), task, average)


def _compute_histogram(hist: Tensor, dtype: torch.dtype, task: str, average: Average) -> Tensor:
    """Exact average precision of the 16-bit-rounded scores, from histograms."""
    return _from_columns(histogram_columns(hist, dtype, task, average, False), task, average)


def _compute_binned(confmat: Tensor, task: str, average: Average) -> Tensor:
    """Binned average precision from the summed confusion matrices."""
    if task == "binary":
        return as_output(_binned_average_precision(confmat))
    if task == "multilabel" and average == "micro":
        return as_output(_binned_average_precision(confmat.sum(1)))
    positives, _ = column_support(confmat)
    values = torch.stack([_binned_average_precision(confmat[:, k]) for k in range(confmat.shape[1])])
    values = torch.where(positives == 0, torch.full_like(values, float("nan")), values)
    return as_output(reduce_columns(values, positives, average, "Average precision"))


def average_precision(
    preds: Tensor,
    target: Tensor,
    *,
    task: str = "binary",
    num_classes: int | None = None,
    num_labels: int | None = None,
    average: Average = "macro",
    thresholds: Thresholds = None,
    ignore_index: int | None = None,
    validate_args: bool = True,
    normalization: Normalization = "sigmoid",
) -> Tensor:
    r"""Average precision, exact by default, for binary, multiclass and multilabel tasks.

    Inputs, and the normalisation of logits, as for :func:`~torchmetrics_varlen.functional.auroc`. With
    ``thresholds=None`` each value is exact: ``AP = sum_k (R_k - R_{k-1}) P_k`` over the distinct scores in
    decreasing order (tied scores form one step; no interpolation), as scikit-learn's ``average_precision_score``,
    from integer counts accumulated in float64 and rounded once to float32.
    With ``thresholds`` the binned approximation of torchmetrics is returned instead. Classes / labels without
    positive samples have no AP: NaN with ``average="none"``, left out of the other averages (warning).

    Args:
        preds: Scores.
        target: Labels.
        task: ``"binary"``, ``"multiclass"`` or ``"multilabel"``.
        num_classes: Number of classes (multiclass).
        num_labels: Number of labels (multilabel).
        average: ``"macro"``, ``"weighted"`` (by the number of positives), ``"none"``, or ``"micro"`` (multilabel).
        thresholds: ``None`` for exact values, ``torch.float16`` / ``torch.bfloat16`` for the exact value of the
            rounded scores (histograms), otherwise the thresholds of the binned approximation.
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs.
        normalization: ``"sigmoid"`` (default), ``"softmax"`` (only for scores in [0, 1] in the binary task) or
            ``None`` (keep raw scores), as torchmetrics' ``normalization``.

    Returns:
        A float32 tensor (torchmetrics' dtype; computed exactly, rounded once): a scalar, or one value per class /
        label with ``average="none"``. Binary input without positives gives ``0.0`` and a ``UserWarning``, as
        torchmetrics does.

    Raises:
        ValueError: On invalid arguments, mismatched shapes, non-finite scores or labels out of range.

    Example:
        >>> from torch import tensor
        >>> average_precision(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        tensor(0.8333)
    """
    if validate_args:
        _validate_args(task, num_classes, num_labels, average, thresholds, ignore_index)
        validate_normalization(normalization)
        validate_inputs(preds, target, task, num_classes, num_labels, ignore_index, normalization)
    thr, dtype = threshold_tensor(thresholds, preds.device), histogram_dtype(thresholds)
    scores, labels, _ = format_inputs(preds, target, task, ignore_index, normalization)
    if thr is not None:
        return _compute_binned(binned_state(scores, labels, task, thr), task, average)
    if dtype is not None:
        return _compute_histogram(histogram_state(scores, labels, task, dtype), dtype, task, average)
    return _compute(scores, labels, task, average)
