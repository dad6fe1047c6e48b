"""Constant-memory exact mode for 16-bit scores: per-class histograms over every representable value.

float16 and bfloat16 have 65,536 bit patterns. Counting the raw patterns per class, then putting the 65,536 bins
in value order (``-0.0`` joins ``+0.0``), turns "sort N scores" into "count N scores into 65,536 bins": the
cumulative counts per non-empty bin are exactly the counts per distinct score that the sort-based path produces on
the same rounded scores, so AUROC, AP, curves and best F1 are identical to the sort-based values, with a state whose
size does not depend on N and that sums across ranks with one fixed-size all-reduce.

Its ``compute()`` is a fixed number of whole-histogram operations whatever N, on every device (:class:`HistCounts`,
:func:`~._ranking.counts_rank_sums`: no loop over chunks of the counts), and ``update()`` counts a batch into the
state in place (``index_add_``: no ``torch.bincount``, which reads the range back to the host on CUDA, and no host
read at all on the device path).
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchmetrics_varlen.functional._device import on_device
from torchmetrics_varlen.functional._sort import Counts, running_sum

BINS = 1 << 16
_HALF = 1 << 15
_INT32_BINS = (1 << 31) - 1  # the largest state whose flat bins an int32 index reaches
# torch >= 2.3 on the CPU: a uint16 view converts to the raw pattern in one pass (no sign to mask off). Elsewhere the
# int16 view and a mask (uint16 has few kernels on the devices, and older torch has no uint16).
_UINT16 = getattr(torch, "uint16", None)


# Sorted bins below this are NaNs with the sign bit set (2**mantissa bits: -inf's bin), bins above 65,536 minus this
# NaNs without it: every NaN counts in the last bin, above +inf, as the sort keys rank it (``_sort._NAN_BELOW``).
_NAN_BELOW = {torch.float16: 1 << 10, torch.bfloat16: 1 << 7}


def bins_of(bits: Tensor, dtype: torch.dtype) -> Tensor:
    """The sorted bin (0 .. 65535, increasing with the value) of raw 16-bit patterns of ``dtype`` given as int32 in
    0 .. 65535; every NaN, whatever its sign and payload, in the last bin.
    """
    signed = torch.where(bits >= _HALF, bits - BINS, bits)
    bins = signed.abs() + (signed >= 0).to(bits.dtype) * _HALF
    nan_below = _NAN_BELOW[dtype]
    return bins.masked_fill_((bins < nan_below) | (bins > BINS - nan_below), BINS - 1)


def values_of(bins: Tensor, dtype: torch.dtype) -> Tensor:
    """The ``dtype`` value of each sorted bin (inverse of :func:`bins_of`; bin 32768 is ``+0.0``)."""
    bits = torch.where(bins >= _HALF, bins - _HALF, -bins).to(torch.int16)
    return bits.view(dtype)


def histogram(preds: Tensor, positives: Tensor, dtype: torch.dtype, weight: Tensor | None = None) -> Tensor:
    """``(2, 65536)`` int64 counts of the raw bit patterns of the rounded scores: row 0 negatives, row 1 positives.

    Counting raw patterns is one pass and one ``index_add_`` (weighted: one ``bincount``); the order of the values
    is applied to the 65,536 bins at compute time (:func:`counts_from_histogram`). With ``weight`` (one non-negative
    weight per score) the bins hold float64 sums of weights instead (sample weights; a bin of zero weight counts as
    empty).
    """
    if weight is None:  # counted in place into zeros (no bincount: its range is read back to the host on CUDA)
        state = torch.zeros((2, BINS), dtype=torch.int64, device=preds.device)
        return histogram_into(state, preds.reshape(-1), positives.reshape(-1), dtype)
    key = preds.to(dtype).view(torch.int16).to(torch.int32)
    key.bitwise_and_(BINS - 1)
    key.add_(positives.reshape(-1).to(torch.bool), alpha=BINS)
    weights = weight.reshape(-1).to(device=key.device, dtype=torch.float64)
    # float64 even for no score: torch.bincount of no values returns int64 zeros, whatever the weights
    return torch.bincount(key, weights=weights, minlength=2 * BINS).to(torch.float64).view(2, BINS)


def histogram_into(state: Tensor, preds: Tensor, positives: Tensor, dtype: torch.dtype) -> Tensor:
    """Add the counts of a batch to an int64 histogram ``state`` **in place** and return it; the same integers as
    ``state + histogram(...)`` (per problem), at a cost proportional to the batch, not to the 65,536 bins.

    ``state`` is ``(2, 65536)`` with ``preds`` / ``positives`` of shape ``(M,)``, or ``(K, 2, 65536)`` with ``(M,
    K)`` scores and positives (one problem per column, all counted in one pass). ``positives`` is bool / 0-1, or
    ``-1`` for an entry that is not counted (a multilabel ``ignore_index``). The caller must own ``state``'s storage
    (a state shared with another process, e.g. after pickling to spawned ranks, must be cloned first).

    One flat bin per entry (raw pattern + 65,536 x label + 131,072 x problem), then one ``index_add_`` of ones.
    """
    flat, index = _bins_of_scores(state, preds, dtype)
    # bool / uint8 labels (the stored binary and multiclass forms) cannot be negative: no "ignored" pass for them
    ignored = None if positives.dtype in (torch.bool, torch.uint8) else positives.reshape(-1) < 0
    index.add_((positives if ignored is None else positives.clamp(min=0)).to(index.dtype), alpha=BINS)
    index = _problem_offsets(state, index).reshape(-1)
    if ignored is not None and on_device(flat):  # no host read: an ignored entry adds 0 (to a bin of its own row)
        flat.index_add_(0, index, ignored.logical_not().to(torch.int64))
        return state
    if ignored is not None and bool(ignored.any()):
        index = index[~ignored]
    _add_ones(flat, index)
    return state


def class_histogram_into(state: Tensor, preds: Tensor, classes: Tensor, dtype: torch.dtype) -> Tensor:
    """:func:`histogram_into` for multiclass rows: ``preds`` ``(M, K)``, ``classes`` ``(M,)`` the class of each row
    (positive in its column, negative in the others; a class outside ``0 .. K-1``: negative everywhere). The same
    integers as ``histogram_into(state, preds, classes[:, None] == arange(K), dtype)``, with the label added once per
    row rather than compared, converted and added over every ``(row, class)`` entry.
    """
    flat, index = _bins_of_scores(state, preds, dtype)
    width = state.shape[0]
    index = _problem_offsets(state, index.reshape(-1, width))
    rows = classes.reshape(-1, 1)
    inside = (rows >= 0) & (rows < width)
    index.scatter_add_(1, rows.clamp(0, width - 1), inside.to(index.dtype).mul_(BINS))
    _add_ones(flat, index.reshape(-1))
    return state


def _bins_of_scores(state: Tensor, preds: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The flat view of an int64 ``state`` and the raw 16-bit pattern of every score (int32 where the state's flat
    bins allow it: its conversions and additions are about twice as fast as int64's).
    """
    if state.dtype != torch.int64:
        msg = f"Expected an int64 histogram state, but got {state.dtype}."
        raise ValueError(msg)
    flat = state.view(-1)
    key = torch.int32 if flat.numel() <= _INT32_BINS else torch.int64
    if _UINT16 is not None and not on_device(flat):
        return flat, preds.to(dtype).view(_UINT16).to(key)
    index = preds.to(dtype).view(torch.int16).to(key)
    return flat, index.bitwise_and_(BINS - 1)


def _problem_offsets(state: Tensor, index: Tensor) -> Tensor:
    """``(M, K)`` bins of a ``(K, 2, 65536)`` state moved to their problem's rows (one problem per column)."""
    if state.dim() != 3:
        return index
    index = index.reshape(-1, state.shape[0])
    return index.add_(torch.arange(0, state.numel(), 2 * BINS, dtype=index.dtype, device=index.device))


def _add_ones(flat: Tensor, index: Tensor) -> None:
    """One count into each of the flat bins ``index`` (a scatter of the batch: at every batch size faster than a
    dense ``bincount`` of all the bins added to the state).
    """
    flat.index_add_(0, index, torch.ones((), dtype=torch.int64, device=flat.device).expand(index.numel()))


_ORDER: dict[tuple[torch.device, torch.dtype], Tensor] = {}


def _value_order(device: torch.device, dtype: torch.dtype) -> Tensor:
    """:func:`bins_of` of every raw pattern, made once per device and dtype (six 65,536-entry passes per compute
    otherwise).
    """
    order = _ORDER.get((device, dtype))
    if order is None:
        order = _ORDER[device, dtype] = bins_of(torch.arange(BINS, dtype=torch.int64, device=device), dtype)
    return order


def counts_from_histogram(hist: Tensor, dtype: torch.dtype, with_scores: bool = False) -> Counts:
    """Cumulative counts at the non-empty values, as :func:`~torchmetrics_varlen.functional._sort.ascending_counts`.

    The raw-pattern histogram is first put in value order (``-0.0`` joins ``+0.0``). A weighted (float64)
    histogram gives float64 sums of weights, as :func:`~torchmetrics_varlen.functional._weighted.weighted_counts`,
    the negatives' weight a running sum of its own (``neg_le``).
    """
    ordered = torch.zeros_like(hist).index_add_(1, _value_order(hist.device, dtype), hist)
    total = ordered[0] + ordered[1]
    nonempty = torch.nonzero(total).flatten()
    scores = values_of(nonempty, dtype) if with_scores else None
    if not hist.is_floating_point():
        return HistCounts(torch.cumsum(ordered[1], 0)[nonempty], torch.cumsum(total, 0)[nonempty], scores)
    pos_le, neg_le = running_sum(ordered[1])[nonempty], running_sum(ordered[0])[nonempty]
    return Counts(pos_le, running_sum(total)[nonempty], scores, neg_le)


class HistCounts(Counts):
    """The integer :class:`~._sort.Counts` of a 16-bit histogram (at most 65,536 distinct scores): its rank sums are
    taken by :func:`~._ranking.counts_rank_sums` on every device, whole-vector operations, not the chunk loop of
    sorted keys.
    """

    __slots__ = ()
