"""Exact and binned binary ROC-AUC."""

from __future__ import annotations

from torch import Tensor

from torchmetrics_varlen._checks import Thresholds, threshold_tensor, validate_binary_tensors, validate_ranking_args
from torchmetrics_varlen.functional._ranking import (
    _binary_counts,
    _binned_auroc,
    _binned_confmat,
    _exact_auroc,
    _format_binary,
)


def auroc(
    preds: Tensor,
    target: Tensor,
    *,
    max_fpr: float | None = None,
    thresholds: Thresholds = None,
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""Area under the ROC curve for binary scores, exact by default.

    Inputs of any shape are flattened: ``preds`` is a floating tensor of scores (probabilities or logits) and
    ``target`` an integer or bool tensor of the same shape with labels in {0, 1}; positions where ``target`` equals
    ``ignore_index`` are dropped.

    With ``thresholds=None`` the value is exact: one sort of the scores, integer counts of positives and negatives
    at every distinct score (tied scores form one step, as in scikit-learn's ``roc_auc_score``), and one float64
    division at the end. Logits are ranked as they are (the area does not change under a sigmoid). With
    ``thresholds`` (an int ``n`` for ``linspace(0, 1, n)``, a list or a 1-D tensor) the binned approximation of
    torchmetrics' ``binary_auroc`` is returned instead.

    Args:
        preds: Scores, any shape, floating point.
        target: Labels, same shape, integer or bool.
        max_fpr: If given, the McClish-standardised partial AUC over false positive rates in ``[0, max_fpr]``.
        thresholds: ``None`` for the exact value, otherwise the thresholds of the binned approximation.
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs (set ``False`` to skip the checks on a hot path).

    Returns:
        A float64 scalar tensor. If only one class is present the value is ``0.0`` and a ``UserWarning`` says so,
        as torchmetrics does.

    Raises:
        ValueError: On invalid arguments, mismatched shapes, non-finite scores or labels outside {0, 1}.

    Example:
        >>> from torch import tensor
        >>> auroc(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        tensor(0.7500, dtype=torch.float64)
    """
    if validate_args:
        validate_ranking_args(max_fpr=max_fpr, thresholds=thresholds, ignore_index=ignore_index)
        validate_binary_tensors(preds, target, ignore_index)
    thr = threshold_tensor(thresholds, preds.device)
    scores, labels = _format_binary(preds, target, ignore_index, binned=thr is not None)
    if thr is not None:
        return _binned_auroc(_binned_confmat(scores, labels, thr), thr, max_fpr)
    fps, tps, _ = _binary_counts(scores, labels)
    return _exact_auroc(fps, tps, max_fpr)
