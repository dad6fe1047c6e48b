"""Argument and tensor validators shared by the functional core and the metric classes."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Thresholds = int | list[float] | Tensor | torch.dtype | None
Normalization = Literal["sigmoid", "softmax"] | None
NORMALIZATIONS = ("sigmoid", "softmax", None)
HIST_DTYPES = (torch.float16, torch.bfloat16)


def validate_ranking_args(
    *, max_fpr: float | None = None, thresholds: Thresholds = None, ignore_index: int | None = None
) -> None:
    """Check the constructor / functional arguments shared by the binary ranking metrics."""
    if max_fpr is not None and (
        isinstance(max_fpr, bool) or not isinstance(max_fpr, (float, int)) or not 0 < max_fpr <= 1
    ):
        msg = f"Expected argument `max_fpr` to be a float in the range (0, 1], but got {max_fpr!r}."
        raise ValueError(msg)
    if isinstance(thresholds, torch.dtype) and thresholds not in HIST_DTYPES:
        msg = (
            "Expected argument `thresholds` given as a dtype to be torch.float16 or torch.bfloat16 (every value of"
            f" that dtype is a threshold), but got {thresholds}."
        )
        raise ValueError(msg)
    if thresholds is not None and not isinstance(thresholds, torch.dtype):
        if isinstance(thresholds, bool) or not isinstance(thresholds, (int, list, Tensor)):
            msg = (
                "Expected argument `thresholds` to be None, an int, a list of floats, a 1-D tensor,"
                f" torch.float16 or torch.bfloat16, but got {thresholds!r}."
            )
            raise ValueError(msg)
        if isinstance(thresholds, int) and thresholds < 2:
            msg = f"Expected argument `thresholds` given as an int to be at least 2, but got {thresholds}."
            raise ValueError(msg)
        if isinstance(thresholds, list) and not all(isinstance(t, float) and 0 <= t <= 1 for t in thresholds):
            msg = f"Expected argument `thresholds` given as a list to hold floats in [0, 1], but got {thresholds!r}."
            raise ValueError(msg)
        if isinstance(thresholds, list) and not thresholds:
            msg = "Expected argument `thresholds` given as a list to be non-empty, but got []."
            raise ValueError(msg)
        if isinstance(thresholds, Tensor) and (thresholds.ndim != 1 or not thresholds.is_floating_point()):
            msg = (
                "Expected argument `thresholds` given as a tensor to be 1-D and floating point,"
                f" but got shape {tuple(thresholds.shape)} and dtype {thresholds.dtype}."
            )
            raise ValueError(msg)
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int)):
        msg = f"Expected argument `ignore_index` to be None or an int, but got {ignore_index!r}."
        raise ValueError(msg)


def validate_normalization(normalization: Normalization) -> None:
    """Check torchmetrics' ``normalization`` argument: ``"sigmoid"``, ``"softmax"`` or ``None``."""
    if normalization not in NORMALIZATIONS:
        msg = f"Expected argument `normalization` to be 'sigmoid', 'softmax' or None, but got {normalization!r}."
        raise ValueError(msg)


def check_binary_normalization(scores: Tensor, normalization: Normalization) -> None:
    """Binary scores outside [0, 1] cannot be softmaxed (one score per sample, no class dimension)."""
    if normalization == "softmax" and scores.numel() and not bool(((scores >= 0) & (scores <= 1)).all()):
        msg = (
            "Expected `normalization` to be 'sigmoid' or None for binary scores outside [0, 1] (softmax needs a class"
            f" dimension; use task='multiclass'), but got {normalization!r}."
        )
        raise ValueError(msg)


def threshold_tensor(thresholds: Thresholds, device: torch.device | None = None) -> Tensor | None:
    """Turn the ``thresholds`` argument into a float tensor (``int`` means ``linspace(0, 1, n)``); ``None`` for the
    exact and the 16-bit histogram modes.
    """
    if thresholds is None or isinstance(thresholds, torch.dtype):
        return None
    if isinstance(thresholds, int):
        return torch.linspace(0, 1, thresholds, device=device)
    if isinstance(thresholds, list):
        return torch.tensor(thresholds, device=device)
    return thresholds.to(device) if device is not None else thresholds


def validate_binary_tensors(
    preds: Tensor, target: Tensor, ignore_index: int | None = None, normalization: Normalization = None
) -> None:
    """Check one batch of binary scores and labels; raise a ``ValueError`` that names the problem.

    Labels may be integer, bool or floating point (``0.0`` / ``1.0``, as torchmetrics' ``BinaryAUROC`` accepts).
    """
    if not isinstance(preds, Tensor) or not isinstance(target, Tensor):
        msg = (
            f"Expected `preds` and `target` to be tensors, but got {type(preds).__name__} and {type(target).__name__}."
        )
        raise TypeError(msg)
    if preds.shape != target.shape:
        msg = (
            "Expected `preds` and `target` to have the same shape, but got"
            f" {tuple(preds.shape)} and {tuple(target.shape)}."
        )
        raise ValueError(msg)
    if not preds.is_floating_point():
        msg = f"Expected `preds` to be a floating point tensor of scores or logits, but got dtype {preds.dtype}."
        raise ValueError(msg)
    if target.is_complex():
        msg = (
            "Expected `target` to be an integer, bool or floating point tensor of labels in {0, 1},"
            f" but got dtype {target.dtype}."
        )
        raise ValueError(msg)
    keep = target != ignore_index if ignore_index is not None else None
    scores = preds if keep is None else preds[keep]
    if not bool(torch.isfinite(scores).all()):
        bad = scores[~torch.isfinite(scores)]
        msg = (
            f"Expected `preds` to be finite, but found {bad.numel()} NaN or infinite value(s)"
            f" (first: {bad[0].item()}). Check the model outputs before updating the metric."
        )
        raise ValueError(msg)
    check_binary_normalization(scores, normalization)
    labels = target if keep is None else target[keep]
    if target.dtype != torch.bool and labels.numel() and bool(((labels != 0) & (labels != 1)).any()):
        found = torch.unique(labels).tolist()[:10]
        allowed = "{0, 1}" if ignore_index is None else f"{{0, 1}} or ignore_index={ignore_index}"
        msg = f"Expected `target` to hold only {allowed}, but found values {found}."
        raise ValueError(msg)


def validate_sample_ids(
    sample_ids: Tensor, shape: torch.Size, *, name: str = "sample_ids", non_negative: bool = True
) -> None:
    """Check per-sample integers (ids, groups): one per element (``shape``) or one per row (``(shape[0],)``)."""
    if not isinstance(sample_ids, Tensor):
        msg = f"Expected `{name}` to be an integer tensor, but got {type(sample_ids).__name__}."
        raise TypeError(msg)
    if sample_ids.is_floating_point() or sample_ids.is_complex() or sample_ids.dtype == torch.bool:
        msg = f"Expected `{name}` to be an integer tensor, one value per sample, but got dtype {sample_ids.dtype}."
        raise ValueError(msg)
    rows = shape[0] if len(shape) else 1
    if sample_ids.shape != shape and tuple(sample_ids.shape) != (rows,):
        msg = (
            f"Expected `{name}` to have the sample shape {tuple(shape)} or one value per row ({rows},),"
            f" but got {tuple(sample_ids.shape)}."
        )
        raise ValueError(msg)
    if non_negative and sample_ids.numel() and bool((sample_ids < 0).any()):
        msg = f"Expected `{name}` to be >= 0, but found {int(sample_ids.min())}."
        raise ValueError(msg)


def histogram_dtype(thresholds: Thresholds) -> torch.dtype | None:
    """The 16-bit dtype of the histogram mode (``thresholds=torch.float16`` / ``torch.bfloat16``), else ``None``."""
    return thresholds if isinstance(thresholds, torch.dtype) else None
