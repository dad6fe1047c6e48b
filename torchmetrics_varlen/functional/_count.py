"""Order and count: the mode of a metric, decided once, and every binary problem of its state in counted form.

Three modes, chosen by the ``thresholds`` argument (:meth:`CountMode.of`):

- ``"exact"`` (``None``): the state is the stored rows; each problem is sorted at compute time (``_sort``);
- ``"binned"`` (an int, a list or a 1-D tensor): a summed multi-threshold confusion matrix per problem
  (``(T, 2, 2)``, ``(T, K, 2, 2)`` per class / label), torchmetrics' approximation;
- ``"histogram"`` (``torch.float16`` / ``torch.bfloat16``): a summed histogram of the 16-bit scores per problem
  (``(2, 65536)``, ``(K, 2, 65536)``), exact for the rounded scores in constant memory (``_hist``). Every score is
  rounded to the mode's dtype, the float32 sigmoids of 16-bit logits too (the same bits as their float64 sigmoid
  rounded once to 16 bits); with ``normalization=None`` 16-bit logits count as their own bit patterns, which rank
  as their sigmoids do: the exact value on the logits (``_normalize``'s module docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from torchmetrics_varlen.functional._hist import (
    BINS,
    class_histogram_into,
    counts_from_histogram,
    histogram,
    histogram_into,
)
from torchmetrics_varlen.functional._sort import (
    SortedKeys,
    SortedProblem,
    packable,
    running_sum,
    sort_classes,
    sort_problem,
)
from torchmetrics_varlen.functional._validation import (
    RankingArgs,
    Split,
    Thresholds,
    format_inputs,
    merged_rows,
    rows_by_class,
    within,
)


class Binned(NamedTuple):
    """One binary problem in binned mode: its confusion matrices ``(T, 2, 2)`` (``[t, target, pred >= thr]``)."""

    confmat: Tensor
    thresholds: Tensor


Problem = SortedProblem | Binned
Pieces = Tensor | list[Tensor]


def problem_device(problem: Problem) -> torch.device:
    """The device of a counted problem's tensors."""
    if isinstance(problem, Binned):
        return problem.confmat.device
    return problem.keys.device if isinstance(problem, SortedKeys) else problem.pos_le.device


@dataclass(frozen=True)
class CountMode:
    """How a metric counts its scores (see the module docstring); a metric decides it once, in its constructor.

    Attributes:
        kind: ``"exact"``, ``"binned"`` or ``"histogram"``.
        dtype: The 16-bit dtype of the histogram mode, else ``None``.
    """

    kind: Literal["exact", "binned", "histogram"]
    dtype: torch.dtype | None = None

    @classmethod
    def of(cls, thresholds: Thresholds) -> CountMode:
        """The mode of a ``thresholds`` argument."""
        if thresholds is None:
            return cls("exact")
        if isinstance(thresholds, torch.dtype):
            return cls("histogram", thresholds)
        return cls("binned")

    @property
    def state_name(self) -> str | None:
        """The name of the summed state (``"confmat"`` / ``"hist"``); ``None`` for the exact mode's rows."""
        return {"binned": "confmat", "histogram": "hist"}.get(self.kind)

    @property
    def class_dim(self) -> int:
        """The class / label dimension of the summed state."""
        return 1 if self.kind == "binned" else 0


def threshold_tensor(thresholds: Thresholds, device: torch.device | None = None) -> Tensor | None:
    """The binned mode's thresholds as a float tensor (an int ``n`` means ``linspace(0, 1, n)``); else ``None``."""
    if thresholds is None or isinstance(thresholds, torch.dtype):
        return None
    if isinstance(thresholds, int):
        return torch.linspace(0, 1, thresholds, device=device)
    if isinstance(thresholds, list):
        return torch.tensor(thresholds, device=device)
    return thresholds.to(device) if device is not None else thresholds


def binned_confmat(preds: Tensor, target: Tensor, thresholds: Tensor, weight: Tensor | None = None) -> Tensor:
    """Multi-threshold confusion matrix ``[T, 2, 2]`` (``[t, target, pred >= thr]``) in int64, as torchmetrics lays
    it out: one ``bucketize`` and two ``bincount`` calls instead of a ``[N, T]`` comparison. With ``weight`` (one
    non-negative weight per score) the entries are float64 sums of weights (sample weights).
    """
    n_thr = thresholds.numel()
    sorted_thr, thr_order = torch.sort(thresholds.to(torch.float64))
    # Number of thresholds <= score: the score is ">= thr" for exactly the first `bucket` sorted thresholds.
    # contiguous: a class column of multiclass scores is a strided view (bucketize would copy it, with a warning)
    bucket = torch.bucketize(preds.to(torch.float64).contiguous(), sorted_thr, right=True)
    positive = target.reshape(-1).to(torch.bool)
    if weight is None:
        pos_hist = torch.bincount(bucket[positive], minlength=n_thr + 1)
        neg_hist = torch.bincount(bucket[~positive], minlength=n_thr + 1)
    else:
        w = weight.reshape(-1).to(device=bucket.device, dtype=torch.float64)
        # float64 even for an empty class: torch.bincount of no values returns int64 zeros, whatever the weights
        pos_hist = torch.bincount(bucket[positive], weights=w[positive], minlength=n_thr + 1).to(torch.float64)
        neg_hist = torch.bincount(bucket[~positive], weights=w[~positive], minlength=n_thr + 1).to(torch.float64)
    # Predicted positive at sorted threshold i: buckets i+1 .. T; predicted negative: buckets 0 .. i. Each entry is a
    # running sum of its own: sums of weights taken as "total - predicted positive" can go below 0.
    running = torch.cumsum if weight is None else running_sum  # integers: exact in any order
    confmat = torch.empty((n_thr, 2, 2), dtype=pos_hist.dtype, device=preds.device)
    confmat[thr_order, 1, 1] = running(pos_hist.flip(0), 0).flip(0)[1:]
    confmat[thr_order, 0, 1] = running(neg_hist.flip(0), 0).flip(0)[1:]
    confmat[thr_order, 1, 0] = running(pos_hist, 0)[:-1]
    confmat[thr_order, 0, 0] = running(neg_hist, 0)[:-1]
    return confmat


def empty_state(mode: CountMode, task: str, width: int, n_thresholds: int) -> Tensor:
    """The all-zero summed state of a binned or histogram ``mode``."""
    one: tuple[int, ...] = (n_thresholds, 2, 2) if mode.kind == "binned" else (2, BINS)
    d = mode.class_dim
    return torch.zeros(one if task == "binary" else (*one[:d], width, *one[d:]), dtype=torch.int64)


def count(mode: CountMode, scores: Tensor, labels: Tensor, task: str, thresholds: Tensor | None) -> Tensor:
    """The summed state of one batch of stored rows (binned or histogram mode), to add to the metric's."""
    if mode.kind == "binned":
        assert thresholds is not None

        def one(s: Tensor, p: Tensor) -> Tensor:
            return binned_confmat(s, p, thresholds.to(s.device))
    else:
        assert mode.dtype is not None
        dtype = mode.dtype

        def one(s: Tensor, p: Tensor) -> Tensor:
            return histogram(s, p, dtype)

    if task == "binary":
        return one(scores, labels)
    return torch.stack([one(s, p) for s, p in rows_by_class((scores, labels), task)], dim=mode.class_dim)


def count_into(
    mode: CountMode, state: Tensor, scores: Tensor, labels: Tensor, task: str, thresholds: Tensor | None
) -> Tensor:
    """Add one batch of stored rows to the summed ``state`` **in place** and return it: the same integers as
    ``state + count(mode, scores, labels, task, thresholds)``.

    In the 16-bit mode the batch is counted straight into the state (:func:`~._hist.histogram_into`: O(batch) for
    small batches, every class at once) instead of building a ``(2, 65536)`` histogram per problem and adding it. The
    binned mode adds :func:`count`'s result. The caller must own ``state``'s storage (clone a state that may be shared
    with another process first).
    """
    if mode.kind != "histogram":
        return state.add_(count(mode, scores, labels, task, thresholds))
    assert mode.dtype is not None
    if task == "binary":
        return histogram_into(state, scores.reshape(-1), labels.reshape(-1), mode.dtype)
    if task == "multiclass":
        return class_histogram_into(state, scores, labels, mode.dtype)
    return histogram_into(state, scores, labels, mode.dtype)  # multilabel: int8 0 / 1, -1 where ignored


def _cat(x: Pieces) -> Tensor:
    pieces = [x] if isinstance(x, Tensor) else list(x)
    return torch.cat(pieces) if len(pieces) > 1 else pieces[0]


def split_rows(split: Split, preds: Pieces, target: Pieces) -> list[tuple[Pieces, Pieces]]:
    """``(scores, positives)`` of every problem of stored rows (binary rows may stay pieces: no concatenation)."""
    if split.task == "binary":
        return [(preds, target)]
    rows: tuple[Tensor, Tensor] = (_cat(preds), _cat(target))
    problems = split.apply(rows, lambda r: merged_rows(r, split.task), lambda r: rows_by_class(r, split.task))
    return list(problems)


def counted_problems(
    mode: CountMode,
    state: Tensor | tuple[Pieces, Pieces],
    split: Split,
    thresholds: Tensor | None,
    with_scores: bool,
    compact: bool | None = None,
) -> list[Problem]:
    """Every binary problem of a metric's state, ordered and counted.

    ``state`` is the stored rows ``(preds, target)`` (exact) or the summed state. ``with_scores`` only matters for
    float64 scores (16/32-bit thresholds are decoded from the sort keys on demand). ``compact=True`` when every
    stored score is known to lie in [0, 2) (``None``: tested when sorting).
    """
    if isinstance(state, tuple):
        fused = sort_classes(*state, split.task, compact) if split.per_class else None
        if fused is not None:  # the device path: every class in one sort
            return list(fused)
        return [sort_problem(s, p, with_scores, compact) for s, p in split_rows(split, *state)]
    d = mode.class_dim
    summed = split.apply(state, lambda s: s.sum(d), lambda s: list(s.unbind(d)))
    if mode.kind == "binned":
        assert thresholds is not None
        return [Binned(c, thresholds.to(c.device)) for c in summed]
    assert mode.dtype is not None
    return [counts_from_histogram(h, mode.dtype, with_scores) for h in summed]


def batch_problems(
    preds: Tensor, target: Tensor, args: RankingArgs, *, with_scores: bool = True, in_unit: bool | None = None
) -> list[Problem]:
    """The functional path in one call: format one (validated) batch, count it in its mode, split it into problems.

    ``with_scores`` only matters for float64 scores: the partial AUC and the curves need the distinct scores.
    ``in_unit``: whether every score lies in [0, 1], when the checks found out (:meth:`RankingArgs.validate`). A
    binary batch's range is read once: it decides the sigmoid and, when it holds, the compact sort keys.
    """
    mode, thresholds = CountMode.of(args.thresholds), threshold_tensor(args.thresholds, preds.device)
    if in_unit is None and args.task == "binary" and args.ignore_index is None and args.normalization is not None:
        in_unit = within(preds, 0, 1)
    # exact binary scores sorted on CPU as packed keys: the labels go in as they are (non-zero: positive)
    keep = mode.kind == "exact" and args.task == "binary" and preds.is_cpu and target.is_cpu and packable(preds.dtype)
    scores, labels, _ = format_inputs(
        preds, target, args.task, args.ignore_index, args.normalization, in_unit, keep_labels=keep
    )
    state = (scores, labels) if mode.kind == "exact" else count(mode, scores, labels, args.task, thresholds)
    compact = True if in_unit and args.task == "binary" and args.ignore_index is None else None
    return counted_problems(mode, state, Split(args.task, args.average), thresholds, with_scores, compact)
