"""Exact ranking statistics shared by the AUROC and average-precision functions.

Everything here is pure tensor math on counted problems: no validation, no ``torch.distributed``.

The exact path turns scores into integer counts per distinct threshold (one sort, one cumulative sum) and only
then into float64. Because the counts are integers, the result depends on the multiset of ``(score, target)``
pairs only, never on their order: any split of the data over ranks, batches or shuffles gives the same bits. The
public values are returned in torchmetrics' dtype, float32 (:func:`as_output`), rounded once at the very end.

The last step of the functional path: validate (``_checks``), format (``_validation``), order and count (``_count``),
reduce (:func:`reduce_problems`: a scalar statistic of every binary problem, averaged over classes). The sharded
compute reduces its distributed sums here too (:func:`reduce_sums`).
"""

from __future__ import annotations

import itertools
import struct
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import torch
from torch import Tensor

from torchmetrics_varlen.functional._count import Binned, Problem, problem_device
from torchmetrics_varlen.functional._device import on_device
from torchmetrics_varlen.functional._hist import HistCounts
from torchmetrics_varlen.functional._sort import (
    Counts,
    SortedKeys,
    SortedProblem,
    chunk_bounds,
    chunks,
    local_counts,
    materialize,
    parts_for,
    run_all,
    size,
    split_points,
)
from torchmetrics_varlen.functional._validation import Average, Split

_NO_POSITIVES_ROC = (
    "No positive samples in targets, true positive value should be meaningless."
    " Returning zero tensor in true positive score"
)
_NO_NEGATIVES_ROC = (
    "No negative samples in targets, false positive value should be meaningless."
    " Returning zero tensor in false positive score"
)
_NO_POSITIVES_PR = "No positive samples found in target, recall is undefined. Setting recall to one for all thresholds."

OUTPUT_DTYPE = torch.float32  # what torchmetrics returns for values, rates and precisions, whatever the input dtype


def as_output(value: Tensor) -> Tensor:
    """``value`` in torchmetrics' output dtype (float32).

    The computation before is exact (integer counts, float64 ratios); this single rounding is the last step, so the
    result is the float32 nearest to the float64 value, the same bits for any split of the data over ranks.
    """
    return value.to(OUTPUT_DTYPE)


def descending(counts: Counts) -> tuple[Tensor, Tensor, Tensor]:
    """``(fps, tps, thresholds)`` at every distinct score, highest first (scikit-learn's ``_binary_clf_curve``).

    Sums of weights (``counts.neg_le`` set) take each class from its own running sum, ``total - sum below``: a
    running sum of non-negative weights never decreases and ends at the total, so both are exactly 0 above the
    class's highest score, never decrease, and end exactly at the class's total, whatever the rounding.
    """
    assert counts.scores is not None
    if counts.pos_le.numel() == 0:
        return counts.pos_le, counts.all_le, counts.scores
    pos_below = torch.cat([counts.pos_le.new_zeros(1), counts.pos_le[:-1]])
    tps = (counts.pos_le[-1] - pos_below).flip(0)
    if counts.neg_le is not None:
        neg_below = torch.cat([counts.neg_le.new_zeros(1), counts.neg_le[:-1]])
        return (counts.neg_le[-1] - neg_below).flip(0), tps, counts.scores.flip(0)
    n_pos, n_all = counts.pos_le[-1], counts.all_le[-1]
    all_below = torch.cat([counts.all_le.new_zeros(1), counts.all_le[:-1]])
    fps = ((n_all - n_pos) - (all_below - pos_below)).flip(0)
    return fps, tps, counts.scores.flip(0)


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """Integer dot product (CUDA has no integer ``dot``)."""
    return (a * b).sum() if on_device(a) else torch.dot(a, b)


class RankSums(NamedTuple):
    """The additive core of AUROC and AP over a set of samples (or one range of scores of it).

    Attributes:
        n_pos: Positives.
        n_all: Samples.
        twice_area: ``2 * P * N * AUROC``: every positive scores 2 per negative below it and 1 per tie (exact int).
        ap_sum: ``P * AP``: the precision at the score of every positive, summed (float64).
    """

    n_pos: int
    n_all: int
    twice_area: int
    ap_sum: float


# RankSums, or the float64 sums of weights of ``_weighted.WeightedRankSums`` (its fields in the same order)
Sums = tuple[float, float, float, float]


def _twice_area_of_counts(counts: Counts, neg_before: int) -> int:
    """Twice the area of one chunk of distinct scores (``counts`` relative to the chunk, ``neg_before`` below it).

    Each positive beats the negatives below its score and ties with those at it: ``sum_g pos_g * (neg_below_g +
    neg_le_g)``, with dot products of views.
    """
    pos_le = counts.pos_le
    neg_le = counts.all_le - pos_le
    pos_g = torch.diff(pos_le, prepend=pos_le.new_zeros(1))
    return int(_dot(pos_g, neg_le)) + int(_dot(pos_g[1:], neg_le[:-1])) + 2 * neg_before * int(pos_le[-1])


def _twice_area_of_keys(keys: Tensor, pos_before: int, all_before: int) -> int:
    """Twice the area of one chunk of sorted keys (``*_before``: positives / samples below it), in a few passes.

    A key sorts after every negative of its own score (labels are bit 0), so a positive at global position ``i``
    has ``i - (positives before it)`` negatives at or below its score; summing that over positives counts every
    tie once too often, so the product ``pos_g * neg_g`` of each score that has both classes is taken off.
    """
    labels = keys.bitwise_and(1).to(torch.int64)
    c = int(labels.sum())
    positions = int(_dot(labels, torch.arange(keys.numel(), device=keys.device)))
    neg_le = positions + c * (all_before - pos_before) - c * (c - 1) // 2
    twice_area = 2 * neg_le
    mixed = torch.nonzero(keys[1:].bitwise_xor(keys[:-1]) == 1).flatten()  # last negative of a score with both
    if mixed.numel():
        first_neg = torch.searchsorted(keys, keys[mixed])
        after_pos = torch.searchsorted(keys, keys[mixed + 1], right=True)
        twice_area -= int(_dot(mixed + 1 - first_neg, after_pos - mixed - 1))
    return twice_area


def _run_sizes(k: Any, at: Any, step: int, look: int = 4) -> Any:
    """For each index of ``at`` in the sorted array ``k``, how many equal values its run holds from there on, towards
    higher (``step=1``) or lower (``step=-1``) indices, the value at ``at`` included.

    ``look - 1`` vectorised looks at the neighbours (equal values are contiguous, so the equal neighbours are the run;
    an index beyond ``k`` is clipped to its end, which can only make a run that reaches the end look full), then a
    binary search for the few runs the looks did not see end.
    """
    import numpy as np

    value = k[at]
    size = np.ones(at.shape[0], dtype=np.int64)
    where, got, hit = np.empty_like(at), np.empty_like(value), np.empty(at.shape[0], dtype=bool)
    for j in range(1, look):
        np.add(at, step * j, out=where)
        np.take(k, where, out=got, mode="clip")
        np.equal(got, value, out=hit)
        np.add(size, hit, out=size)
    full = np.flatnonzero(size == look)
    if full.shape[0]:
        v, a = value[full], at[full]
        if step > 0:
            size[full] = np.searchsorted(k, v, side="right") - a
        else:
            size[full] = a + 1 - np.searchsorted(k, v, side="left")
    return size


# Keys per block of the CPU area pass: its buffers and temporaries (about 15 bytes per key of a block) stay a few MiB,
# far below the keys themselves, and the ~15 NumPy calls per block stay negligible (bench_sync measured 0.85x the
# gathered payload more peak memory with blocks of ENCODE_CHUNK = 2**20 keys at 4e6 samples).
AREA_BLOCK = 1 << 17
RUN_BATCH = 1 << 15  # scores with both classes and a longer run, measured together
# int32 labels are summed in rows of ROW keys against positions ``j + 2**ROW_SHIFT``: each row's dot product is
# ``2**ROW_SHIFT * count + sum of positions`` with the sum below 2**ROW_SHIFT and the whole below 2**31, so one
# einsum gives every row's count and position sum, exactly.
ROW = 1 << 10
ROW_SHIFT = 20


def _position_sums(labels: Any, positions: Any, row_starts: Any, ramp: Any) -> tuple[int, int]:
    """``(positives, sum of their positions)`` of a block of 0 / 1 ``labels``: int32 rows of :data:`ROW` against
    ``positions`` (``j + 2**ROW_SHIFT``, ``row_starts`` the rows' first positions), the rest (and int64 labels) one
    plain dot product with ``ramp`` (``0, 1, ...`` in the labels' dtype, at least as long as the block).
    """
    import numpy as np

    m = labels.shape[0]
    rows = m // ROW if labels.dtype == np.int32 else 0
    count, total = 0, 0
    if rows:
        both = np.einsum("ij,j->i", labels[: rows * ROW].reshape(rows, ROW), positions).astype(np.int64)
        counts = both >> ROW_SHIFT
        count = int(counts.sum())
        total = int(np.bitwise_and(both, (1 << ROW_SHIFT) - 1).sum()) + int(np.dot(counts, row_starts[:rows]))
    rest = labels[rows * ROW :]
    if rest.shape[0]:
        tail = int(np.count_nonzero(rest))  # int64 labels: positions below 2**17, sums below 2**34
        count, total = count + tail, total + int(np.dot(rest, ramp[rows * ROW : m]))
    return count, total


def _area_part(k: Any, lo: int, hi: int) -> tuple[int, int, int]:
    """``(positives, sum of their positions relative to lo, tie products)`` of the sorted keys ``k[lo:hi]``, a part
    that splits no score (:func:`~._sort.split_points`), in blocks of :data:`AREA_BLOCK` with fixed buffers.

    A score with both classes ends its negatives at a pair ``(t, t + 1)`` of keys ``2 * code`` and ``2 * code + 1``
    (their xor is 1). Its tie product is 1 when neither key has an equal neighbour (the common tie: one negative, one
    positive), counted from masks of the block; the other pairs are collected and their runs measured once per part
    (:func:`_run_sizes`).
    """
    import numpy as np

    step = min(AREA_BLOCK, hi - lo)
    labels: Any = np.empty(step, dtype=np.int32 if k.dtype.itemsize <= 4 else np.int64)
    positions = np.arange(ROW, dtype=np.int32) + (1 << ROW_SHIFT)
    row_starts = np.arange(0, step, ROW, dtype=np.int64)
    ramp = np.arange(step, dtype=labels.dtype)
    # xor[j] = k[p] ^ k[p + 1] of the pair p = a - 1 + j around a block [a, a + m), j = 0 .. m + 1; pairs that leave
    # the part read 2 (different scores)
    xor = np.empty(step + 2, dtype=k.dtype)
    same = np.empty(step + 2, dtype=bool)  # the pair's keys share a score
    mixed = np.empty(step, dtype=bool)  # pair a + j: a score's last negative and first positive
    longer = np.empty(step, dtype=bool)  # ... and a key of the pair has an equal neighbour
    total_positions, c, ties = 0, 0, 0
    found, held = [], 0
    for a in range(lo, hi, step):
        m = min(step, hi - a)
        np.bitwise_and(k[a : a + m], 1, out=labels[:m])
        count, block_positions = _position_sums(labels[:m], positions, row_starts, ramp)
        total_positions += block_positions + (a - lo) * count
        c += count
        p0, p1 = max(a - 1, lo), min(a + m + 1, hi - 1)  # the pairs inside the part: [p0, p1)
        j0, j1 = p0 - a + 1, p1 - a + 1
        xor[:j0] = 2
        xor[j1 : m + 2] = 2
        np.bitwise_xor(k[p0 + 1 : p1 + 1], k[p0:p1], out=xor[j0:j1])
        np.equal(xor[1 : m + 1], 1, out=mixed[:m])
        n_mixed = int(np.count_nonzero(mixed[:m]))
        if not n_mixed:
            continue
        np.less_equal(xor[: m + 2], 1, out=same[: m + 2])
        np.logical_or(same[:m], same[2 : m + 2], out=longer[:m])
        np.logical_and(longer[:m], mixed[:m], out=longer[:m])
        at = np.flatnonzero(longer[:m])
        ties += n_mixed - at.shape[0]
        if at.shape[0]:
            found.append(at + a)
            held += at.shape[0]
        if held >= RUN_BATCH:  # measured a batch at a time: bounded temporaries
            ties += _tie_products(k, found)
            found, held = [], 0
    return c, total_positions, ties + _tie_products(k, found)


def _tie_products(k: Any, found: list[Any]) -> int:
    """``sum(negatives * positives)`` of the scores whose last negative is at one of the indices ``found`` (arrays)."""
    import numpy as np

    if not found:
        return 0
    runs = np.concatenate(found)
    return int(np.dot(_run_sizes(k, runs, -1), _run_sizes(k, runs + 1, 1)))


def _twice_area_of_keys_cpu(keys: Tensor, pos_before: int, all_before: int) -> int:
    """:func:`_twice_area_of_keys` of all the sorted keys of a problem at once, on CPU (NumPy): the same integer,
    in fewer and cheaper passes, over parts of the keys on worker threads (:func:`._sort.run_all`; integers: the same
    for any split).

    The positions of the positives are summed as dot products (:func:`_position_sums`, then Python ints: exact).
    Scores that have both classes are found in one pass (a negative key followed by its positive twin) and their tie
    products taken off, with the extent of each longer run measured from its ends (:func:`_run_sizes`).
    """
    k = keys.numpy()
    cuts = split_points(keys, parts_for(k.shape[0]))
    spans = [(lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True) if hi > lo]
    c, total_positions, ties = 0, 0, 0
    for (lo, _), (count, positions, part_ties) in zip(spans, run_all(lambda s: _area_part(k, *s), spans), strict=True):
        c += count
        total_positions += positions + lo * count
        ties += part_ties
    neg_le = total_positions + c * (all_before - pos_before) - c * (c - 1) // 2
    return 2 * neg_le - ties


def _ap_sum_of_counts(counts: Counts, pos_before: int, all_before: int, n_pos: int, n_all: int) -> float:
    """``P * AP`` of one chunk of distinct scores (``counts`` relative to the chunk) within totals ``n_*``.

    At the threshold of each distinct score: TP = positives at or above it, TP + FP = samples at or above it.
    """
    pos_le, all_le = counts.pos_le, counts.all_le
    pos_g = torch.diff(pos_le, prepend=pos_le.new_zeros(1))
    tps = (n_pos - pos_before) - (pos_le - pos_g)
    all_ge = (n_all - all_before) - torch.cat([all_le.new_zeros(1), all_le[:-1]])
    precision = tps.double().div_(all_ge.double())
    return sum_of_products(pos_g.double().cpu().numpy(), precision.cpu().numpy())


def sum_of_products(a: Any, b: Any) -> float:
    """``sum(a * b)`` of two float64 NumPy vectors in one fixed order: the products, then NumPy's pairwise sum (its
    order depends only on the length). ``torch.dot`` would hand the sum to the BLAS, whose order changes with the
    number of threads (MKL splits vectors of 65,536 and more), so the last bits of AP would depend on
    ``torch.set_num_threads``; this does not, on any device (the vectors are copied to the host).
    """
    import numpy as np

    return float(np.add.reduce(np.multiply(a, b)))


# Keys per vectorised step of the CPU AP pass: whole chunks of :func:`~._sort.chunks`, several at once (a few NumPy
# calls per step, not per chunk), their temporaries (about 50 bytes per key) a few MiB.
AP_BLOCK = 1 << 16


def _ap_terms(
    k: Any, spans: list[tuple[int, int]], pos_before: int, all_before: int, n_pos: int, n_all: int
) -> list[float]:
    """``P * AP`` of each chunk ``k[a:b]`` of sorted keys, for consecutive chunks ``spans`` (``*_before``: positives /
    samples below the first): the float64 vectors of :func:`_ap_sum_of_counts` (positives per distinct score, and
    the precision at it), each chunk's summed by :func:`sum_of_products` over its own scores, so the same bits.

    Chunks are taken a block of about :data:`AP_BLOCK` keys at a time, in buffers allocated once (fresh temporaries
    cost a page fault per 4 KiB on every block: a third of the pass). The counts are whole numbers below 2**53,
    exact in float64 wherever they are taken from, so only the division rounds, as in :func:`_ap_sum_of_counts`.
    """
    import numpy as np

    blocks, i = [], 0
    while i < len(spans):
        j = i + 1
        while j < len(spans) and spans[j][1] - spans[i][0] <= AP_BLOCK:
            j += 1
        blocks.append((i, j))
        i = j
    size = max(spans[j - 1][1] - spans[i][0] for i, j in blocks)
    xor = np.empty(size, dtype=k.dtype)
    last = np.empty(size, dtype=bool)  # a score's last key: the code changes after it, or the block ends
    cumulative = np.empty(size, dtype=np.int32)  # positives at or below each key of the block
    pos_le_int = np.empty(size, dtype=np.int32)
    pos_le, pos_g, tps = (np.empty(size, dtype=np.float64) for _ in range(3))
    terms: list[float] = []
    for i, j in blocks:
        lo, hi = spans[i][0], spans[j - 1][1]
        m = hi - lo
        block = k[lo:hi]
        np.bitwise_xor(block[1:], block[:-1], out=xor[: m - 1])
        np.greater(xor[: m - 1], 1, out=last[: m - 1])
        last[m - 1] = True
        ends = np.flatnonzero(last[:m])
        g = ends.shape[0]
        np.bitwise_and(block, 1, out=cumulative[:m], casting="unsafe")
        torch.from_numpy(cumulative[:m]).cumsum_(0)
        np.take(cumulative, ends, out=pos_le_int[:g], mode="clip")
        np.copyto(pos_le[:g], pos_le_int[:g], casting="unsafe")
        pos_g[0] = pos_le[0]
        np.subtract(pos_le[1:g], pos_le[: g - 1], out=pos_g[1:g])
        tps[0] = n_pos - pos_before  # positives at or above each score: all but those below it
        np.subtract(float(n_pos - pos_before), pos_le[: g - 1], out=tps[1:g])
        all_ge = pos_le  # samples at or above each score (pos_le is no longer needed)
        all_ge[0] = n_all - all_before - lo
        np.subtract(n_all - all_before - lo - 1, ends[: g - 1], out=ends[: g - 1])
        np.copyto(all_ge[1:g], ends[: g - 1], casting="unsafe")
        products = np.multiply(pos_g[:g], np.true_divide(tps[:g], all_ge[:g], out=tps[:g]), out=pos_g[:g])
        pos_before += int(pos_le_int[g - 1])
        # each chunk's distinct scores: those whose last key is before the chunk's end
        start, seen = 0, lo
        for _, b in spans[i:j]:
            cut = start + int(np.count_nonzero(last[seen - lo : b - lo]))
            terms.append(float(np.add.reduce(products[start:cut])))
            start, seen = cut, b
    return terms


def _ap_sum_of_keys_cpu(col: SortedKeys, pos_before: int, all_before: int, n_pos: int, n_all: int) -> float:
    """``P * AP`` of sorted keys on CPU: the chunks of :func:`~._sort.chunks` (the same partition, so the same
    float64 terms, added in the same order). On worker threads, one run of consecutive chunks per thread: first the
    positives of every run are counted, then each chunk's term is computed (:func:`_ap_terms`); the terms are added
    here, in order.
    """
    import numpy as np

    k = col.keys.numpy()
    bounds = chunk_bounds(col.keys)
    spans = list(zip(bounds[:-1], bounds[1:], strict=True))
    threads = parts_for(k.shape[0])
    runs = [spans[i * len(spans) // threads : (i + 1) * len(spans) // threads] for i in range(threads)]
    runs = [run for run in runs if run]

    def count_run(run: list[tuple[int, int]]) -> int:
        labels = np.empty(min(AP_BLOCK, run[-1][1] - run[0][0]), dtype=k.dtype)
        count = 0
        for a in range(run[0][0], run[-1][1], labels.shape[0]):
            b = min(a + labels.shape[0], run[-1][1])
            count += int(np.count_nonzero(np.bitwise_and(k[a:b], 1, out=labels[: b - a])))
        return count

    counts = run_all(count_run, runs[:-1])  # the last run's positives are not needed
    before = list(itertools.accumulate(counts, initial=pos_before))

    def sum_run(r: int) -> list[float]:
        return _ap_terms(k, runs[r], before[r], all_before, n_pos, n_all)

    ap_sum = 0.0
    for term in itertools.chain.from_iterable(run_all(sum_run, range(len(runs)))):
        ap_sum += term
    return ap_sum


# Bits of the low half of the AUROC's per-score factor (see :func:`counts_rank_sums`).
_LOW_BITS = 20
# Samples from which the twice-area would no longer be exact in two int64 sums of :func:`counts_rank_sums`.
EXACT_AREA_LIMIT = 1 << 40


def counts_rank_sums(
    counts: Counts,
    *,
    area: bool = True,
    ap: bool = True,
    pos_before: int = 0,
    all_before: int = 0,
    totals: tuple[int, int] | None = None,
) -> RankSums:
    """:func:`rank_sums` of integer :class:`Counts` in one vectorised pass (the device path, and the 16-bit mode's
    histogram counts on every device): whole-array cumulative sums and products, a fixed number of kernels and one
    host read whatever the number of samples.

    Twice the area is ``sum_g pos_g * (2 * neg_below_g + neg_g + 2 * neg_before)`` over the distinct scores ``g``,
    the same integer as the chunked CPU pass. Each factor is below ``2 * N`` and the whole sum at most ``2 * P * N``,
    so one int64 sum would be exact up to ``N < 2**31`` only; the factor is therefore split into its high and low
    :data:`_LOW_BITS` bits, each summed in int64 (below ``2 * P * N / 2**20`` and ``P * 2**20``: no overflow) and
    combined as Python ints: exact for ``N`` up to :data:`EXACT_AREA_LIMIT` (``2**40``, about 1.1e12 samples, far
    beyond one device's memory); beyond it a :class:`ValueError` says so rather than a wrapped sum.

    ``P * AP`` is the float64 sum of ``pos_g * tps_g / all_ge_g`` (the terms of :func:`_ap_sum_of_counts`, one
    division each) by ``torch.sum``: deterministic for a given device and size, but its order of addition is not
    the CPU pass's (chunk by chunk), so the two paths agree to the float32 output, not always in the last float64
    bit, and the sum of per-range sums (sharded compute) is not always the one-process sum bit for bit.
    """
    pos_le, all_le = counts.pos_le, counts.all_le
    if pos_le.numel() == 0:
        return RankSums(0, 0, 0, 0.0)
    zero = pos_le.new_zeros(1)
    pos_g = torch.diff(pos_le, prepend=zero)
    all_g = torch.diff(all_le, prepend=zero)
    pos_local, all_local = pos_le[-1], all_le[-1]
    reads = [pos_local, all_local]
    if area:
        neg_le = all_le - pos_le
        factor = 2 * neg_le - (all_g - pos_g) + 2 * (all_before - pos_before)
        high = (pos_g * factor.bitwise_right_shift(_LOW_BITS)).sum()
        low = (pos_g * factor.bitwise_and((1 << _LOW_BITS) - 1)).sum()
        reads += [high, low]
    if ap:
        n_pos = pos_local if totals is None else totals[0]
        n_all = all_local if totals is None else totals[1]
        tps = (n_pos - pos_before) - (pos_le - pos_g)  # positives at or above each score
        all_ge = (n_all - all_before) - (all_le - all_g)  # samples at or above each score
        ap_t = (pos_g.double() * tps.double().div_(all_ge.double())).sum()
        reads.append(ap_t.view(torch.int64))  # its bits, read with the integers
    values = torch.stack(reads).tolist()
    n_pos_local, n_all_local = values[0], values[1]
    if max(n_all_local + all_before, totals[1] if totals else 0) >= EXACT_AREA_LIMIT:
        msg = f"The exact AUROC sums are exact up to {EXACT_AREA_LIMIT} samples, but got {n_all_local + all_before}."
        raise ValueError(msg)
    twice_area = (values[2] << _LOW_BITS) + values[3] if area else 0
    ap_sum = struct.unpack("<d", struct.pack("<q", values[-1]))[0] if ap else 0.0
    return RankSums(n_pos_local, n_all_local, twice_area, ap_sum)


def rank_sums(
    col: SortedProblem,
    *,
    area: bool = True,
    ap: bool = True,
    pos_before: int = 0,
    all_before: int = 0,
    totals: tuple[int, int] | None = None,
) -> RankSums:
    """:class:`RankSums` of a sorted problem, streamed chunk by chunk (only what ``area`` / ``ap`` ask for).

    ``*_before`` and ``totals`` (the global ``(positives, samples)``) place the problem within a larger data set
    when it holds one range of its scores (sharded compute).
    """
    if isinstance(col, HistCounts):  # the 16-bit mode: whole-histogram operations, no chunk loop
        return counts_rank_sums(col, area=area, ap=ap, pos_before=pos_before, all_before=all_before, totals=totals)
    n_pos_local, n_all_local = size(col)
    n_pos, n_all = totals if totals is not None else (n_pos_local, n_all_local)
    twice_area, ap_sum = 0, 0.0
    if isinstance(col, SortedKeys) and on_device(col.keys):
        col = materialize(col, with_scores=False)  # whole-array counts: one host read
    if isinstance(col, Counts) and on_device(col.pos_le):
        return counts_rank_sums(col, area=area, ap=ap, pos_before=pos_before, all_before=all_before, totals=totals)
    if isinstance(col, SortedKeys) and col.keys.numel():
        if area:
            twice_area = _twice_area_of_keys_cpu(col.keys, pos_before, all_before)
        if ap:
            ap_sum = _ap_sum_of_keys_cpu(col, pos_before, all_before, n_pos, n_all)
        return RankSums(n_pos_local, n_all_local, twice_area, ap_sum)
    for p, a, chunk in chunks(col):
        p, a = p + pos_before, a + all_before
        if area:
            if isinstance(chunk, Counts):
                twice_area += _twice_area_of_counts(chunk, a - p)
            else:
                twice_area += _twice_area_of_keys(chunk, p, a)
        if ap:
            counts = chunk if isinstance(chunk, Counts) else local_counts(chunk)
            ap_sum += _ap_sum_of_counts(counts, p, a, n_pos, n_all)
    return RankSums(n_pos_local, n_all_local, twice_area, ap_sum)


def combine(parts: list[RankSums]) -> RankSums:
    """The sums of consecutive ranges, added in their order (the same bits on every rank)."""
    ap_sum = 0.0
    for part in parts:
        ap_sum += part.ap_sum
    return RankSums(sum(p.n_pos for p in parts), sum(p.n_all for p in parts), sum(p.twice_area for p in parts), ap_sum)


def auroc_from_sums(sums: Sums, device: torch.device, warn: bool = True) -> Tensor:
    """AUROC (float64) of :class:`RankSums` or weighted sums: ``twice_area / (2 * P * N)``, an integer divided once
    (exact up to one rounding, whatever the order of the samples) or float64 sums of weights. One class only (or
    zero weight on one side) gives 0 with torchmetrics' warnings.
    """
    pos, total, twice_area, _ = sums
    neg = total - pos
    if warn and neg <= 0:
        warnings.warn(_NO_NEGATIVES_ROC, UserWarning, stacklevel=3)
    if warn and pos <= 0:
        warnings.warn(_NO_POSITIVES_ROC, UserWarning, stacklevel=3)
    if neg <= 0 or pos <= 0:
        return torch.zeros((), dtype=torch.float64, device=device)
    return torch.tensor(float(twice_area) / (2.0 * pos * neg), dtype=torch.float64, device=device)


def average_precision_from_sums(sums: Sums, device: torch.device, warn: bool = True) -> Tensor:
    """Average precision (float64) of :class:`RankSums` or weighted sums: ``ap_sum / P``; no positives (no positive
    weight) gives 0 with torchmetrics' warning.
    """
    pos, _, _, ap_sum = sums
    if pos <= 0:
        if warn:
            warnings.warn(_NO_POSITIVES_PR, UserWarning, stacklevel=3)
        return torch.zeros((), dtype=torch.float64, device=device)
    return torch.tensor(ap_sum / pos, dtype=torch.float64, device=device)


def partial_auroc(problem: Problem, max_fpr: float) -> Tensor:
    """McClish-standardised partial AUC up to ``max_fpr`` of one problem (exact, or torchmetrics' binned rule); one
    class only gives 0 with torchmetrics' warnings (exact mode).
    """
    if isinstance(problem, Binned):
        return binned_auroc(problem.confmat, problem.thresholds, max_fpr)
    n_pos, n_all = size(problem)
    if n_pos and n_all - n_pos:
        fps, tps, _ = descending(materialize(problem, with_scores=True))
        return mcclish_partial_auc(*roc_from_counts(fps, tps, warn=False), max_fpr)
    return auroc_from_sums(RankSums(n_pos, n_all, 0, 0.0), problem_device(problem))


def roc_from_counts(fps: Tensor, tps: Tensor, warn: bool = True) -> tuple[Tensor, Tensor]:
    """Float64 ``(fpr, tpr)`` of descending counts (integers, or float64 sums of weights), the origin prepended; a
    class that is absent (nothing, or zero weight) gives a zero rate and a warning.
    """
    zero = fps.new_zeros(1)
    fps = torch.cat([zero, fps])
    tps = torch.cat([zero, tps])
    return _rate(fps, warn, _NO_NEGATIVES_ROC), _rate(tps, warn, _NO_POSITIVES_ROC)


def _rate(cumulative: Tensor, warn: bool, absent: str) -> Tensor:
    """``cumulative / cumulative[-1]`` in float64; zeros (and the ``absent`` warning) when the total is 0."""
    total = cumulative[-1].item()  # an int for counts, a float for sums of weights
    if total > 0:
        return cumulative.double() / total
    if warn:
        warnings.warn(absent, UserWarning, stacklevel=4)
    return torch.zeros_like(cumulative, dtype=torch.float64)


def mcclish_partial_auc(fpr: Tensor, tpr: Tensor, max_fpr: float) -> Tensor:
    """McClish-standardised partial AUC up to ``max_fpr`` (scikit-learn's ``max_fpr``) of a float64 ROC curve,
    ``fpr`` increasing: the curve cut at ``max_fpr`` (its ``tpr`` there interpolated linearly), its trapezoidal area
    mapped to 0.5 (the diagonal) .. 1 (perfect). Exact, weighted and binned curves alike.
    """
    stop = int(torch.searchsorted(fpr, fpr.new_tensor(max_fpr), right=True))
    x0, x1, y0, y1 = fpr[stop - 1], fpr[stop], tpr[stop - 1], tpr[stop]
    interp = y0 + (y1 - y0) * (max_fpr - x0) / (x1 - x0)
    partial = torch.trapezoid(
        torch.cat([tpr[:stop], interp.reshape(1)]), torch.cat([fpr[:stop], fpr.new_tensor([max_fpr])])
    )
    min_area = 0.5 * max_fpr**2
    return 0.5 * (1 + (partial - min_area) / (max_fpr - min_area))


def safe_ratio(num: Tensor, den: Tensor, fill: float) -> Tensor:
    num, den = num.double(), den.double()
    return torch.where(den == 0, torch.full_like(num, fill), num / torch.where(den == 0, torch.ones_like(den), den))


def binned_rate(hits: Tensor, misses: Tensor, thresholds: Tensor, fill: float) -> Tensor:
    """``hits / (hits + misses)`` at every threshold of a multi-threshold confusion matrix (float64; ``fill`` where
    the class has nothing), torchmetrics' binned rates: ``tp / (tp + fn)`` or ``fp / (fp + tn)``.

    One denominator per class, the sum at the lowest threshold (where ``hits`` is largest): integer counts have the
    same sum at every threshold (torchmetrics' rates, bit for bit), sums of weights differ in their last bits from one
    threshold to the next; one denominator keeps the rate in [0, 1], never decreasing as the threshold falls, exactly
    0 where nothing is hit and exactly 1 where nothing is missed.
    """
    low = int(torch.argmin(thresholds))
    return safe_ratio(hits, (hits[low] + misses[low]).expand_as(hits), fill)


def binned_auroc(confmat: Tensor, thresholds: Tensor, max_fpr: float | None = None) -> Tensor:
    """AUROC from a multi-threshold confusion matrix, the way torchmetrics' binned mode computes it."""
    tps, fps, fns, tns = confmat[:, 1, 1], confmat[:, 0, 1], confmat[:, 1, 0], confmat[:, 0, 0]
    tpr = binned_rate(tps, fns, thresholds, 0.0).flip(0)
    fpr = binned_rate(fps, tns, thresholds, 0.0).flip(0)
    if max_fpr is None or max_fpr == 1 or fpr.sum() == 0 or tpr.sum() == 0:
        return torch.trapezoid(tpr, fpr)
    return mcclish_partial_auc(fpr, tpr, max_fpr)


def binned_average_precision(confmat: Tensor) -> Tensor:
    """Average precision from a multi-threshold confusion matrix, the way torchmetrics' binned mode computes it."""
    tps, fps, fns = confmat[:, 1, 1], confmat[:, 0, 1], confmat[:, 1, 0]
    precision = torch.cat([safe_ratio(tps, tps + fps, 0.0), tps.new_ones(1).double()])
    recall = torch.cat([safe_ratio(tps, tps + fns, 0.0), tps.new_zeros(1).double()])
    return -torch.sum((recall[1:] - recall[:-1]) * precision[:-1])


class SumsNeeded(NamedTuple):
    """The parts of :class:`RankSums` a statistic is computed from (the others are not computed)."""

    area: bool
    ap: bool


class RankStatistic(NamedTuple):
    """A scalar statistic of binary problems (AUROC, average precision) in every mode.

    Attributes:
        name: For messages (``"AUROC"``).
        needs: The rank sums it is computed from (exact and 16-bit modes, sharded compute).
        from_sums: Its float64 value from the (exact or weighted) sums; ``warn`` gives torchmetrics' one-class
            warnings.
        from_binned: Its float64 value from one binned problem ``(confmat (T, 2, 2), thresholds)``.
        defined: Whether it is defined for ``(positives, negatives)`` (counts or weights); undefined classes leave
            the averages.
    """

    name: str
    needs: SumsNeeded
    from_sums: Callable[[Sums, torch.device, bool], Tensor]
    from_binned: Callable[[Tensor, Tensor], Tensor]
    defined: Callable[[float, float], bool]


def average_over_classes(values: Tensor, support: Tensor, average: Average, what: str) -> Tensor:
    """Average per-class values; classes whose value is undefined (NaN) are left out, with a warning."""
    if average in (None, "none"):
        return values
    defined = ~torch.isnan(values)
    if not bool(defined.all()):
        missing = torch.nonzero(~defined).flatten().tolist()
        warnings.warn(
            f"{what} is undefined for column(s) {missing} (no positive or no negative samples); they are left out of"
            f" the {average} average.",
            UserWarning,
            stacklevel=4,
        )
    if not bool(defined.any()):
        return torch.tensor(float("nan"), dtype=torch.float64, device=values.device)
    if average == "weighted":
        weights = support[defined].double()
        return (values[defined] * weights).sum() / weights.sum()
    return values[defined].mean()


def _reduce(
    values: list[Callable[[bool], Tensor]],
    sizes: list[tuple[float, float]],
    split: Split,
    statistic: RankStatistic,
    device: torch.device,
) -> Tensor:
    """One problem: its value (with its warnings); one per class: NaN where undefined, reduced by ``average``."""
    if not split.per_class:
        return as_output(values[0](True))
    pairs = zip(values, sizes, strict=True)
    per_class = [float(v(False)) if statistic.defined(p, a - p) else float("nan") for v, (p, a) in pairs]
    support = torch.tensor([p for p, _ in sizes], dtype=torch.float64, device=device)
    per = torch.tensor(per_class, dtype=torch.float64, device=device)
    return as_output(average_over_classes(per, support, split.average, statistic.name))


def reduce_sums(sums: Sequence[Sums], split: Split, statistic: RankStatistic, device: torch.device) -> Tensor:
    """The statistic of every problem from its :class:`RankSums` (or weighted sums), reduced by ``split.average``
    (float32).
    """
    values: list[Callable[[bool], Tensor]] = [partial(statistic.from_sums, s, device) for s in sums]
    return _reduce(values, [(s[0], s[1]) for s in sums], split, statistic, device)


def _binned_value(statistic: RankStatistic, problem: Binned, _warn: bool) -> Tensor:
    return statistic.from_binned(problem.confmat, problem.thresholds)


def reduce_problems(problems: Sequence[Problem], split: Split, statistic: RankStatistic) -> Tensor:
    """The statistic of every counted problem (exact, 16-bit or binned, whose confusion matrices may hold sums of
    weights), reduced by ``split.average`` (float32), on the problems' device.
    """
    device = problem_device(problems[0])
    binned = [p for p in problems if isinstance(p, Binned)]
    if not binned:
        exact = [p for p in problems if not isinstance(p, Binned)]
        sums = [rank_sums(p, area=statistic.needs.area, ap=statistic.needs.ap) for p in exact]
        return reduce_sums(sums, split, statistic, device)
    values: list[Callable[[bool], Tensor]] = [partial(_binned_value, statistic, b) for b in binned]
    sizes = [(b.confmat[0, 1].sum().item(), b.confmat[0].sum().item()) for b in binned]
    return _reduce(values, sizes, split, statistic, device)
