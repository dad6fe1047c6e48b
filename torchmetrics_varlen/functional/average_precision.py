"""Exact and binned binary average precision."""

from __future__ import annotations

from torch import Tensor

from torchmetrics_varlen._checks import Thresholds, threshold_tensor, validate_binary_tensors, validate_ranking_args
from torchmetrics_varlen.functional._ranking import (
    _binary_counts,
    _binned_average_precision,
    _binned_confmat,
    _exact_average_precision,
    _format_binary,
)


def average_precision(
    preds: Tensor,
    target: Tensor,
    *,
    thresholds: Thresholds = None,
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""Average precision for binary scores, exact by default.

    Inputs of any shape are flattened: ``preds`` is a floating tensor of scores (probabilities or logits) and
    ``target`` an integer or bool tensor of the same shape with labels in {0, 1}; positions where ``target`` equals
    ``ignore_index`` are dropped.

    With ``thresholds=None`` the value is exact: ``AP = sum_k (R_k - R_{k-1}) P_k`` over the distinct scores in
    decreasing order (tied scores form one step; no interpolation), as scikit-learn's ``average_precision_score``,
    from integer counts accumulated in float64. With ``thresholds`` the binned approximation of torchmetrics'
    ``binary_average_precision`` is returned instead.

    Args:
        preds: Scores, any shape, floating point.
        target: Labels, same shape, integer or bool.
        thresholds: ``None`` for the exact value, otherwise the thresholds of the binned approximation.
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs.

    Returns:
        A float64 scalar tensor. Without positive samples the value is ``0.0`` and a ``UserWarning`` says so, as
        torchmetrics does.

    Raises:
        ValueError: On invalid arguments, mismatched shapes, non-finite scores or labels outside {0, 1}.

    Example:
        >>> from torch import tensor
        >>> average_precision(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        tensor(0.8333, dtype=torch.float64)
    """
    if validate_args:
        validate_ranking_args(thresholds=thresholds, ignore_index=ignore_index)
        validate_binary_tensors(preds, target, ignore_index)
    thr = threshold_tensor(thresholds, preds.device)
    scores, labels = _format_binary(preds, target, ignore_index, binned=thr is not None)
    if thr is not None:
        return _binned_average_precision(_binned_confmat(scores, labels, thr))
    fps, tps, _ = _binary_counts(scores, labels)
    return _exact_average_precision(fps, tps)
