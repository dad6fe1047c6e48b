"""Tasks (binary / multiclass / multilabel): each task's stored form, and the one split of it into binary problems.

Stored forms, one row per sample after flattening extra dimensions:

- binary: ``preds (M,)`` float, ``target (M,)`` bool (ignored positions removed);
- multiclass: ``preds (M, C)`` float, ``target (M,)`` int64 (ignored rows removed);
- multilabel: ``preds (M, L)`` float, ``target (M, L)`` int8 with ``-1`` where ``ignore_index`` was.

Scores are normalised per batch as torchmetrics does: a batch with any score outside [0, 1] is taken for logits and
goes through a sigmoid (binary, multilabel) or a softmax over the classes (multiclass); ``normalization=None``
keeps the raw scores. The sigmoid and the softmax give every score as a function of its value only, never of its
place in the batch (:mod:`~torchmetrics_varlen.functional._normalize`), so equal logits stay tied.

Every metric is computed on binary problems ``(scores, positives)``: :class:`Split` says, once, how a task and its
``average`` make them: the data itself (binary), one merged problem (``average="micro"``), or one per class / label.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar

import torch
from torch import Tensor

from torchmetrics_varlen._checks import Average, Normalization, check_binary_normalization, within
from torchmetrics_varlen.functional._normalize import sigmoid, softmax

T = TypeVar("T")


class Split(NamedTuple):
    """How ``task`` and ``average`` turn the data into binary problems (the package's one task / average switch).

    Attributes:
        task: ``"binary"``, ``"multiclass"`` or ``"multilabel"``.
        average: The ``average`` argument (``"micro"`` merges every class / label into one problem).
    """

    task: str
    average: Average = None

    @property
    def per_class(self) -> bool:
        """Whether there is one problem per class / label (then reduced by ``average``), not a single one."""
        return self.task != "binary" and self.average != "micro"

    def apply(self, whole: T, merge: Callable[[T], T], by_class: Callable[[T], list[T]]) -> list[T]:
        """The problems of ``whole`` (the data of every class): itself for binary, ``[merge(whole)]`` for micro,
        ``by_class(whole)`` otherwise.
        """
        if self.task == "binary":
            return [whole]
        return by_class(whole) if self.per_class else [merge(whole)]


def _classes_last(x: Tensor) -> Tensor:
    """``(N, K, ...) -> (N * prod(...), K)``."""
    return x.movedim(1, -1).reshape(-1, x.shape[1])


def check_sizes(preds: Tensor, target: Tensor, task: str) -> None:
    """Raise unless ``preds`` has one score per label (one row of scores per label, multiclass), even with
    ``validate_args=False``: a batch of mismatched sizes would otherwise be stored and spoil the epoch's value (its
    labels broadcast or cut), or fail only at ``compute()``. Two integer products, whatever the batch size.
    """
    scores = preds.numel()
    if task == "multiclass" and preds.ndim >= 2:
        scores //= max(preds.shape[1], 1)
    # multiclass scores need a class dimension; multilabel rows are stored as they come, so the shapes must match
    wrong = (task == "multiclass" and preds.ndim < 2) or (task == "multilabel" and preds.shape != target.shape)
    if wrong or scores != target.numel():
        msg = (
            f"Expected `preds` and `target` to describe the same samples, but got preds of shape"
            f" {tuple(preds.shape)} and target of shape {tuple(target.shape)} (task={task!r}). This is checked even"
            " with validate_args=False; nothing of the batch was added."
        )
        raise ValueError(msg)


def format_inputs(
    preds: Tensor,
    target: Tensor,
    task: str,
    ignore_index: int | None,
    normalization: Normalization,
    in_unit: bool | None = None,
    keep_labels: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """A batch in its stored form, plus the mask of the flattened sample positions kept (``None``: all).

    As torchmetrics, per batch: binary scores with any kept score outside [0, 1] get a sigmoid (a monotone map: the
    ranking is kept, up to float saturation: in float32 the sigmoid of every logit above ~17 is 1.0, so such logits
    become ties, exactly as in torchmetrics); multiclass rows get a softmax over the classes (not monotone per
    class, so applied exactly as torchmetrics does, whatever ``normalization`` names); multilabel scores get the
    sigmoid when any score of the batch (ignored entries included) is outside [0, 1].

    ``in_unit``: whether every score of the batch lies in [0, 1], when the caller already knows it (the input checks
    read it without ``ignore_index``); ``None``: tested here. ``keep_labels``: binary labels of a dtype other than
    ``uint8`` are returned as they are, not as bool, for a caller that takes any non-zero label as a positive itself
    (the sort keys do, on CPU: no bool copy of the labels).
    """
    check_sizes(preds, target, task)
    if in_unit is not None and ignore_index is not None:
        in_unit = None  # known for the whole batch; the test below is on the kept scores
    if task == "multilabel":
        scores, labels = _classes_last(preds), _classes_last(target)
        if ignore_index is not None:
            labels = torch.where(labels == ignore_index, torch.full_like(labels, -1), labels)
        if normalization is not None and not (within(scores, 0, 1) if in_unit is None else in_unit):
            scores = sigmoid(scores)
        return scores, labels.char(), None
    # ``.bool()`` / ``.long()`` rather than ``.to(dtype)``: the same conversion (none when the dtype is already
    # right), with less per-call overhead; 1-D tensors are taken as they are (a reshape would be a view of them).
    scores = _classes_last(preds) if task == "multiclass" else (preds if preds.ndim == 1 else preds.reshape(-1))
    labels = target if target.ndim == 1 else target.reshape(-1)
    kept = None
    if ignore_index is not None:
        kept = labels != ignore_index
        scores, labels = scores[kept], labels[kept]
    if task == "multiclass":
        if normalization is not None and not (within(scores, 0, 1) if in_unit is None else in_unit):
            scores = softmax(scores)
        return scores, labels.long(), kept
    if normalization is not None and not (within(scores, 0, 1) if in_unit is None else in_unit):
        check_binary_normalization(scores, normalization)
        scores = sigmoid(scores)
    return scores, labels if keep_labels and labels.dtype != torch.uint8 else labels.bool(), kept


def rows_by_class(rows: tuple[Tensor, Tensor], task: str) -> list[tuple[Tensor, Tensor]]:
    """One binary problem ``(scores, positives)`` per class / label of stored rows."""
    preds, target = rows
    if task == "multiclass":
        return [(preds[:, k], target == k) for k in range(preds.shape[1])]
    out = []
    for k in range(preds.shape[1]):
        valid = target[:, k] >= 0
        out.append((preds[:, k][valid], target[:, k][valid] == 1))
    return out


def merged_rows(rows: tuple[Tensor, Tensor], task: str) -> tuple[Tensor, Tensor]:
    """Every valid (sample, class) entry of stored rows as one binary problem (``average="micro"``): multiclass
    targets one-hot, as torchmetrics' micro curves.
    """
    preds, target = rows
    if task == "multiclass":
        target = torch.nn.functional.one_hot(target, preds.shape[1])
    valid = target >= 0
    return preds[valid], target[valid] == 1
