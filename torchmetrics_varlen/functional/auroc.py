"""Exact and binned ROC-AUC for binary, multiclass (one-vs-rest) and multilabel tasks."""

from __future__ import annotations

from torch import Tensor

from torchmetrics_varlen.functional._count import Binned, Problem, batch_problems
from torchmetrics_varlen.functional._ranking import (
    RankStatistic,
    SumsNeeded,
    as_output,
    auroc_from_sums,
    binned_auroc,
    partial_auroc,
    reduce_problems,
)
from torchmetrics_varlen.functional._validation import Average, Normalization, RankingArgs, Split, Thresholds
from torchmetrics_varlen.functional._weighted import (
    WeightedProblem,
    reduce_weighted,
    weighted_batch_problems,
    weighted_partial_auroc,
)

AUROC = RankStatistic(
    name="AUROC",
    needs=SumsNeeded(area=True, ap=False),
    from_sums=auroc_from_sums,
    from_binned=binned_auroc,
    defined=lambda positives, negatives: positives > 0 and negatives > 0,
)


def _compute(problems: list[Problem], split: Split, max_fpr: float | None) -> Tensor:
    """AUROC of counted problems, reduced by ``split.average`` (the partial AUC is binary only)."""
    if max_fpr is not None and max_fpr != 1:
        return as_output(partial_auroc(problems[0], max_fpr))
    return reduce_problems(problems, split, AUROC)


def _compute_weighted(problems: list[WeightedProblem], split: Split, max_fpr: float | None) -> Tensor:
    """Weighted AUROC of counted problems (float64 counts), reduced by ``split.average``."""
    if max_fpr is not None and max_fpr != 1:
        problem = problems[0]
        if isinstance(problem, Binned):
            return as_output(binned_auroc(problem.confmat, problem.thresholds, max_fpr))
        return as_output(weighted_partial_auroc(problem, max_fpr))
    return reduce_weighted(problems, split, AUROC)


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
    sample_weight: Tensor | None = None,
) -> Tensor:
    r"""Area under the ROC curve, exact by default, for binary, multiclass and multilabel tasks.

    Inputs follow torchmetrics:

    - ``task="binary"``: ``preds`` floating scores of any shape (flattened), ``target`` the same shape, labels in
      {0, 1} (integer, bool, or floating ``0.0`` / ``1.0``).
    - ``task="multiclass"``: ``preds (N, C, ...)`` class scores, ``target (N, ...)`` class indices; one-vs-rest
      AUROC per class.
    - ``task="multilabel"``: ``preds (N, L, ...)`` and ``target`` of the same shape, labels in {0, 1}.

    Logits are normalised as torchmetrics does: if any score of the call is outside [0, 1], a sigmoid (binary,
    multilabel) or a softmax over the classes (multiclass) is applied first, by value: each score is the float64
    sigmoid (softmax) of its logit rounded once to float32 (float64 for float64 logits), wherever it sits, so equal
    logits stay tied in any batch and on any rank (torch's own CPU sigmoid rounds by position), and 16-bit logits
    keep their ranking (torchmetrics rounds their sigmoid to 16 bits). In float32 the sigmoid saturates (every logit
    above ~17.3 becomes 1.0, a tie), as in torchmetrics; ``normalization=None`` ranks the raw scores instead.

    With ``thresholds=None`` each value is exact: one sort per class, integer counts of positives and negatives
    at every distinct score (tied scores form one step, as scikit-learn's ``roc_auc_score``), float64, rounded once
    to float32 at the end.
    With ``thresholds`` (an int ``n`` for ``linspace(0, 1, n)``, a list or a 1-D tensor) the binned
    approximation of torchmetrics is returned instead. ``thresholds=torch.float16`` or ``torch.bfloat16`` makes
    every value of that dtype a threshold: the exact value for the scores rounded to that dtype, from 65,536-bin
    histograms (constant memory; see the performance guide for the error against unrounded float32 scores).
    Classes / labels without positive or without negative samples have no AUROC: ``average="none"`` gives NaN
    for them and the other averages leave them out (warning).

    ``sample_weight`` (one non-negative finite weight per sample) gives scikit-learn's weighted AUROC
    (``roc_auc_score(..., sample_weight=...)``): every count becomes a sum of weights (float64), samples of
    weight 0 are left out, ties still form one step. Multiclass / multilabel: a sample's weight applies to every
    class / label of it, and ``average="weighted"`` weighs each class by the weight of its positives.

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
        sample_weight: Optional weights, shape of ``target`` (binary, multiclass), of ``target`` without the label
            dimension (multilabel), or ``(N,)`` for one weight per sample of multi-dimensional inputs.

    Returns:
        A float32 tensor (torchmetrics' dtype; computed exactly, rounded once): a scalar, or one value per class /
        label with ``average="none"``. Binary input with one class only gives ``0.0`` and a ``UserWarning``, as
        torchmetrics does.

    Raises:
        ValueError: On invalid arguments, mismatched shapes, non-finite scores, labels out of range, or negative /
            non-finite weights.

    Example:
        >>> from torch import tensor
        >>> auroc(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        tensor(0.7500)
        >>> auroc(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]), sample_weight=tensor([1.0, 3.0, 1.0, 1.0]))
        tensor(0.6250)
        >>> auroc(tensor([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.3, 0.6], [0.3, 0.4, 0.3]]),
        ...       tensor([0, 1, 2, 1]), task="multiclass", num_classes=3)
        tensor(1.)
    """
    args = RankingArgs(task, num_classes, num_labels, average, thresholds, ignore_index, normalization, max_fpr)
    in_unit = args.validate(preds, target) if validate_args else None
    if sample_weight is not None:
        return _compute_weighted(
            weighted_batch_problems(preds, target, sample_weight, args), Split(task, average), max_fpr
        )
    problems = batch_problems(preds, target, args, with_scores=max_fpr is not None, in_unit=in_unit)
    return _compute(problems, Split(task, average), max_fpr)
