"""Task handling (binary / multiclass / multilabel): input formats, validation and per-column reduction.

Stored forms, one row per sample after flattening extra dimensions:

- binary: ``preds (M,)`` float, ``target (M,)`` bool (ignored positions removed);
- multiclass: ``preds (M, C)`` float, ``target (M,)`` int64 (ignored rows removed);
- multilabel: ``preds (M, L)`` float, ``target (M, L)`` int8 with ``-1`` where ``ignore_index`` was.

Scores are normalised per batch as torchmetrics does: a batch with any score outside [0, 1] is taken for logits and
goes through a sigmoid (binary, multilabel) or a softmax over the classes (multiclass); ``normalization=None``
keeps the raw scores.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from torchmetrics_varlen._checks import Normalization, check_binary_normalization, validate_binary_tensors
from torchmetrics_varlen.functional._hist import BINS, counts_from_histogram, histogram
from torchmetrics_varlen.functional._ranking import RankSums, _binned_confmat
from torchmetrics_varlen.functional._sort import Column, column

Task = Literal["binary", "multiclass", "multilabel"]
Average = Literal["micro", "macro", "weighted", "none"] | None
TASKS = ("binary", "multiclass", "multilabel")


def validate_task_args(task: str, num_classes: int | None, num_labels: int | None, average: Average) -> None:
    """Check ``task`` and the arguments it needs."""
    if task not in TASKS:
        msg = f"Expected argument `task` to be one of {TASKS}, but got {task!r}."
        raise ValueError(msg)
    if task == "multiclass" and (isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2):
        msg = f"Expected argument `num_classes` to be an int >= 2 for task='multiclass', but got {num_classes!r}."
        raise ValueError(msg)
    if task == "multilabel" and (isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1):
        msg = f"Expected argument `num_labels` to be an int >= 1 for task='multilabel', but got {num_labels!r}."
        raise ValueError(msg)
    allowed = {
        "multiclass": ("macro", "weighted", "none", None),
        "multilabel": ("micro", "macro", "weighted", "none", None),
    }
    if task in allowed and average not in allowed[task]:
        msg = f"Expected argument `average` to be one of {allowed[task]} for task={task!r}, but got {average!r}."
        raise ValueError(msg)


def _check_scores(preds: Tensor) -> None:
    if not preds.is_floating_point():
        msg = f"Expected `preds` to be a floating point tensor of scores or logits, but got dtype {preds.dtype}."
        raise ValueError(msg)
    if not bool(torch.isfinite(preds).all()):
        bad = preds[~torch.isfinite(preds)]
        msg = (
            f"Expected `preds` to be finite, but found {bad.numel()} NaN or infinite value(s)"
            f" (first: {bad[0].item()}). Check the model outputs before updating the metric."
        )
        raise ValueError(msg)


def _check_labels(target: Tensor, low: int, high: int, ignore_index: int | None, what: str) -> None:
    """Labels in ``[low, high]``; floating point labels are accepted when they hold whole numbers (``1.0``)."""
    if target.is_complex():
        msg = (
            f"Expected `target` to be an integer, bool or floating point tensor of {what},"
            f" but got dtype {target.dtype}."
        )
        raise ValueError(msg)
    labels = target if ignore_index is None else target[target != ignore_index]
    bad = (labels < low) | (labels > high)
    if labels.is_floating_point():
        bad |= labels != labels.trunc()  # 0.5, and NaN (never equal to itself)
    if labels.numel() and target.dtype != torch.bool and bool(bad.any()):
        found = torch.unique(labels).tolist()[:10]
        extra = "" if ignore_index is None else f" or ignore_index={ignore_index}"
        msg = f"Expected `target` to hold {what} in [{low}, {high}]{extra}, but found values {found}."
        raise ValueError(msg)


def validate_multiclass_tensors(preds: Tensor, target: Tensor, num_classes: int, ignore_index: int | None) -> None:
    """``preds (N, C, ...)`` scores, ``target (N, ...)`` class indices."""
    if preds.ndim < 2 or preds.shape[1] != num_classes:
        msg = (
            f"Expected `preds` of shape (N, {num_classes}, ...) for {num_classes} classes,"
            f" but got {tuple(preds.shape)}."
        )
        raise ValueError(msg)
    if target.shape != preds.shape[:1] + preds.shape[2:]:
        msg = (
            f"Expected `target` of shape {tuple(preds.shape[:1] + preds.shape[2:])} (preds without the class"
            f" dimension), but got {tuple(target.shape)}."
        )
        raise ValueError(msg)
    _check_labels(target, 0, num_classes - 1, ignore_index, "class indices")
    keep = None if ignore_index is None else (target != ignore_index).unsqueeze(1).expand_as(preds)
    _check_scores(preds if keep is None else preds[keep])


def validate_multilabel_tensors(preds: Tensor, target: Tensor, num_labels: int, ignore_index: int | None) -> None:
    """``preds (N, L, ...)`` scores, ``target`` of the same shape with labels in {0, 1}."""
    if preds.ndim < 2 or preds.shape[1] != num_labels:
        msg = f"Expected `preds` of shape (N, {num_labels}, ...) for {num_labels} labels, but got {tuple(preds.shape)}."
        raise ValueError(msg)
    if target.shape != preds.shape:
        msg = (
            "Expected `preds` and `target` to have the same shape, but got"
            f" {tuple(preds.shape)} and {tuple(target.shape)}."
        )
        raise ValueError(msg)
    _check_labels(target, 0, 1, ignore_index, "labels")
    _check_scores(preds if ignore_index is None else preds[target != ignore_index])


def _columns_last(x: Tensor) -> Tensor:
    """``(N, K, ...) -> (N * prod(...), K)``."""
    return x.movedim(1, -1).reshape(-1, x.shape[1])


def _in_unit_interval(x: Tensor) -> bool:
    return x.numel() == 0 or bool(((x >= 0) & (x <= 1)).all())


def format_binary(
    preds: Tensor, target: Tensor, ignore_index: int | None, normalization: Normalization
) -> tuple[Tensor, Tensor]:
    """Flatten, drop ``ignore_index`` positions, normalise logits, and store labels as ``bool``.

    torchmetrics' rule, per batch: if any kept score is outside [0, 1] the batch is logits and gets a sigmoid (a
    monotone map: the ranking within the batch is kept, up to float saturation: in float32 the sigmoid of every
    logit above ~17 is 1.0, so such logits become ties, exactly as in torchmetrics).
    """
    preds = preds.reshape(-1)
    target = target.reshape(-1)
    if ignore_index is not None:
        keep = target != ignore_index
        preds, target = preds[keep], target[keep]
    if normalization is not None and not _in_unit_interval(preds):
        check_binary_normalization(preds, normalization)
        preds = preds.sigmoid()
    return preds, target.to(torch.bool)


def format_multiclass(
    preds: Tensor, target: Tensor, ignore_index: int | None, normalization: Normalization
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Rows of class scores (softmax applied, as torchmetrics does, when a batch is not in [0, 1]).

    Returns ``(preds (M, C), target (M,), kept)`` where ``kept`` marks the rows kept (``None``: all).
    """
    scores = _columns_last(preds)
    labels = target.reshape(-1).to(torch.int64)
    kept = None
    if ignore_index is not None:
        kept = labels != ignore_index
        scores, labels = scores[kept], labels[kept]
    if normalization is not None and not _in_unit_interval(scores):
        # Softmax is not a monotone map of one class's score, so unlike the binary sigmoid it changes the ranking:
        # apply it exactly as torchmetrics does, per batch (whatever `normalization` names: torchmetrics' multiclass
        # metrics always use the softmax).
        scores = scores.softmax(dim=1)
    return scores, labels, kept


def format_multilabel(
    preds: Tensor, target: Tensor, ignore_index: int | None, normalization: Normalization
) -> tuple[Tensor, Tensor]:
    """Rows of label scores, labels as int8 with ``-1`` for ignored entries.

    As torchmetrics: the sigmoid is applied when any score of the batch (ignored entries included) is outside
    [0, 1], whatever ``normalization`` names, unless it is ``None``.
    """
    scores = _columns_last(preds)
    labels = _columns_last(target).to(torch.int8)
    if ignore_index is not None:
        labels = torch.where(_columns_last(target) == ignore_index, torch.full_like(labels, -1), labels)
    if normalization is not None and not _in_unit_interval(scores):
        scores = scores.sigmoid()
    return scores, labels


def columns(preds: Tensor, target: Tensor, task: str) -> list[tuple[Tensor, Tensor]]:
    """One binary problem ``(scores, positives)`` per class / label."""
    if task == "multiclass":
        return [(preds[:, k], target == k) for k in range(preds.shape[1])]
    out = []
    for k in range(preds.shape[1]):
        valid = target[:, k] >= 0
        out.append((preds[:, k][valid], target[:, k][valid] == 1))
    return out


def micro(preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """Multilabel micro average: every valid (sample, label) entry as one binary problem."""
    valid = target >= 0
    return preds[valid], target[valid] == 1


def reduce_columns(values: Tensor, support: Tensor, average: Average, what: str) -> Tensor:
    """Average per-column values; columns whose value is undefined (NaN) are left out, with a warning."""
    if average in (None, "none"):
        return values
    defined = ~torch.isnan(values)
    if not bool(defined.all()):
        missing = torch.nonzero(~defined).flatten().tolist()
        warnings.warn(
            f"{what} is undefined for column(s) {missing} (no positive or no negative samples); they are left out of"
            f" the {average} average.",
            UserWarning,
            stacklevel=3,
        )
    if not bool(defined.any()):
        return torch.tensor(float("nan"), dtype=torch.float64, device=values.device)
    if average == "weighted":
        weights = support[defined].double()
        return (values[defined] * weights).sum() / weights.sum()
    return values[defined].mean()


def validate_inputs(
    preds: Tensor,
    target: Tensor,
    task: str,
    num_classes: int | None,
    num_labels: int | None,
    ignore_index: int | None,
    normalization: Normalization = None,
) -> None:
    """Check one batch for ``task``; a ``ValueError`` (or ``TypeError``) names the problem."""
    if not isinstance(preds, Tensor) or not isinstance(target, Tensor):
        msg = (
            f"Expected `preds` and `target` to be tensors, but got {type(preds).__name__} and {type(target).__name__}."
        )
        raise TypeError(msg)
    if task == "multiclass":
        assert num_classes is not None
        validate_multiclass_tensors(preds, target, num_classes, ignore_index)
    elif task == "multilabel":
        assert num_labels is not None
        validate_multilabel_tensors(preds, target, num_labels, ignore_index)
    else:
        validate_binary_tensors(preds, target, ignore_index, normalization)


def format_inputs(
    preds: Tensor, target: Tensor, task: str, ignore_index: int | None, normalization: Normalization
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Inputs in their stored form, plus the mask of the flattened sample positions kept (``None``: all)."""
    if task == "multiclass":
        return format_multiclass(preds, target, ignore_index, normalization)
    if task == "multilabel":
        scores, labels = format_multilabel(preds, target, ignore_index, normalization)
        return scores, labels, None
    kept = None if ignore_index is None else target.reshape(-1) != ignore_index
    scores, labels = format_binary(preds, target, ignore_index, normalization)
    return scores, labels, kept


def binned_state(preds: Tensor, target: Tensor, task: str, thresholds: Tensor) -> Tensor:
    """Multi-threshold confusion matrices: ``(T, 2, 2)`` for binary, ``(T, K, 2, 2)`` per class / label."""
    if task == "binary":
        return _binned_confmat(preds, target, thresholds)
    return torch.stack([_binned_confmat(s, p, thresholds) for s, p in columns(preds, target, task)], dim=1)


def empty_state(task: str, n_thresholds: int, width: int) -> Tensor:
    """The all-zero binned state of ``task``."""
    shape = (n_thresholds, 2, 2) if task == "binary" else (n_thresholds, width, 2, 2)
    return torch.zeros(shape, dtype=torch.int64)


def empty_histogram(task: str, width: int) -> Tensor:
    """The all-zero 16-bit histogram state of ``task``."""
    return torch.zeros((2, BINS) if task == "binary" else (width, 2, BINS), dtype=torch.int64)


def column_support(confmat: Tensor) -> tuple[Tensor, Tensor]:
    """Positives and negatives per column of a ``(T, K, 2, 2)`` binned state."""
    return confmat[0, :, 1, :].sum(-1), confmat[0, :, 0, :].sum(-1)


def histogram_state(preds: Tensor, target: Tensor, task: str, dtype: torch.dtype) -> Tensor:
    """16-bit histograms: ``(2, 65536)`` for binary, ``(K, 2, 65536)`` per class / label."""
    if task == "binary":
        return histogram(preds, target, dtype)
    return torch.stack([histogram(s, p, dtype) for s, p in columns(preds, target, task)])


def binary_problems(preds: Tensor, target: Tensor, task: str, average: Average) -> list[tuple[Tensor, Tensor]]:
    """``(scores, positives)`` of every binary problem of ``task`` (one for binary and multilabel-micro)."""
    if task == "binary":
        return [(preds, target)]
    if task == "multilabel" and average == "micro":
        return [micro(preds, target)]
    return columns(preds, target, task)


def exact_columns(preds: Tensor, target: Tensor, task: str, average: Average, with_scores: bool) -> list[Column]:
    """Every binary problem of ``task`` (one for binary and multilabel-micro), sorted (see ``_sort``).

    ``with_scores`` only matters for float64 scores (16/32-bit thresholds are decoded from the keys on demand).
    """
    return [column(s, p, with_scores) for s, p in binary_problems(preds, target, task, average)]


def histogram_columns(hist: Tensor, dtype: torch.dtype, task: str, average: Average, with_scores: bool) -> list[Column]:
    """As :func:`exact_columns`, from 16-bit histograms."""
    if task == "binary":
        return [counts_from_histogram(hist, dtype, with_scores)]
    if task == "multilabel" and average == "micro":
        return [counts_from_histogram(hist.sum(0), dtype, with_scores)]
    return [counts_from_histogram(h, dtype, with_scores) for h in hist]


def reduce_sums(
    sums: list[RankSums],
    task: str,
    average: Average,
    device: torch.device,
    value: Callable[[RankSums, torch.device, bool], Tensor],
    defined: Callable[[RankSums], bool],
    what: str,
) -> Tensor:
    """``value`` of each binary problem from its :class:`RankSums` (NaN where not ``defined``), reduced by
    ``average``; a single problem (binary, multilabel-micro) keeps ``value``'s own warnings.
    """
    if single(task, average):
        return value(sums[0], device, True)
    values = [float(value(s, device, False)) if defined(s) else float("nan") for s in sums]
    support = torch.tensor([s.n_pos for s in sums], device=device)
    return reduce_columns(torch.tensor(values, dtype=torch.float64, device=device), support, average, what)


def single(task: str, average: Average) -> bool:
    """Whether ``task`` / ``average`` is one binary problem (binary, or multilabel micro)."""
    return task == "binary" or (task == "multilabel" and average == "micro")
