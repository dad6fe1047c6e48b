"""One sort of the scores into integer counts per distinct score: the only O(N log N) step of the exact metrics.

For 16- and 32-bit floats the label is packed into the lowest bit of an order-preserving integer key built from
the float's bits, so one integer sort (PyTorch's CPU radix sort for non-negative integer keys, and one fast
device sort elsewhere) orders scores and carries labels along: no gather of the labels by a random permutation.
float64 scores (63 + 1 bits do not fit) take a float sort and a gather.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

_KEYS = {
    torch.float32: (torch.int32, torch.int64, 1 << 31),
    torch.float16: (torch.int16, torch.int32, 1 << 15),
    torch.bfloat16: (torch.int16, torch.int32, 1 << 15),
}


class Counts(NamedTuple):
    """Cumulative counts at the distinct scores, in increasing order of score.

    Attributes:
        pos_le: Positives with a score ``<=`` each distinct score (int64).
        all_le: Samples with a score ``<=`` each distinct score (int64).
        scores: The distinct scores, increasing (``None`` unless asked for).
    """

    pos_le: Tensor
    all_le: Tensor
    scores: Tensor | None


def _packed_keys(preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor] | None:
    """Sorted keys ``2 * rank_of_score + label`` and the sorting permutation, or ``None`` for other dtypes."""
    if preds.dtype not in _KEYS:
        return None
    as_int, wide, half = _KEYS[preds.dtype]
    key = preds.contiguous().view(as_int).to(wide)
    nonneg = key >= 0
    # Sign-magnitude float bits -> an increasing integer: |b| for negative floats (and -0.0, which lands on the key
    # of +0.0), |b| + 2^(bits-1) for positive ones. Then shift the label into bit 0.
    key.abs_()
    key.add_(nonneg.to(wide), alpha=half)
    del nonneg
    key.bitwise_left_shift_(1)
    key.bitwise_or_(target.to(wide))
    order = torch.empty(key.shape, dtype=torch.int64, device=key.device)
    torch.sort(key, out=(key, order))  # ascending, non-negative integers: radix sort on CPU
    return key, order


def _run_ends(sorted_scores: Tensor) -> Tensor:
    """Index of the last element of every run of equal values in a sorted vector."""
    n = sorted_scores.numel()
    ends = torch.nonzero(sorted_scores[1:] != sorted_scores[:-1]).flatten()
    return torch.cat([ends, ends.new_tensor([n - 1])])


def ascending_counts(preds: Tensor, target: Tensor, with_scores: bool = False) -> Counts:
    """Positives and samples at or below every distinct score of ``preds`` (1-D floats, ``target`` bool / 0-1)."""
    n = preds.numel()
    if n == 0:
        empty = torch.zeros(0, dtype=torch.int64, device=preds.device)
        return Counts(empty, empty.clone(), preds.new_zeros(0) if with_scores else None)
    packed = _packed_keys(preds, target)
    if packed is not None:
        key, order = packed
        positives = key.bitwise_and(1).to(torch.int64)  # int64 counts, whatever the key width
        positives.cumsum_(0)
        key.bitwise_right_shift_(1)
        ends = _run_ends(key)
        del key
        scores = preds[order[ends]] if with_scores else None
        del order
    else:
        sorted_scores, order = torch.sort(preds)
        positives = target[order].to(torch.int64)
        del order
        positives.cumsum_(0)
        ends = _run_ends(sorted_scores)
        scores = sorted_scores[ends] if with_scores else None
        del sorted_scores
    pos_le = positives[ends]
    del positives
    return Counts(pos_le, ends + 1, scores)
