"""Constant-memory exact mode for 16-bit scores: per-class histograms over every representable value.

float16 and bfloat16 have 65,536 bit patterns. Mapping each pattern to an order-preserving bin (``-0.0`` shares
the bin of ``+0.0``) turns "sort N scores" into "count N scores into 65,536 bins": the cumulative counts per
non-empty bin are exactly the counts per distinct score that the sort-based path produces on the same rounded
scores, so AUROC, AP, curves and best F1 are identical to the sort-based values, with a state whose size does not
depend on N and that sums across ranks with one fixed-size all-reduce.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchmetrics_varlen.functional._sort import Counts

HIST_DTYPES = (torch.float16, torch.bfloat16)
BINS = 1 << 16
_HALF = 1 << 15


def bins_of(preds: Tensor, dtype: torch.dtype) -> Tensor:
    """The bin (0 .. 65535, increasing with the value) of every score rounded to ``dtype``."""
    bits = preds.to(dtype).view(torch.int16).to(torch.int32)
    return bits.abs() + (bits >= 0).to(torch.int32) * _HALF


def values_of(bins: Tensor, dtype: torch.dtype) -> Tensor:
    """The ``dtype`` value of each bin (inverse of :func:`bins_of`; bin 32768 is ``+0.0``)."""
    bits = torch.where(bins >= _HALF, bins - _HALF, -bins).to(torch.int16)
    return bits.view(dtype)


def histogram(preds: Tensor, positives: Tensor, dtype: torch.dtype) -> Tensor:
    """``(2, 65536)`` int64 counts: row 0 negatives, row 1 positives, per bin."""
    keys = bins_of(preds, dtype).to(torch.int64) + BINS * positives.reshape(-1).to(torch.int64)
    return torch.bincount(keys, minlength=2 * BINS).view(2, BINS)


def counts_from_histogram(hist: Tensor, dtype: torch.dtype, with_scores: bool = False) -> Counts:
    """Cumulative counts at the non-empty bins, as :func:`~torchmetrics_varlen.functional._sort.ascending_counts`."""
    total = hist[0] + hist[1]
    nonempty = torch.nonzero(total).flatten()
    pos_le = torch.cumsum(hist[1], 0)[nonempty]
    all_le = torch.cumsum(total, 0)[nonempty]
    return Counts(pos_le, all_le, values_of(nonempty, dtype) if with_scores else None)
