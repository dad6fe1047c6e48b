"""Exact and binned ROC and precision-recall curves (binary, multiclass one-vs-rest, multilabel)."""

from __future__ import annotations

import warnings
from typing import Literal

import torch
from torch import Tensor

from torchmetrics_varlen.functional import _sweep
from torchmetrics_varlen.functional._count import Binned, Problem, batch_problems
from torchmetrics_varlen.functional._ranking import (
    _NO_NEGATIVES_ROC,
    _NO_POSITIVES_PR,
    _NO_POSITIVES_ROC,
    as_output,
    binned_rate,
    descending,
    roc_from_counts,
    safe_ratio,
)
from torchmetrics_varlen.functional._sort import Counts, materialize
from torchmetrics_varlen.functional._validation import CURVE_AVERAGES, Normalization, RankingArgs, Split, Thresholds
from torchmetrics_varlen.functional._weighted import weighted_batch_problems

Curve = tuple[Tensor, Tensor, Tensor] | tuple[list[Tensor], list[Tensor], list[Tensor]]
CurveAverage = Literal["micro", "macro"] | None


def _exact_roc(counts: Counts) -> tuple[Tensor, Tensor, Tensor]:
    fps, tps, thr = descending(counts)
    fpr, tpr = roc_from_counts(fps, tps)  # integer counts, or float64 sums of sample weights
    return as_output(fpr), as_output(tpr), torch.cat([thr.new_ones(1), thr])


def _exact_pr(counts: Counts) -> tuple[Tensor, Tensor, Tensor]:
    fps, tps, thr = descending(counts)
    precision = safe_ratio(tps, tps + fps, float("nan"))
    if tps.numel() == 0 or float(tps[-1]) <= 0:
        warnings.warn(_NO_POSITIVES_PR, UserWarning, stacklevel=4)
        recall = torch.ones_like(precision)
    else:
        recall = tps.double() / float(tps[-1])
    one, zero = precision.new_ones(1), precision.new_zeros(1)
    return as_output(torch.cat([precision.flip(0), one])), as_output(torch.cat([recall.flip(0), zero])), thr.flip(0)


def _binned_roc(confmat: Tensor, thresholds: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    tps, fps, fns, tns = confmat[:, 1, 1], confmat[:, 0, 1], confmat[:, 1, 0], confmat[:, 0, 0]
    tpr = binned_rate(tps, fns, thresholds, 0.0).flip(0)
    fpr = binned_rate(fps, tns, thresholds, 0.0).flip(0)
    return as_output(fpr), as_output(tpr), thresholds.flip(0)


def _binned_pr(confmat: Tensor, thresholds: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    tps, fps, fns = confmat[:, 1, 1], confmat[:, 0, 1], confmat[:, 1, 0]
    precision = torch.cat([safe_ratio(tps, tps + fps, float("nan")), tps.new_ones(1).double()])
    recall = torch.cat([binned_rate(tps, fns, thresholds, float("nan")), tps.new_zeros(1).double()])
    return as_output(precision), as_output(recall), thresholds


def _curve_of(kind: str, problem: Problem) -> tuple[Tensor, Tensor, Tensor]:
    if isinstance(problem, Binned):
        return (_binned_roc if kind == "roc" else _binned_pr)(problem.confmat, problem.thresholds)
    if _sweep.usable(problem):  # sorted keys on CPU: straight into the outputs, the same bits
        assert not isinstance(problem, Counts)
        if kind == "roc":
            return _sweep.roc(problem, (_NO_NEGATIVES_ROC, _NO_POSITIVES_ROC))
        return _sweep.precision_recall(problem, _NO_POSITIVES_PR)
    return (_exact_roc if kind == "roc" else _exact_pr)(materialize(problem, with_scores=True))


def _interp(x: Tensor, xp: Tensor, fp: Tensor) -> Tensor:
    """Torchmetrics' interpolation rule for its macro curves: the segment of ``x`` is the one after the last of the
    ``xp`` that are ``<= x`` (counted, not searched: ``xp`` need not increase), extended linearly at both ends;
    a vertical segment has slope 0.
    """
    xp, fp, x = xp.double(), fp.double(), x.double()
    if xp.numel() < 2:
        return fp.expand_as(x) if fp.numel() else torch.zeros_like(x)
    dx, dy = xp.diff(), fp.diff()
    slope = torch.where(dx == 0, torch.zeros_like(dy), dy / torch.where(dx == 0, torch.ones_like(dx), dx))
    ordered = torch.sort(xp[~torch.isnan(xp)]).values  # NaN (an undefined binned precision) is never <= x
    at = (torch.searchsorted(ordered, x, right=True) - 1).clamp(0, slope.numel() - 1)
    return fp[at] + slope[at] * (x - xp[at])


def _macro(kind: str, curves: list[tuple[Tensor, Tensor, Tensor]]) -> tuple[Tensor, Tensor, Tensor]:
    """Torchmetrics' ``average="macro"`` curve: the class curves' x values pooled and sorted, the mean of every
    class curve interpolated there, and the pooled thresholds sorted (decreasing for ROC, increasing for PR).
    """
    x = torch.sort(torch.cat([c[0] for c in curves])).values
    y = torch.stack([_interp(x, cx, cy) for cx, cy, _ in curves]).mean(0)
    thresholds = torch.sort(torch.cat([c[2] for c in curves]), descending=kind == "roc").values
    return x, as_output(y), thresholds


def _compute(kind: str, problems: list[Problem], split: Split) -> Curve:
    """The curve of counted problems: one per class / label (lists; ``(K, T)`` tensors binned) or reduced."""
    curves = [_curve_of(kind, p) for p in problems]
    if not split.per_class:
        return curves[0]
    if split.average == "macro":
        return _macro(kind, curves)
    if isinstance(problems[0], Binned):
        return torch.stack([c[0] for c in curves]), torch.stack([c[1] for c in curves]), curves[0][2]
    return [c[0] for c in curves], [c[1] for c in curves], [c[2] for c in curves]


def _curve(
    kind: str, preds: Tensor, target: Tensor, args: RankingArgs, validate_args: bool, sample_weight: Tensor | None
) -> Curve:
    in_unit = args.validate(preds, target, averages=CURVE_AVERAGES) if validate_args else None
    if sample_weight is not None:
        weighted: list[Problem] = list(weighted_batch_problems(preds, target, sample_weight, args))
        return _compute(kind, weighted, Split(args.task, args.average))
    return _compute(kind, batch_problems(preds, target, args, in_unit=in_unit), Split(args.task, args.average))


def roc(
    preds: Tensor,
    target: Tensor,
    *,
    task: str = "binary",
    num_classes: int | None = None,
    num_labels: int | None = None,
    average: CurveAverage = None,
    thresholds: Thresholds = None,
    ignore_index: int | None = None,
    validate_args: bool = True,
    normalization: Normalization = "sigmoid",
    sample_weight: Tensor | None = None,
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
        thresholds: ``None`` for the exact curve, ``torch.float16`` / ``torch.bfloat16`` for the exact curve of the
            rounded scores (histograms), otherwise the thresholds of the binned approximation.
        average: Multiclass only, as torchmetrics: ``None`` (a curve per class), ``"micro"`` (one curve of every
            one-vs-rest entry) or ``"macro"`` (the class curves interpolated at all their points and averaged).
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs.
        normalization: ``"sigmoid"`` (default), ``"softmax"`` (only for scores in [0, 1] in the binary task) or
            ``None`` (keep raw scores), as torchmetrics' ``normalization``.
        sample_weight: Optional non-negative weights, one per sample (shapes: see
            :func:`~torchmetrics_varlen.functional.auroc`): the counts become sums of weights, as scikit-learn's
            curves with ``sample_weight`` (samples of weight 0 add no point).

    Returns:
        ``(fpr, tpr, thresholds)``.

    Raises:
        ValueError: On invalid arguments, mismatched shapes, non-finite scores, labels out of range, or negative /
            non-finite weights.

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
    args = RankingArgs(task, num_classes, num_labels, average, thresholds, ignore_index, normalization)
    return _curve("roc", preds, target, args, validate_args, sample_weight)


def precision_recall_curve(
    preds: Tensor,
    target: Tensor,
    *,
    task: str = "binary",
    num_classes: int | None = None,
    num_labels: int | None = None,
    average: CurveAverage = None,
    thresholds: Thresholds = None,
    ignore_index: int | None = None,
    validate_args: bool = True,
    normalization: Normalization = "sigmoid",
    sample_weight: Tensor | None = None,
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
        thresholds: ``None`` for the exact curve, ``torch.float16`` / ``torch.bfloat16`` for the exact curve of the
            rounded scores (histograms), otherwise the thresholds of the binned approximation.
        average: Multiclass only, as torchmetrics: ``None`` (a curve per class), ``"micro"`` (one curve of every
            one-vs-rest entry) or ``"macro"`` (the class curves interpolated at all their points and averaged).
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs.
        normalization: ``"sigmoid"`` (default), ``"softmax"`` (only for scores in [0, 1] in the binary task) or
            ``None`` (keep raw scores), as torchmetrics' ``normalization``.
        sample_weight: Optional non-negative weights, one per sample (shapes: see
            :func:`~torchmetrics_varlen.functional.auroc`): the counts become sums of weights, as scikit-learn's
            curves with ``sample_weight`` (samples of weight 0 add no point).

    Returns:
        ``(precision, recall, thresholds)``.

    Raises:
        ValueError: On invalid arguments, mismatched shapes, non-finite scores, labels out of range, or negative /
            non-finite weights.

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
    args = RankingArgs(task, num_classes, num_labels, average, thresholds, ignore_index, normalization)
    return _curve("pr", preds, target, args, validate_args, sample_weight)
