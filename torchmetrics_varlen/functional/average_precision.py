"""Exact and binned average precision for binary, multiclass (one-vs-rest) and multilabel tasks."""

from __future__ import annotations

from torch import Tensor

from torchmetrics_varlen.functional._count import batch_problems
from torchmetrics_varlen.functional._ranking import (
    RankStatistic,
    SumsNeeded,
    average_precision_from_sums,
    binned_average_precision,
    reduce_problems,
)
from torchmetrics_varlen.functional._validation import Average, Normalization, RankingArgs, Split, Thresholds
from torchmetrics_varlen.functional._weighted import reduce_weighted, weighted_batch_problems

AVERAGE_PRECISION = RankStatistic(
    name="Average precision",
    needs=SumsNeeded(area=False, ap=True),
    from_sums=average_precision_from_sums,
    from_binned=lambda confmat, _thresholds: binned_average_precision(confmat),
    defined=lambda positives, _negatives: positives > 0,
)


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
    sample_weight: Tensor | None = None,
) -> Tensor:
    r"""Average precision, exact by default, for binary, multiclass and multilabel tasks.

    Inputs, and the normalisation of logits, as for :func:`~torchmetrics_varlen.functional.auroc`. With
    ``thresholds=None`` each value is exact: ``AP = sum_k (R_k - R_{k-1}) P_k`` over the distinct scores in
    decreasing order (tied scores form one step; no interpolation), as scikit-learn's ``average_precision_score``,
    from integer counts accumulated in float64 and rounded once to float32.
    With ``thresholds`` the binned approximation of torchmetrics is returned instead. Classes / labels without
    positive samples have no AP: NaN with ``average="none"``, left out of the other averages (warning).
    ``sample_weight`` gives scikit-learn's weighted ``average_precision_score`` (see
    :func:`~torchmetrics_varlen.functional.auroc` for shapes and rules).

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
        sample_weight: Optional non-negative weights, one per sample (shapes: see
            :func:`~torchmetrics_varlen.functional.auroc`).

    Returns:
        A float32 tensor (torchmetrics' dtype; computed exactly, rounded once): a scalar, or one value per class /
        label with ``average="none"``. Binary input without positives gives ``0.0`` and a ``UserWarning``, as
        torchmetrics does.

    Raises:
        ValueError: On invalid arguments, mismatched shapes, non-finite scores, labels out of range, or negative /
            non-finite weights.

    Example:
        >>> from torch import tensor
        >>> average_precision(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        tensor(0.8333)
        >>> average_precision(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]),
        ...                   sample_weight=tensor([1.0, 3.0, 1.0, 1.0]))
        tensor(0.7000)
    """
    args = RankingArgs(task, num_classes, num_labels, average, thresholds, ignore_index, normalization)
    in_unit = args.validate(preds, target) if validate_args else None
    if sample_weight is not None:
        weighted = weighted_batch_problems(preds, target, sample_weight, args)
        return reduce_weighted(weighted, Split(task, average), AVERAGE_PRECISION)
    problems = batch_problems(preds, target, args, with_scores=False, in_unit=in_unit)
    return reduce_problems(problems, Split(task, average), AVERAGE_PRECISION)
