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

The vocabulary the package checks (tasks, averages, thresholds, normalisations) and every argument and input
validator live here too: the functional core and the metric classes call these and nothing else to validate.
Messages have one form, "Expected `name` to be ..., but got {value!r}.", built into ``msg`` first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

import numpy as np
import torch
from torch import Tensor

from torchmetrics_varlen.functional._device import on_device
from torchmetrics_varlen.functional._normalize import sigmoid, softmax

Task = Literal["binary", "multiclass", "multilabel"]
Average = Literal["micro", "macro", "weighted", "none"] | None
Thresholds = int | list[float] | Tensor | torch.dtype | None
Normalization = Literal["sigmoid", "softmax"] | None
Weighting = Literal["samples", "uniform"]

TASKS: tuple[str, ...] = ("binary", "multiclass", "multilabel")
NORMALIZATIONS = ("sigmoid", "softmax", None)
HIST_DTYPES = (torch.float16, torch.bfloat16)  # thresholds=<dtype>: every value of the dtype is a threshold
# The `average` each task accepts (torchmetrics 1.9's): scalar statistics (AUROC, AP), and curves.
SCALAR_AVERAGES = {
    "multiclass": ("macro", "weighted", "none", None),
    "multilabel": ("micro", "macro", "weighted", "none", None),
}
CURVE_AVERAGES = {"multiclass": ("micro", "macro", None), "multilabel": (None,)}


def host_pair(ends: tuple[Tensor, Tensor], *, one_read: bool) -> tuple[Any, Any]:
    """Two 0-d tensors (an ``aminmax``) as Python numbers, exactly: read one by one (cheapest on the CPU) or, with
    ``one_read`` (on a device: one sync instead of two), stacked and read together.
    """
    if one_read:
        low, high = torch.stack(ends).tolist()
        return low, high
    return ends[0].item(), ends[1].item()


_HOST_REDUCE = 1024  # from this many CPU integers on, NumPy's min / max (vectorised) beat torch's reductions
_HOST_REDUCE_MAX = 1 << 20  # ...up to this many: beyond, torch's reductions use its threads (NumPy's one)


def _on_host(values: Tensor) -> bool:
    """Whether to reduce the CPU integers ``values`` with NumPy (batch sizes) rather than torch (large tensors)."""
    return not on_device(values) and _HOST_REDUCE <= values.numel() < _HOST_REDUCE_MAX


def int_ends(values: Tensor, *, high: bool = True) -> tuple[int, int]:
    """The lowest and highest of a non-empty integer tensor as Python ints, exactly (without ``high``: the lowest,
    twice). Big CPU tensors are reduced by NumPy (several times faster on int64 than torch's ``min`` / ``aminmax``),
    the rest by one torch reduction.
    """
    if _on_host(values):
        array = values.numpy()
        low = int(array.min())
        return low, int(array.max()) if high else low
    if not high:
        low = int(values.min())
        return low, low
    lowest, highest = host_pair(torch.aminmax(values), one_read=on_device(values))
    return int(lowest), int(highest)


# Each integer dtype NumPy reads as the unsigned integer of its width: a negative value reads as one >= 2**(bits-1).
_UNSIGNED = {torch.int64: np.uint64, torch.int32: np.uint32, torch.int16: np.uint16, torch.int8: np.uint8}


def ints_within(values: Tensor, top: int) -> bool | None:
    """Whether every value of a non-empty CPU integer tensor lies in ``[0, top]``, by one NumPy ``max`` of the values
    read as unsigned integers of their width (a negative value reads as one above any ``top`` its dtype holds): one
    pass instead of a ``min`` and a ``max``. ``None``: not told here (another device or dtype, ``top`` outside the
    dtype's non-negative range); ask :func:`int_ends`.
    """
    if on_device(values) or top < 0:
        return None
    dtype = values.dtype
    unsigned = _UNSIGNED.get(dtype)
    if unsigned is not None:
        if top > torch.iinfo(dtype).max:
            return None
        return int(values.numpy().view(unsigned).max()) <= top
    if dtype == torch.uint8:
        return int(values.numpy().max()) <= top
    return None


def within(x: Tensor | Sequence[Tensor], low: float, high: float, *, closed: bool = True) -> bool:
    """Whether every value of ``x`` (a tensor or pieces of one) lies in ``[low, high]`` (``[low, high)`` unless
    ``closed``); NaN never does. One ``aminmax`` pass per piece (on a device, both ends read with one sync).
    """
    exact = isinstance(low, int) and isinstance(high, int)  # bounds every dtype holds: compared on the host
    for piece in [x] if isinstance(x, Tensor) else x:
        if piece.numel():
            ends = torch.aminmax(piece)
            lowest, highest = ends
            if exact:
                lo, hi = host_pair(ends, one_read=on_device(piece))  # exact in Python (NaN: every comparison False)
                if not (lo >= low and (hi <= high if closed else hi < high)):
                    return False
            elif not (bool(lowest >= low) and bool(highest <= high if closed else highest < high)):
                return False
    return True


def _is_int(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


# ------------------------------------------------------------------ arguments


def validate_task_args(
    task: str,
    num_classes: int | None,
    num_labels: int | None,
    average: Average,
    *,
    averages: dict[str, tuple[str | None, ...]] = SCALAR_AVERAGES,
    tasks: tuple[str, ...] = TASKS,
) -> None:
    """Check ``task`` (one of ``tasks``), the size it needs and its ``average`` (ignored for binary).

    Deliberately not torchmetrics' "Invalid Classification: expected one of [...]": the house form names the
    argument and quotes the value (``but got 'multi'``), as every other message of the package does.
    """
    if task not in tasks:
        allowed = f"one of {tasks}" if tasks == TASKS else " or ".join(repr(t) for t in tasks)
        msg = f"Expected argument `task` to be {allowed}, but got {task!r}."
        raise ValueError(msg)
    if task == "multiclass" and not _is_int(num_classes, 2):
        msg = f"Expected argument `num_classes` to be an int >= 2 for task='multiclass', but got {num_classes!r}."
        raise ValueError(msg)
    if task == "multilabel" and not _is_int(num_labels, 1):
        msg = f"Expected argument `num_labels` to be an int >= 1 for task='multilabel', but got {num_labels!r}."
        raise ValueError(msg)
    if task in averages and average not in averages[task]:
        msg = f"Expected argument `average` to be one of {averages[task]} for task={task!r}, but got {average!r}."
        raise ValueError(msg)


def _validate_thresholds(thresholds: Thresholds) -> None:
    if isinstance(thresholds, torch.dtype):
        if thresholds not in HIST_DTYPES:
            msg = (
                "Expected argument `thresholds` given as a dtype to be torch.float16 or torch.bfloat16 (every value"
                f" of that dtype is a threshold), but got {thresholds}."
            )
            raise ValueError(msg)
        return
    if thresholds is None:
        return
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


def validate_ranking_args(
    *,
    task: str = "binary",
    max_fpr: float | None = None,
    thresholds: Thresholds = None,
    ignore_index: int | None = None,
    normalization: Normalization = None,
    binned: bool = True,
    what: str = "",
) -> None:
    """Check the arguments shared by the ranking metrics (AUROC, AP, curves, best F1); without a ``binned`` mode
    (``what`` names the metric), ``thresholds`` is ``None`` or a 16-bit dtype.
    """
    if max_fpr is not None and (
        isinstance(max_fpr, bool) or not isinstance(max_fpr, (float, int)) or not 0 < max_fpr <= 1
    ):
        msg = f"Expected argument `max_fpr` to be a float in the range (0, 1], but got {max_fpr!r}."
        raise ValueError(msg)
    if max_fpr is not None and task != "binary":
        msg = f"Argument `max_fpr` (partial AUC) is only defined for task='binary', but got task={task!r}."
        raise ValueError(msg)
    if not binned and thresholds is not None and not isinstance(thresholds, torch.dtype):
        msg = (
            f"Expected argument `thresholds` of {what} to be None (exact) or torch.float16 / torch.bfloat16"
            f" (exact on the rounded scores, constant memory), but got {thresholds!r}."
        )
        raise ValueError(msg)
    _validate_thresholds(thresholds)
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int)):
        msg = f"Expected argument `ignore_index` to be None or an int, but got {ignore_index!r}."
        raise ValueError(msg)
    if normalization not in NORMALIZATIONS:
        msg = f"Expected argument `normalization` to be 'sigmoid', 'softmax' or None, but got {normalization!r}."
        raise ValueError(msg)


def validate_weighting(weighting: str) -> None:
    """Group AUROC's ``weighting``."""
    if weighting not in ("samples", "uniform"):
        msg = f"Expected argument `weighting` to be 'samples' or 'uniform', but got {weighting!r}."
        raise ValueError(msg)


def validate_dedup_and_timeout(dataset_size: Any, sync_timeout: Any) -> None:
    """``dataset_size``: a non-negative int or None; ``sync_timeout``: positive seconds or None (every metric and
    wrapper takes both).
    """
    if sync_timeout is not None and (isinstance(sync_timeout, bool) or not sync_timeout > 0):
        msg = f"Expected argument `sync_timeout` to be a positive number of seconds or None, but got {sync_timeout!r}."
        raise ValueError(msg)
    if dataset_size is not None and not _is_int(dataset_size, 0):
        msg = f"Expected argument `dataset_size` to be a non-negative int or None, but got {dataset_size!r}."
        raise ValueError(msg)


def validate_sync_args(
    *,
    dataset_size: int | None,
    sync_timeout: float | None,
    compute_on_rank: int | None,
    compute_sharded: bool,
    exact: bool,
    shardable: bool,
    max_fpr: float | None,
    what: str,
) -> None:
    """Check the synchronisation keywords every metric class takes (``exact``: no ``thresholds``; ``shardable``:
    the metric reduces to per-range sums, see ``_dist/shard.py``, which the partial AUC of ``max_fpr`` does not).
    """
    validate_dedup_and_timeout(dataset_size, sync_timeout)
    if compute_on_rank is not None and not _is_int(compute_on_rank, 0):
        msg = f"Expected argument `compute_on_rank` to be a rank (int >= 0) or None, but got {compute_on_rank!r}."
        raise ValueError(msg)
    if not isinstance(compute_sharded, bool):
        msg = f"Expected argument `compute_sharded` to be a bool, but got {compute_sharded!r}."
        raise ValueError(msg)
    if compute_sharded and max_fpr is not None:
        msg = "`compute_sharded=True` computes the full AUROC from per-range sums; it does not support `max_fpr`."
        raise ValueError(msg)
    if compute_sharded and not shardable:
        msg = (
            f"Expected argument `compute_sharded` to be False for {what}, but got True: only AUROC and average"
            " precision reduce to per-range sums and can be computed sharded; `compute_on_rank` keeps the data"
            " off the other ranks."
        )
        raise ValueError(msg)
    if compute_sharded and (not exact or compute_on_rank is not None):
        msg = (
            "`compute_sharded=True` spreads the exact computation over the ranks: it needs the exact mode"
            " (thresholds=None; the binned and 16-bit states are already small and summed) and cannot be"
            " combined with `compute_on_rank` (which gathers everything to one rank)."
        )
        raise ValueError(msg)


def validate_compute_on_rank(compute_on_rank: int | None, world: int, initialised: bool, what: str) -> None:
    """``compute_on_rank`` must be a rank of the process group: checked at ``compute()``, with or without one."""
    if compute_on_rank is None or compute_on_rank < world:
        return
    group = f"the process group has {world} ranks" if initialised else "no process group is initialised (one rank)"
    msg = (
        f"Expected argument `compute_on_rank` of {what} to be None or a rank between 0 and {world - 1}, but got"
        f" {compute_on_rank!r} (compute_on_rank={compute_on_rank} but {group})."
    )
    raise ValueError(msg)


class RankingArgs(NamedTuple):
    """The arguments a ranking function (AUROC, AP, curves, best F1) shares, to validate them in one call."""

    task: str
    num_classes: int | None
    num_labels: int | None
    average: Average
    thresholds: Thresholds
    ignore_index: int | None
    normalization: Normalization
    max_fpr: float | None = None

    def validate(
        self,
        preds: Tensor,
        target: Tensor,
        *,
        averages: dict[str, tuple[str | None, ...]] = SCALAR_AVERAGES,
        tasks: tuple[str, ...] = TASKS,
    ) -> bool | None:
        """Check the arguments (``averages`` / ``tasks``: what the function accepts), then the batch (with
        :func:`check_inputs`: two reductions for the common batch, the full checks and their messages otherwise).
        Returns what :func:`check_inputs` does: whether every score lies in [0, 1] (``None``: not known).
        """
        validate_task_args(self.task, self.num_classes, self.num_labels, self.average, averages=averages, tasks=tasks)
        validate_ranking_args(
            task=self.task,
            max_fpr=self.max_fpr,
            thresholds=self.thresholds,
            ignore_index=self.ignore_index,
            normalization=self.normalization,
        )
        return check_inputs(
            preds, target, self.task, self.num_classes, self.num_labels, self.ignore_index, self.normalization
        )


# ------------------------------------------------------------------ inputs


def _check_shapes(preds: Tensor, target: Tensor, task: str, width: int) -> None:
    if task != "binary" and (preds.ndim < 2 or preds.shape[1] != width):
        what = "classes" if task == "multiclass" else "labels"
        msg = f"Expected `preds` of shape (N, {width}, ...) for {width} {what}, but got {tuple(preds.shape)}."
        raise ValueError(msg)
    if task == "multiclass" and target.shape != preds.shape[:1] + preds.shape[2:]:
        msg = (
            f"Expected `target` of shape {tuple(preds.shape[:1] + preds.shape[2:])} (preds without the class"
            f" dimension), but got {tuple(target.shape)}."
        )
        raise ValueError(msg)
    if task != "multiclass" and target.shape != preds.shape:
        msg = (
            "Expected `preds` and `target` to have the same shape, but got"
            f" {tuple(preds.shape)} and {tuple(target.shape)}."
        )
        raise ValueError(msg)


def check_binary_normalization(scores: Tensor, normalization: Normalization) -> None:
    """Binary scores outside [0, 1] cannot be softmaxed (one score per sample, no class dimension)."""
    if normalization == "softmax" and not within(scores, 0, 1):
        msg = (
            "Expected `normalization` to be 'sigmoid' or None for binary scores outside [0, 1] (softmax needs a class"
            f" dimension; use task='multiclass'), but got {normalization!r}."
        )
        raise ValueError(msg)


def _score_range(
    preds: Tensor, labels: Tensor | None, top: int, fused: bool | None = None
) -> tuple[float, float] | None:
    """The lowest and highest score of a non-empty batch, or ``None`` if some integer label is outside ``[0, top]``.

    One ``aminmax`` per tensor. On the CPU each end is read on its own (cheapest there); on the device path
    (``fused``, by default when :func:`~._device.on_device` says so for ``preds``) every end is read with one
    ``tolist()``, one sync for the batch. The labels' ends are read as float64 there: exact up to 2**53, and the
    rounding above keeps every comparison with ``0`` and a ``top`` below 2**53 (a larger one, and labels on another
    device, take the separate reads).
    """
    if fused is None:
        fused = on_device(preds)
    if not fused or (labels is not None and (labels.device != preds.device or top >= 2**53)):
        if labels is not None and labels.numel():
            inside = ints_within(labels, top) if _on_host(labels) else None
            if inside is None:
                low, high = torch.aminmax(labels)
                inside = int(low) >= 0 and int(high) <= top
            if not inside:
                return None
        lowest, highest = torch.aminmax(preds)
        return float(lowest), float(highest)
    ends = torch.stack(torch.aminmax(preds)).double()
    if labels is not None and labels.numel():
        ends = torch.cat((ends, torch.stack(torch.aminmax(labels)).double()))
    values = ends.tolist()
    if len(values) == 4 and not (values[2] >= 0 and values[3] <= top):
        return None
    return values[0], values[1]


def check_inputs(
    preds: Tensor,
    target: Tensor,
    task: str,
    num_classes: int | None,
    num_labels: int | None,
    ignore_index: int | None,
    normalization: Normalization = None,
) -> bool | None:
    """Check one batch for ``task`` (tensors, shapes, dtypes, labels in range with ``ignore_index`` aside, finite
    scores) and return whether every score lies in [0, 1] (``None`` with ``ignore_index``: :func:`format_inputs`
    tests the kept scores itself).

    Labels may be integer, bool, or floating point holding whole numbers (``1.0``), as torchmetrics accepts. One
    ``aminmax`` of the labels and one of the scores (:func:`_score_range`) decide the batch: NaN propagates through
    the min and max, infinities show as one of them. The messages are worked out only for a batch that fails.
    """
    if not isinstance(preds, Tensor) or not isinstance(target, Tensor):
        msg = (
            f"Expected `preds` and `target` to be tensors, but got {type(preds).__name__} and {type(target).__name__}."
        )
        raise TypeError(msg)
    width = {"binary": 1, "multiclass": num_classes or 2, "multilabel": num_labels or 1}[task]
    _check_shapes(preds, target, task, width)
    top = width - 1 if task == "multiclass" else 1
    if not preds.is_floating_point():
        msg = f"Expected `preds` to be a floating point tensor of scores or logits, but got dtype {preds.dtype}."
        raise ValueError(msg)
    if target.is_complex():
        msg = (
            f"Expected `target` to be an integer, bool or floating point tensor of {_NOUNS[task]},"
            f" but got dtype {target.dtype}."
        )
        raise ValueError(msg)
    # a model's outputs read on the host without autograd (no "requires_grad to a scalar" warning)
    scores, labels = preds.detach() if preds.requires_grad else preds, target
    if ignore_index is not None:
        keep = target != ignore_index
        labels = target[keep]
        scores = scores[keep.unsqueeze(1).expand_as(preds) if task == "multiclass" else keep]
    if target.dtype == torch.bool or not labels.numel():
        checked = None  # nothing to check: bool labels lie in {0, 1}
    elif labels.is_floating_point():  # whole numbers in range (NaN is never equal to itself)
        if bool(((labels < 0) | (labels > top) | (labels != labels.trunc())).any()):
            raise _label_error(labels, task, top, ignore_index)
        checked = None
    else:
        checked = labels
    ends = _score_range(scores, checked, top) if scores.numel() else (0.0, 1.0)
    if ends is None:
        raise _label_error(labels, task, top, ignore_index)
    if not (math.isfinite(ends[0]) and math.isfinite(ends[1])):
        bad = scores[~torch.isfinite(scores)]
        msg = (
            f"Expected `preds` to be finite, but found {bad.numel()} NaN or infinite value(s)"
            f" (first: {bad[0].item()}). Check the model outputs before updating the metric."
        )
        raise ValueError(msg)
    in_unit = ends[0] >= 0 and ends[1] <= 1
    if task == "binary" and not in_unit:
        check_binary_normalization(scores, normalization)
    return in_unit if ignore_index is None else None


# what the labels of each task are called (the messages of :func:`check_inputs`)
_NOUNS = {"binary": "labels in {0, 1}", "multiclass": "class indices", "multilabel": "labels"}


def _label_error(labels: Tensor, task: str, top: int, ignore_index: int | None) -> ValueError:
    """The message for labels outside what ``task`` takes (``top``: the highest label), with the values found."""
    expected = {"binary": "only {0, 1}", "multilabel": "labels in [0, 1]"}.get(task, f"class indices in [0, {top}]")
    found = torch.unique(labels).tolist()[:10]
    extra = "" if ignore_index is None else f" or ignore_index={ignore_index}"
    return ValueError(f"Expected `target` to hold {expected}{extra}, but found values {found}.")


def require_integers(values: Any, name: str, per: str) -> None:
    """Raise unless ``values`` (the argument ``name``: ids, groups) is an integer tensor; ``per`` says how many the
    message expects (``"one id per sample"``).
    """
    if not isinstance(values, Tensor):
        msg = f"Expected `{name}` to be an integer tensor, but got {type(values).__name__}."
        raise TypeError(msg)
    if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
        msg = f"Expected `{name}` to be an integer tensor, {per}, but got dtype {values.dtype}."
        raise ValueError(msg)


def validate_sample_ids(
    sample_ids: Tensor, shape: torch.Size, *, name: str = "sample_ids", non_negative: bool = True
) -> None:
    """Check per-sample integers (ids, groups): one per element (``shape``) or one per row (``(shape[0],)``), and
    with ``non_negative`` none below 0 (one ``min``). Whether ids lie in the data set is the ledger's rule
    (``Ledger.check_ids``).
    """
    require_integers(sample_ids, name, "one value per sample")
    if sample_ids.shape != shape:
        rows = shape[0] if len(shape) else 1
        if tuple(sample_ids.shape) != (rows,):
            got = tuple(sample_ids.shape)
            if tuple(shape) == (rows,):  # a row is one sample (a score, or a multiclass / multilabel row)
                msg = f"Expected `{name}` to have shape ({rows},), one value per sample (row), but got {got}."
            else:
                per_row = f"one value per row ({rows},)"
                msg = f"Expected `{name}` to have the sample shape {tuple(shape)} or {per_row}, but got {got}."
            raise ValueError(msg)
    if non_negative and sample_ids.numel():
        low = int_ends(sample_ids, high=False)[0]
        if low < 0:
            msg = f"Expected `{name}` to be >= 0, but found {low}."
            raise ValueError(msg)


def validate_metric_args(
    metric: Any, settings: dict[str, Any], *, max_fpr: float | None, thresholds: Thresholds, sync_timeout: float | None
) -> None:
    """Check the constructor arguments of one of the package's metrics (``settings``: its public settings)."""
    what, task = type(metric).__name__, settings["task"]
    validate_task_args(
        task,
        settings["num_classes"],
        settings["num_labels"],
        settings["average"],
        averages=metric._averages,
        tasks=metric._tasks,
    )
    validate_ranking_args(
        task=task,
        max_fpr=max_fpr,
        thresholds=thresholds,
        ignore_index=settings["ignore_index"],
        normalization=settings["normalization"],
        binned=metric._binned,
        what=what,
    )
    validate_sync_args(
        dataset_size=settings["dataset_size"],
        sync_timeout=sync_timeout,
        compute_on_rank=settings["compute_on_rank"],
        compute_sharded=settings["compute_sharded"],
        exact=thresholds is None,
        shardable=metric._statistic is not None,
        max_fpr=max_fpr,
        what=what,
    )


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


def _normalised(
    scores: Tensor, normalization: Normalization, in_unit: bool | None, normalize: Callable[[Tensor], Tensor]
) -> Tensor:
    """``scores``, or ``normalize(scores)`` (the sigmoid / softmax) when some score lies outside [0, 1] (torchmetrics'
    per-batch rule; NaN lies outside); ``in_unit``: the answer when the caller knows it (``None``: tested here).

    On the CPU the range is read on the host and only the batches that need it are normalised. On the device path
    (:func:`~._device.on_device`) nothing is read back: the test is a device tensor and
    ``torch.where(in_unit, scores, normalize(scores))`` picks (what torchmetrics does), so ``update()`` never waits
    for the device. The values are the CPU path's; a batch of 16-bit probabilities comes back as float32 there (the
    same values: the sigmoid's dtype is float32), integer scores as float32.
    """
    if normalization is None:
        return scores
    if in_unit is None and on_device(scores):
        inside = ((scores >= 0) & (scores <= 1)).all()
        return torch.where(inside, scores, normalize(scores))
    if not (within(scores, 0, 1) if in_unit is None else in_unit):
        return normalize(scores)
    return scores


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
        return _normalised(scores, normalization, in_unit, sigmoid), labels.char(), None
    # ``.bool()`` / ``.long()`` rather than ``.to(dtype)``: the same conversion (none when the dtype is already
    # right), with less per-call overhead; 1-D tensors are taken as they are (a reshape would be a view of them).
    scores = _classes_last(preds) if task == "multiclass" else (preds if preds.ndim == 1 else preds.reshape(-1))
    labels = target if target.ndim == 1 else target.reshape(-1)
    kept = None
    if ignore_index is not None:
        kept = labels != ignore_index
        scores, labels = scores[kept], labels[kept]
    if task == "multiclass":
        return _normalised(scores, normalization, in_unit, softmax), labels.long(), kept
    if normalization == "softmax":  # refused outside [0, 1] (read on the host: a rare setting for binary scores)
        if in_unit is None:
            in_unit = within(scores, 0, 1)
        if not in_unit:
            check_binary_normalization(scores, normalization)
    scores = _normalised(scores, normalization, in_unit, sigmoid)
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
