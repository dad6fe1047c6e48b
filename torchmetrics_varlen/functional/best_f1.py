"""The best F1 over all thresholds, and the threshold that attains it, exact."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from torchmetrics_varlen.functional import _sweep
from torchmetrics_varlen.functional._count import Binned, Problem, batch_problems, problem_device
from torchmetrics_varlen.functional._ranking import as_output, descending
from torchmetrics_varlen.functional._sort import Counts, SortedKeys, materialize, size
from torchmetrics_varlen.functional._validation import Normalization, RankingArgs, Split

TASKS = ("binary", "multilabel")


def _binary_best_f1(problem: Counts | SortedKeys) -> tuple[Tensor, Tensor]:
    if size(problem)[0] == 0:
        warnings.warn("No positive samples in targets: F1 is 0 at every threshold.", UserWarning, stacklevel=4)
        if isinstance(problem, SortedKeys):
            dtype = problem.dtype
        else:
            assert problem.scores is not None
            dtype = problem.scores.dtype
        device = problem_device(problem)
        return as_output(torch.zeros((), device=device)), torch.tensor(float("nan"), dtype=dtype, device=device)
    if _sweep.usable(problem):  # sorted keys on CPU: one pass, the same bits
        assert isinstance(problem, SortedKeys)
        f1, threshold = _sweep.best_f1(problem)
        return as_output(f1), threshold
    fps, tps, thresholds = descending(materialize(problem, with_scores=True))
    n_pos = int(tps[-1])
    # F1 = 2 TP / (2 TP + FP + FN) = 2 TP / (TP + FP + P): integer numerator and denominator, one division.
    f1 = 2.0 * tps.double() / (tps + fps + n_pos).double()
    best = int(torch.argmax(f1))  # first maximum: the highest threshold among ties (argmax of the float64 values)
    return as_output(f1[best]), thresholds[best]


def _compute(problems: list[Problem], split: Split) -> tuple[Tensor, Tensor]:
    """Best F1 of counted problems (exact or 16-bit): a pair, or a pair of ``(L,)`` vectors per label."""
    pairs = [_binary_best_f1(p) for p in problems if not isinstance(p, Binned)]
    if not split.per_class:
        return pairs[0]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def best_f1(
    preds: Tensor,
    target: Tensor,
    *,
    task: str = "binary",
    num_labels: int | None = None,
    ignore_index: int | None = None,
    validate_args: bool = True,
    normalization: Normalization = "sigmoid",
) -> tuple[Tensor, Tensor]:
    r"""The maximum F1 score over every threshold, and the threshold that attains it.

    A sample is predicted positive when its score is ``>= threshold``. Every distinct score is tried (the exact
    precision-recall curve), F1 is computed from integer counts as ``2 TP / (TP + FP + P)``, and among thresholds
    with the same best F1 the highest is returned. Without positive samples F1 is 0 everywhere: the threshold is
    NaN and a warning says so. Logits are normalised per call as in :func:`~torchmetrics_varlen.functional.auroc`
    (the threshold is then a probability); ``normalization=None`` keeps raw scores and returns a logit threshold.

    Args:
        preds: Scores: any shape for binary, ``(N, L, ...)`` for multilabel.
        target: Labels in {0, 1}, same shape.
        task: ``"binary"`` or ``"multilabel"`` (one result per label).
        num_labels: Number of labels (multilabel).
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs.
        normalization: ``"sigmoid"`` (default), ``"softmax"`` (only for scores in [0, 1]) or ``None``.

    Returns:
        ``(f1, threshold)``: scalars, or ``(L,)`` vectors for multilabel; F1 as float32, the threshold in the dtype
        of the scores (it is one of them).

    Raises:
        ValueError: On invalid arguments, mismatched shapes, non-finite scores or labels out of range.

    Example:
        >>> from torch import tensor
        >>> best_f1(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        (tensor(0.8000), tensor(0.3500))
    """
    args = RankingArgs(task, None, num_labels, None, None, ignore_index, normalization)
    in_unit = args.validate(preds, target, tasks=TASKS) if validate_args else None
    return _compute(batch_problems(preds, target, args, in_unit=in_unit), Split(task))
