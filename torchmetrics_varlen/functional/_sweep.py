"""Curves and best F1 straight from sorted packed keys on CPU: NumPy sweeps in cache-sized blocks.

:func:`~torchmetrics_varlen.functional._sort.materialize` followed by
:func:`~torchmetrics_varlen.functional._ranking.descending` builds several int64 and float64 arrays of the size of
the data before the curve's own outputs; on CPU, faulting in those fresh pages and streaming them through memory
costs more than the arithmetic. Here the sorted keys (``2 * code + label``) are read in blocks of :data:`BLOCK`:
each block's runs of equal codes end where two neighbouring keys differ above bit 0 (``(k[i] ^ k[i + 1]) > 1``),
its positives are a running sum of bit 0, and every distinct score writes its rates and threshold straight into the
returned tensors (highest score first for ROC, increasing for precision-recall). Best F1 keeps only the best point.

Every value is computed with the operations of the tensor path (integer counts, one float64 division, one rounding
to float32), so the bits are the same; the tensor path stays for other devices and for counts.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from torchmetrics_varlen.functional._device import on_device
from torchmetrics_varlen.functional._sort import SortedKeys, decode

# Keys per block: the block's buffers (about 18 bytes per key) stay within a core's L2 cache.
BLOCK = 1 << 16

_BITS = {2: torch.int16, 4: torch.int32}  # a float's width -> the integer its threshold bits are written as
_TORCH_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}  # a key's width -> its torch dtype


def usable(col: Any) -> bool:
    """Whether ``col`` can take the sweep: sorted keys of at least one sample, on the CPU path (:func:`on_device`)."""
    return isinstance(col, SortedKeys) and not on_device(col.keys) and col.keys.numel() > 0


def _num_groups(k: Any) -> int:
    """How many distinct codes the sorted keys ``k`` hold (a pass of cache-sized blocks)."""
    n = k.shape[0]
    step = min(BLOCK, n)
    diff = np.empty(step, dtype=k.dtype)
    more = np.empty(step, dtype=bool)
    groups = 1
    for a in range(0, n - 1, step):
        m = min(step, n - 1 - a)
        np.bitwise_xor(k[a + 1 : a + 1 + m], k[a : a + m], out=diff[:m])
        np.greater(diff[:m], 1, out=more[:m])
        groups += int(np.count_nonzero(more[:m]))
    return groups


def _ends(k: Any) -> Iterator[tuple[int, Any, Any]]:
    """``(groups before, ends, pos_le)`` of each block of the sorted keys ``k``, in increasing order.

    ``ends`` (int64) are the global indices of the last key of every run of equal codes that ends in the block (the
    last key of all included), ``pos_le`` (int64) the positives up to and including each.
    """
    n = k.shape[0]
    step = min(BLOCK, n)
    diff = np.empty(step, dtype=k.dtype)
    more = np.empty(step, dtype=bool)
    labels = torch.empty(step, dtype=_TORCH_INT[k.dtype.itemsize])
    labels_np = labels.numpy()
    running = torch.empty(step, dtype=torch.int64)  # torch's cumulative sum is several times NumPy's speed
    running_np = running.numpy()
    before, positives = 0, 0
    for a in range(0, n, step):
        m = min(step, n - a)
        last = a + m == n
        inner = m - 1 if last else m  # neighbours looked at (the very last key has none: it ends its run)
        np.bitwise_xor(k[a + 1 : a + 1 + inner], k[a : a + inner], out=diff[:inner])
        np.greater(diff[:inner], 1, out=more[:inner])
        if last:
            more[inner] = True
        local = np.flatnonzero(more[:m])
        np.bitwise_and(k[a : a + m], 1, out=labels_np[:m])
        torch.cumsum(labels[:m], 0, out=running[:m])
        pos_le = running_np[local]
        pos_le += positives
        positives += int(running_np[m - 1])
        local += a
        yield before, local, pos_le
        before += local.shape[0]


def _bits_of(k: Any, at: Any, dtype: torch.dtype, compact: bool) -> Any:
    """The bits of the scores of the keys ``k[at]``, as the integers of the scores' width."""
    codes = torch.from_numpy(np.right_shift(k[at], 1))
    return decode(codes, dtype, compact).view(_BITS[dtype.itemsize]).numpy()


def _ratio_into(out: Any, num: Any, den: float | Any) -> None:
    """``out[:] = float32(float64(num) / float64(den))``: the tensor path's ``num.double() / den`` and rounding."""
    np.divide(num, den, out=out, dtype=np.float64, casting="same_kind")


def roc(col: SortedKeys, warn_absent: tuple[str, str]) -> tuple[Tensor, Tensor, Tensor]:
    """``(fpr, tpr, thresholds)`` of sorted keys: the origin at threshold ``1.0``, then every distinct score, highest
    first. A class that is absent gives a zero rate and its warning (``warn_absent``: no negatives, no positives).
    """
    k = col.keys.numpy()
    n, n_pos = k.shape[0], col.n_pos
    n_neg = n - n_pos
    if n_neg <= 0:
        warnings.warn(warn_absent[0], UserWarning, stacklevel=2)
    if n_pos <= 0:
        warnings.warn(warn_absent[1], UserWarning, stacklevel=2)
    g = _num_groups(k)
    fpr, tpr = torch.empty(g + 1, dtype=torch.float32), torch.empty(g + 1, dtype=torch.float32)
    thresholds = torch.empty(g + 1, dtype=col.dtype)
    fpr_np, tpr_np, thr_np = fpr.numpy(), tpr.numpy(), thresholds.view(_BITS[col.dtype.itemsize]).numpy()
    # Positions count from the highest score. The samples above the run of rank r (ranks increase with the score)
    # are the false / true positives at the next higher score, position g - 1 - r (the origin for the last run);
    # its threshold is at position g - r. The lowest score (position g) counts every sample.
    fpr_np[g], tpr_np[g] = (1.0 if n_neg > 0 else 0.0), (1.0 if n_pos > 0 else 0.0)
    thresholds[0] = 1.0
    for before, ends, pos_le in _ends(k):
        c = ends.shape[0]
        at = slice(g - before - c, g - before)
        # Negatives above the run: n_neg - (ends + 1 - pos_le); positives above: n_pos - pos_le (exact int64).
        if n_neg > 0:
            neg_above = pos_le - ends
            neg_above += n_neg - 1
            _ratio_into(fpr_np[at][::-1], neg_above, float(n_neg))
        if n_pos > 0:
            pos_above = n_pos - pos_le
            _ratio_into(tpr_np[at][::-1], pos_above, float(n_pos))
        thr_np[g - before - c + 1 : g - before + 1][::-1] = _bits_of(k, ends, col.dtype, col.compact)
    if n_neg <= 0:
        fpr_np[:] = 0.0
    if n_pos <= 0:
        tpr_np[:] = 0.0
    return fpr, tpr, thresholds


def precision_recall(col: SortedKeys, no_positives: str) -> tuple[Tensor, Tensor, Tensor]:
    """``(precision, recall, thresholds)`` of sorted keys: every distinct score, increasing, then ``(1, 0)``.
    Without positives recall is 1 (``no_positives`` is warned).
    """
    k = col.keys.numpy()
    n, n_pos = k.shape[0], col.n_pos
    if n_pos <= 0:
        warnings.warn(no_positives, UserWarning, stacklevel=4)
    g = _num_groups(k)
    precision, recall = torch.empty(g + 1, dtype=torch.float32), torch.empty(g + 1, dtype=torch.float32)
    thresholds = torch.empty(g, dtype=col.dtype)
    prec_np, rec_np, thr_np = precision.numpy(), recall.numpy(), thresholds.view(_BITS[col.dtype.itemsize]).numpy()
    # The lowest distinct score: every sample is at or above it.
    prec_np[0] = np.float32(np.float64(n_pos) / np.float64(n))
    rec_np[0] = 1.0
    for before, ends, pos_le in _ends(k):
        c = ends.shape[0]
        at = slice(before + 1, before + 1 + c)  # the run ending at rank r sets the point of rank r + 1
        pos_above = n_pos - pos_le
        all_above = n - 1 - ends
        # The last run's point (rank g) is the final (1, 0): its 0 / 0 is overwritten below.
        with np.errstate(invalid="ignore", divide="ignore"):
            _ratio_into(prec_np[at], pos_above, all_above)
        if n_pos > 0:
            _ratio_into(rec_np[at], pos_above, float(n_pos))
        thr_np[before : before + c] = _bits_of(k, ends, col.dtype, col.compact)
    if n_pos <= 0:
        rec_np[:] = 1.0
    prec_np[g], rec_np[g] = 1.0, 0.0
    return precision, recall, thresholds


def best_f1(col: SortedKeys) -> tuple[Tensor, Tensor]:
    """``(best F1 as float64, its threshold)`` of sorted keys with at least one positive: ``2 TP / (TP + FP + P)``
    at every distinct score, the highest score among equal maxima.
    """
    k = col.keys.numpy()
    n, n_pos = k.shape[0], col.n_pos
    # The lowest distinct score: TP = P, TP + FP = N.
    best, start = float(np.float64(2.0 * n_pos) / np.float64(n + n_pos)), 0
    for _, ends, pos_le in _ends(k):
        if ends.shape[0] and ends[-1] == n - 1:  # the last run sets no point: nothing is above the highest score
            ends, pos_le = ends[:-1], pos_le[:-1]
        if not ends.shape[0]:  # a block inside one run
            continue
        twice_tp = (n_pos - pos_le).astype(np.float64)
        twice_tp *= 2.0
        den = n + n_pos - 1 - ends
        f1 = np.divide(twice_tp, den, out=twice_tp)
        at = f1.shape[0] - 1 - int(np.argmax(f1[::-1]))  # the last maximum: the highest score among ties
        if f1[at] >= best:
            best, start = float(f1[at]), int(ends[at]) + 1
    threshold = torch.from_numpy(_bits_of(k, np.array([start]), col.dtype, col.compact)).view(col.dtype)[0]
    return torch.tensor(best, dtype=torch.float64), threshold
