"""One sort of the scores into integer counts per distinct score: the only O(N log N) step of the exact metrics.

For 16- and 32-bit floats the label is packed into the lowest bit of an order-preserving integer key built from
the float's bits (``2 * code + label``), so sorting the keys alone orders scores and carries labels along: no
permutation, no gather of the labels, and the thresholds are decoded back from the keys. Scores in ``[0, 2)``
(probabilities, the common case) have their sign bit and top exponent bit clear, so their keys fit in the float's
own width ("compact" keys: int32 for float32, int16 for 16-bit floats); other scores take twice the width. On CPU the
keys are built and sorted in place by NumPy (a vectorised quicksort: no index tensor, no scratch copy), in parts on
worker threads when torch has several (:func:`run_all`); on other devices by ``torch.sort``. float64 scores
(63 + 1 bits do not fit) take a float sort and a gather.

Scalar statistics (AUROC, AP) then stream over the sorted keys in chunks that never split a run of equal scores
(:func:`chunks`), so nothing else of size N is allocated; curves sweep the sorted keys block by block on CPU
(:mod:`._sweep`) and materialise :class:`Counts` elsewhere.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

import torch
from torch import Tensor

from torchmetrics_varlen.functional._device import on_device
from torchmetrics_varlen.functional._validation import within

_KEYS = {
    torch.float32: (torch.int32, torch.int64, 1 << 31),
    torch.float16: (torch.int16, torch.int32, 1 << 15),
    torch.bfloat16: (torch.int16, torch.int32, 1 << 15),
}

_NUMPY_INT = {torch.int16: "int16", torch.int32: "int32", torch.int64: "int64"}
# Wide keys below this are NaNs with the sign bit set (2**mantissa bits: -inf's key), keys above 2**bits minus this
# NaNs without it. Every NaN takes the highest key, 2**bits - 1: above +inf, where torch.sort (and so torchmetrics)
# ranks NaN, and one score whatever its sign and payload (torch's sigmoid of NaN sets the sign bit, and its payload
# changes with how the batch is vectorised). Only reachable with validate_args=False.
_NAN_BELOW = {torch.float32: 1 << 23, torch.float16: 1 << 10, torch.bfloat16: 1 << 7}

# Samples per chunk when streaming (a chunk grows to the end of the run of equal scores it stops in). The chunking
# is a function of the sorted multiset only, so streamed sums are reproducible bit for bit.
CHUNK = 1 << 16
# Samples per step of the compact encoding (no temporary: the keys are written in place), and of the AUROC pass over
# sorted keys on CPU (two buffers of this many samples): big enough to amortise each step's fixed cost.
ENCODE_CHUNK = 1 << 20

# Worker threads for the CPU passes over sorted keys (NumPy releases the GIL in its sorts and array loops): split at
# key boundaries (:func:`split_points`), each part is sorted and summed on its own thread, as many parts as torch's
# intra-op thread count allows (``torch.set_num_threads``). The results are integers or come back to the calling
# thread in a fixed order, so they are the same bits for any number of threads.

T = TypeVar("T")
R = TypeVar("R")

# Keys per part below which splitting costs more than it saves (thread hand-off, the partition pass).
PART_MIN = 1 << 19
# At most this many parts (the sort is memory bound; more threads than this gain little).
MAX_PARTS = 8

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _forget_after_fork() -> None:
    """In a forked child: the parent's pool threads do not exist there (a copied pool would count its idle threads and
    wait on them forever), and the lock may have been held by a parent thread at the fork.
    """
    global _lock, _pool
    _lock, _pool = threading.Lock(), None


if hasattr(os, "register_at_fork"):  # no fork on Windows
    os.register_at_fork(after_in_child=_forget_after_fork)


def parts_for(n: int) -> int:
    """How many parts to split ``n`` keys into: a power of two, at most torch's thread count and
    :data:`MAX_PARTS`, each part at least :data:`PART_MIN` keys (1: no threads).
    """
    limit = min(torch.get_num_threads(), MAX_PARTS)
    parts = 1
    while parts * 2 <= limit and n // (parts * 2) >= PART_MIN:
        parts *= 2
    return parts


def _executor() -> ThreadPoolExecutor:
    """The package's pool (threads start on demand, at most :data:`MAX_PARTS`; how many run at once is how many
    items a call submits). A forked child makes its own (:func:`_forget_after_fork`).
    """
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(MAX_PARTS, thread_name_prefix="torchmetrics_varlen")
        return _pool


def run_all(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(item) for item in items]``, the items on worker threads when there are several (``fn`` must not call
    :func:`run_all` itself); the first exception is raised here.
    """
    todo = list(items)
    if len(todo) <= 1:
        return [fn(item) for item in todo]
    return list(_executor().map(fn, todo))


class Counts(NamedTuple):
    """Cumulative counts at the distinct scores, in increasing order of score.

    Attributes:
        pos_le: Positives with a score ``<=`` each distinct score (int64).
        all_le: Samples with a score ``<=`` each distinct score (int64).
        scores: The distinct scores, increasing (``None`` unless asked for).
        neg_le: Sums of sample weights only (float64 ``pos_le`` / ``all_le``): the negatives' weight at or below each
            distinct score, a running sum of its own (:func:`running_sum`). ``all_le - pos_le`` is exact for integer
            counts (``None`` here) but not for float sums: a difference of running totals can go below 0 and
            decrease, which a rate must not.
    """

    pos_le: Tensor
    all_le: Tensor
    scores: Tensor | None
    neg_le: Tensor | None = None


def running_sum(values: Tensor, dim: int = 0) -> Tensor:
    """The running sum of float64 ``values`` along ``dim``, its terms added one after the other in order, on any device.

    Sums of non-negative weights added in order never decrease, and a zero term leaves the sum exactly as it was:
    what the weighted rates need (0 until the first weight of a class, never decreasing, ending at the total).
    ``torch.cumsum`` adds in order on CPU; CUDA's scan adds in a tree whose shape changes with the index (and its
    look-back with the timing), so there the sum could drop by an ulp from one index to the next, and vary from run
    to run. Other devices therefore sum on the host and get the result back (two copies of the vector).
    """
    if not on_device(values):
        return torch.cumsum(values, dim)
    return torch.cumsum(values.cpu(), dim).to(values.device)


class SortedKeys(NamedTuple):
    """Ascending keys ``2 * code + label`` of one binary problem (see the module docstring).

    Attributes:
        keys: The sorted keys (compact: the scores' width; otherwise twice the width).
        dtype: The dtype of the scores, to decode thresholds.
        n_pos: How many keys are positives.
        compact: Whether the keys are compact (every score in ``[0, 2)``).
    """

    keys: Tensor
    dtype: torch.dtype
    n_pos: int
    compact: bool


SortedProblem = Counts | SortedKeys  # one binary problem in score order: sorted keys, or counts per distinct score
Column = SortedProblem  # the former name, still imported by ``_dist/shard.py``


def packable(dtype: torch.dtype) -> bool:
    """Whether scores of ``dtype`` fit in a packed key with their label."""
    return dtype in _KEYS


def _pieces(x: Tensor | Sequence[Tensor]) -> list[Tensor]:
    return [x] if isinstance(x, Tensor) else list(x)


def _flat_cat(group: Sequence[Tensor]) -> Tensor:
    """The pieces of ``group`` flattened and concatenated (a piece alone is only flattened: no copy)."""
    if len(group) == 1:
        return group[0].reshape(-1)
    if all(p.dim() == 1 for p in group):
        return torch.cat(list(group))
    return torch.cat([p.reshape(-1) for p in group])


def _groups(pieces: Sequence[Tensor]) -> list[tuple[int, int]]:
    """``[start, stop)`` index ranges of ``pieces`` to process together: a piece of :data:`CHUNK` samples or more
    alone (never copied), runs of smaller consecutive pieces gathered into groups of about :data:`CHUNK` samples.

    Many small pieces (a validation loop's stored batches) then cost a few tensor operations per ``CHUNK`` samples,
    not per piece, and the only copy is one group at a time: nothing of size N.
    """
    n = len(pieces)
    if n <= 1:
        return [(0, n)]
    sizes = [p.numel() for p in pieces]
    cuts = {0, n}
    filled = 0
    for i, m in enumerate(sizes):  # one cheap Python step per piece; the tensor work is per group
        if m >= CHUNK:
            cuts.update((i, i + 1))
            filled = 0
            continue
        filled += m
        if filled >= CHUNK:
            cuts.add(i + 1)
            filled = 0
    bounds = sorted(cuts)
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def blocks(
    preds: Tensor | Sequence[Tensor], target: Tensor | Sequence[Tensor] | None = None
) -> Iterator[tuple[Tensor, Tensor | None]]:
    """1-D ``(scores, labels)`` blocks of pieces, in order: big pieces as they are (flattened), runs of small ones
    concatenated a group at a time (:func:`_groups`). ``labels`` is ``None`` without ``target``.
    """
    scores = _pieces(preds)
    labels = None if target is None else _pieces(target)
    if labels is not None and len(labels) != len(scores):
        msg = f"Expected as many label pieces as score pieces, but got {len(labels)} and {len(scores)}."
        raise ValueError(msg)
    for a, b in _groups(scores):
        yield _flat_cat(scores[a:b]), None if labels is None else _flat_cat(labels[a:b])


def fits_compact(preds: Tensor | Sequence[Tensor]) -> bool:
    """Whether every score is in ``[0, 2)`` (``-0.0`` included): compact keys then hold score and label.

    On the device path 16/32-bit scores are tested on their bits, every piece at once: one host read.
    """
    pieces = _pieces(preds)
    if pieces and on_device(pieces[0]) and all(packable(p.dtype) for p in pieces):
        tests = [_fits_compact_bits(p.view(_KEYS[p.dtype][0]), _KEYS[p.dtype][2]) for p in pieces if p.numel()]
        return not tests or bool(torch.stack(tests).all())
    if isinstance(preds, Tensor):
        return within(preds, 0, 2, closed=False)
    return all(within(block, 0, 2, closed=False) for block, _ in blocks(preds))


def _encode_cpu(out: Tensor, bits: Tensor, label: Tensor, compact: bool, nan_below: int | None = None) -> int:
    """Keys of one block into ``out`` with NumPy (bool or 0 / 1 ``uint8`` labels or-ed in as they are, any other
    dtype's non-zero values made positives chunk by chunk: no converted copy of the labels), in parts on worker
    threads when the block is big (:func:`run_all`): no torch operation per chunk, so no OpenMP team to wake (and
    wait for, on a loaded host) a few hundred times. Returns how many labels are positive (counted in the same parts).

    Compact keys are ``bits << 1 | label``: the shift drops the sign bit (so -0.0 lands on +0.0's key) and makes room
    for the label; the rest of a non-negative float's bits increase with it. Wide keys first map the sign-magnitude
    bits to an increasing integer: ``|b|`` for negative floats (and -0.0, which lands on the key of +0.0),
    ``|b| + 2**(bits - 1)`` for positive ones; then, when the block has a NaN (``nan_below`` given), every NaN takes
    the highest key (:data:`_NAN_BELOW`).
    """
    import numpy as np

    keys, codes, labels = out.numpy(), bits.detach().numpy(), label.detach().numpy()
    half = 1 << (8 * codes.itemsize - 1)  # 2**(bits - 1) of the scores' width
    flags = label.dtype not in (torch.bool, torch.uint8)  # other labels: any non-zero value is a positive

    def run(span: tuple[int, int]) -> int:
        step = ENCODE_CHUNK if compact else CHUNK
        if not compact:
            wide = np.empty(min(step, span[1] - span[0]), dtype=keys.dtype)
            nonneg = np.empty(wide.shape[0], dtype=bool)
        if flags:
            positive = np.empty(min(step, span[1] - span[0]), dtype=bool)
        count = 0
        for a in range(span[0], span[1], step):
            b = min(a + step, span[1])
            if compact:
                if not shifted:
                    np.left_shift(codes[a:b], 1, out=keys[a:b])
            else:
                w, m = wide[: b - a], nonneg[: b - a]
                np.copyto(w, codes[a:b])
                np.greater_equal(w, 0, out=m)
                np.abs(w, out=w)
                np.add(w, half, out=w, where=m)
                if nan_below is not None:
                    np.copyto(w, 2 * half - 1, where=(w < nan_below) | (w > 2 * half - nan_below))
                np.left_shift(w, 1, out=keys[a:b])
            label_bits = np.not_equal(labels[a:b], 0, out=positive[: b - a]) if flags else labels[a:b]
            np.bitwise_or(keys[a:b], label_bits, out=keys[a:b], casting="unsafe")
            count += int(np.count_nonzero(label_bits))
        return count

    n = keys.shape[0]
    parts = parts_for(n)
    shifted = parts > 1 and compact
    if parts > 1:
        # The first write to fresh memory faults its pages in; from two threads at once, into huge pages
        # (:func:`_empty_keys`), that stalled for 50 ms at 10**7 keys. So this thread writes every key first: the
        # compact keys' shift, or zeros.
        if compact:
            np.left_shift(codes, 1, out=keys)
        else:
            keys.fill(0)
    return sum(run_all(run, [(i * n // parts, (i + 1) * n // parts) for i in range(parts)]))


def _empty_keys(n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """An uninitialised key buffer. On CPU NumPy allocates it: NumPy asks the kernel for huge pages for big arrays
    (``madvise``), so the first write of 10**7 keys faults in a few dozen pages, not ten thousand (3-7 ms, not 10-13).
    """
    if device.type != "cpu":
        return torch.empty(n, dtype=dtype, device=device)
    import numpy as np

    return torch.from_numpy(np.empty(n, dtype=_NUMPY_INT[dtype]))


def _fits_compact_bits(bits: Tensor, half: int) -> Tensor:
    """Whether every float of the integer view ``bits`` lies in ``[0, 2)`` (``-0.0``: ``-half``), as a 0-dim bool
    tensor on ``bits``' device (no host read): non-negative floats below 2.0 are the bit patterns ``[0, half / 2)``.
    """
    inside = (bits >= 0) & (bits < half >> 1)
    return (inside | (bits == -half)).all()


def _encode_device(
    pieces: Sequence[Tensor], labels: Sequence[Tensor], compact: bool | None
) -> tuple[Tensor, int, bool]:
    """:func:`_encode` on the device path: every piece at once, a fixed number of whole-array torch operations and one
    host read (whether the keys are compact, when not given, and how many labels are positive), whatever the size.

    The pieces' bits are concatenated once (a piece alone is only viewed), the labels made bool once; compact keys
    are ``bits << 1 | label`` in the scores' width, wide keys map the sign-magnitude bits to an increasing integer of
    twice the width first (every NaN on the highest key), as :func:`_encode_cpu` does: the same keys.
    """
    dtype = pieces[0].dtype
    as_int, wide, half = _KEYS[dtype]
    if len(labels) != len(pieces):
        msg = f"Expected as many label pieces as score pieces, but got {len(labels)} and {len(pieces)}."
        raise ValueError(msg)
    bits = _flat_cat([p.view(as_int) for p in pieces])
    device = bits.device
    flat = [lab.reshape(-1).to(device) for lab in labels]
    positive = _flat_cat([lab if lab.dtype == torch.bool else lab != 0 for lab in flat])
    n_pos_t = positive.sum()
    if compact is None:
        if bits.numel() == 0:
            compact = True
            n_pos = int(n_pos_t)
        else:
            fits, n_pos = torch.stack([_fits_compact_bits(bits, half).to(torch.int64), n_pos_t]).tolist()
            compact = bool(fits)
    else:
        n_pos = int(n_pos_t)
    if compact:
        keys = torch.bitwise_left_shift(bits, 1)  # drops the sign bit: -0.0 lands on +0.0's key
        keys.bitwise_or_(positive.to(as_int))
        return keys, n_pos, True
    keys = bits.to(wide)
    nonneg = keys >= 0
    keys.abs_()
    keys.add_(nonneg.to(wide), alpha=half)
    del nonneg
    nan_below = _NAN_BELOW[dtype]
    keys.masked_fill_((keys < nan_below) | (keys > 2 * half - nan_below), 2 * half - 1)  # every NaN: one top key
    keys.bitwise_left_shift_(1)
    keys.bitwise_or_(positive.to(wide))
    return keys, n_pos, False


def _encode(
    preds: Tensor | Sequence[Tensor], target: Tensor | Sequence[Tensor], compact: bool | None
) -> tuple[Tensor, int, bool]:
    """Unsorted keys (see :func:`encode`), how many labels are positive and whether the keys are compact, in one pass
    over the blocks. ``compact=None``: each block's range is tested before it is encoded (pieces are then gathered
    once, not once to test and once to encode); a block outside [0, 2) starts the keys over, wide.
    """
    pieces = _pieces(preds)
    if on_device(pieces[0]):
        return _encode_device(pieces, _pieces(target), compact)
    as_int, wide, half = _KEYS[pieces[0].dtype]
    packed = compact is not False
    keys = _empty_keys(sum(p.numel() for p in pieces), as_int if packed else wide, pieces[0].device)
    offset, n_pos = 0, 0
    for scores, label in blocks(pieces, target):
        assert label is not None
        if compact is None and not within(scores, 0, 2, closed=False):
            del keys
            return _encode(pieces, target, False)
        # one reduction tells whether the block has a NaN (max propagates it): only wide keys can
        nan = not packed and scores.numel() > 0 and bool(torch.isnan(scores.max()))
        nan_below = _NAN_BELOW[pieces[0].dtype] if nan else None
        n_pos += _encode_cpu(keys[offset : offset + scores.numel()], scores.view(as_int), label, packed, nan_below)
        offset += scores.numel()
    return keys, n_pos, packed


def encode(preds: Tensor | Sequence[Tensor], target: Tensor | Sequence[Tensor], compact: bool | None = None) -> Tensor:
    """Unsorted keys ``2 * code + label`` (``code`` increases with the score; ``-0.0`` and ``+0.0`` share one).

    ``preds`` / ``target`` may be lists of pieces (stored batches, per-rank parts of a sync) of one dtype: they are
    encoded into one buffer without concatenating them first (small pieces are gathered a group of about
    :data:`CHUNK` samples at a time, see :func:`blocks`). Built chunk by chunk: the only allocation of size N is the
    result. ``compact`` must only be ``True`` when every score fits (default: tested block by block, see
    :func:`_encode`).
    """
    return _encode(preds, target, compact)[0]


def decode(codes: Tensor, dtype: torch.dtype, compact: bool) -> Tensor:
    """The ``dtype`` scores of ``codes`` (keys shifted right by one); inverse of :func:`encode`."""
    as_int, _, half = _KEYS[dtype]
    if compact:
        return codes.to(as_int).view(dtype)
    bits = torch.where(codes >= half, codes - half, -codes)
    return bits.to(as_int).view(dtype)


def sort_keys_(keys: Tensor, runs: bool = False) -> Tensor:
    """Sort 1-D integer keys ascending: in place on CPU (NumPy, no index tensor), with ``torch.sort`` elsewhere.

    ``runs=True`` when the keys are a few sorted runs end to end (a merge, NumPy's stable sort, is then faster).
    Otherwise, with several torch threads and enough keys, the keys are partitioned around medians (every key of a
    part <= every key of the next) and the parts sorted at once on worker threads (:func:`run_all`): the same
    sorted keys.
    """
    if on_device(keys):
        return torch.sort(keys).values
    k = keys.numpy()
    if runs:
        k.sort(kind="stable")
        return keys
    bounds = [0, k.shape[0]]
    whole: set[int] = set()  # parts not split further: their middle key sits in a long run of equal keys
    for _ in range(parts_for(k.shape[0]).bit_length() - 1):  # each level halves every part
        spans = [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if a not in whole]
        whole.update(a for a, b in spans if _middle_run_is_long(k[a:b]))
        spans = [(a, b) for a, b in spans if a not in whole]
        run_all(lambda span: k[span[0] : span[1]].partition((span[1] - span[0]) // 2), spans)
        bounds = sorted({*bounds, *((a + b) // 2 for a, b in spans)})
    run_all(lambda span: k[span[0] : span[1]].sort(), list(zip(bounds[:-1], bounds[1:], strict=True)))
    return keys


# Keys sampled to see whether a part's middle key sits in a long run of equal keys (one score of one class)
RUN_SAMPLE = 1 << 10


def _middle_run_is_long(k: Any) -> bool:
    """Whether the middle key of ``k`` probably sits in a run of equal keys of more than 1/32 of them, or such runs
    hold most keys, from an evenly spaced sample. NumPy's partition around such a key slows down with the run (0.1 s
    at 10**7 keys when it holds half of them, 20 times a sort of the same keys, which many equal keys make fast):
    such a part is sorted whole.
    """
    import numpy as np

    sample = np.sort(k[:: max(1, k.shape[0] // RUN_SAMPLE)])
    middle = sample[sample.shape[0] // 2]
    equal = int(np.searchsorted(sample, middle, side="right")) - int(np.searchsorted(sample, middle, side="left"))
    if equal * 32 > sample.shape[0]:
        return True
    # Most keys in a few long runs (two tied blocks around a thin band of other scores): the partition still wades
    # through them (13 ms at 4e6 keys), the sort of so few distinct keys takes 3.
    counts = np.unique(sample, return_counts=True)[1]
    return bool(counts[counts * 32 > sample.shape[0]].sum() * 2 > sample.shape[0])


def split_points(keys: Tensor, parts: int) -> list[int]:
    """``parts + 1`` increasing cut indices ``0 = c0 <= ... = n`` of sorted keys, each at the first key of a score
    (keys ``2 * code`` and ``2 * code + 1`` share one): no score is split between parts, so each part's sums
    (ties included) can be taken on its own.
    """
    n = keys.numel()
    k = keys.numpy()
    cuts = [0]
    for i in range(1, parts):
        at = int(k.searchsorted(k[i * n // parts] & ~1, side="left"))
        cuts.append(max(at, cuts[-1]))
    cuts.append(n)
    return cuts


def sorted_keys(
    preds: Tensor | Sequence[Tensor], target: Tensor | Sequence[Tensor], compact: bool | None = None
) -> SortedKeys:
    """Sorted packed keys of 16/32-bit scores ``preds`` and labels ``target`` (bool / 0-1), or lists of pieces;
    ``compact`` as in :func:`encode`.
    """
    dtype = _pieces(preds)[0].dtype
    keys, n_pos, compact = _encode(preds, target, compact)
    return SortedKeys(sort_keys_(keys), dtype, n_pos, compact)


def sort_problem(
    preds: Tensor | Sequence[Tensor],
    target: Tensor | Sequence[Tensor],
    with_scores: bool = True,
    compact: bool | None = None,
) -> SortedProblem:
    """One binary problem (scores and bool / 0-1 labels, or pieces of them) in its cheapest exact sorted form.

    Pieces of one 16/32-bit dtype are encoded straight into one key buffer (never concatenated; pieces of mixed
    dtypes are concatenated first, which promotes them); float64 scores become counts. ``with_scores`` only matters
    for counts (keys decode their thresholds on demand); ``compact=True`` when every score is known to lie in
    [0, 2) (``None``: tested here).
    """
    scores, labels = _pieces(preds), _pieces(target)
    if len(scores) > 1 and len({p.dtype for p in scores}) > 1:  # mixed widths: promoted, as a sync promotes them
        scores, labels = [torch.cat(scores)], [torch.cat(labels)]
    if packable(scores[0].dtype):
        if on_device(scores[0]):
            keys, _, compact = _encode(scores, labels, compact)
            return runs_of_keys(keys, scores[0].dtype, compact)
        return sorted_keys(scores, labels, compact)
    one_scores = torch.cat(scores) if len(scores) > 1 else scores[0]
    return ascending_counts(one_scores, torch.cat(labels) if len(labels) > 1 else labels[0], with_scores)


def _run_ends(sorted_values: Tensor) -> Tensor:
    """Index of the last element of every run of equal values in a sorted vector."""
    n = sorted_values.numel()
    ends = torch.nonzero(sorted_values[1:] != sorted_values[:-1]).flatten()
    return torch.cat([ends, ends.new_tensor([n - 1])])


def _counts_of_keys(keys: Tensor, dtype: torch.dtype, with_scores: bool, in_place: bool, compact: bool) -> Counts:
    """Counts of sorted keys (relative to their first element); ``in_place`` may overwrite ``keys``."""
    positives = keys.bitwise_and(1).to(torch.int64)
    positives.cumsum_(0)
    codes = keys.bitwise_right_shift_(1) if in_place else keys.bitwise_right_shift(1)
    ends = _run_ends(codes)
    scores = decode(codes[ends], dtype, compact) if with_scores else None
    del codes
    return Counts(positives[ends], ends + 1, scores)


def runs_of_keys(keys: Tensor, dtype: torch.dtype, compact: bool, *, is_sorted: bool = False) -> Counts:
    """:class:`Counts` (thresholds included) of packed keys, from one keys-only sort with run lengths: the device
    path's sort (``torch.unique(sorted=True, return_counts=True)``, or ``torch.unique_consecutive`` of keys that are
    already sorted); no index payload, nothing of size N after it.

    A run is one key ``2 * code + label``: each distinct score has at most two, its negatives then its positives.
    The cumulative sums of the run lengths (all, positives) at the last run of every score are the counts, exactly
    what :func:`materialize` gives for the same keys sorted. A fixed number of kernels and one host read (how many
    distinct scores) whatever the size.
    """
    if keys.numel() == 0:
        return _empty_counts(keys.device, torch.zeros(0, dtype=dtype, device=keys.device))
    if is_sorted:
        runs, lengths = torch.unique_consecutive(keys, return_counts=True)
    else:
        runs, lengths = torch.unique(keys, sorted=True, return_counts=True)
    return _counts_of_runs(runs, lengths, dtype, compact)


def sort_classes(
    preds: Tensor | Sequence[Tensor], target: Tensor | Sequence[Tensor], task: str, compact: bool | None = None
) -> list[Counts] | None:
    """The per-class problems of stored multiclass / multilabel rows (``preds`` ``(N, K)``; ``target`` class indices
    ``(N,)``, or ``(N, K)`` 0 / 1 with -1 where ignored) on the device path, from ONE sort of every entry: the class
    index goes above the packed key (``class << S | key``, S the key's width), so one
    ``torch.unique(sorted=True, return_counts=True)`` orders classes, then scores, then labels, and the counts of
    every class are slices of the same cumulative sums, less the sums of the classes before it. Ignored entries take
    class ``K``, past every real one. A fixed number of kernels plus a few per class, two host reads (the distinct
    scores, the class bounds), whatever N. ``None`` off the device path or for scores that do not pack (float64):
    the caller then sorts class by class.
    """
    pieces, labels = _pieces(preds), _pieces(target)
    if not on_device(pieces[0]) or len({p.dtype for p in pieces}) > 1 or not packable(pieces[0].dtype):
        return None
    preds = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
    target = torch.cat(labels) if len(labels) > 1 else labels[0]
    if preds.dim() != 2:
        return None
    n, width = preds.shape
    dtype = preds.dtype
    classes = torch.arange(width, device=preds.device).expand(n, width)
    if task == "multiclass":
        positive = target.reshape(-1, 1) == classes
    else:
        positive = target == 1
        classes = torch.where(target >= 0, classes, width)  # ignored entries: class K, dropped below
    keys, _, compact = _encode_device([preds.reshape(-1)], [positive.reshape(-1)], compact)
    shift = 8 * _KEYS[dtype][0].itemsize + (
        0 if compact else 1
    )  # above every key: compact < 2**bits, wide < 2**(bits+1)
    combined = classes.reshape(-1).to(torch.int64).bitwise_left_shift(shift).bitwise_or_(keys.to(torch.int64))
    del keys, positive
    if combined.numel() == 0:
        empty = _empty_counts(preds.device, torch.zeros(0, dtype=dtype, device=preds.device))
        return [Counts(empty.pos_le.clone(), empty.all_le.clone(), empty.scores) for _ in range(width)]
    runs, lengths = torch.unique(combined, sorted=True, return_counts=True)
    del combined
    pos_all, all_all, codes = _run_totals(runs, lengths)
    del runs, lengths
    class_of = codes.bitwise_right_shift(shift - 1)
    scores = decode(codes.bitwise_and((1 << (shift - 1)) - 1), dtype, compact)
    bounds = torch.searchsorted(class_of, torch.arange(width + 1, device=preds.device)).tolist()
    out = []
    for k in range(width):
        a, b = bounds[k], bounds[k + 1]
        pos_le, all_le = pos_all[a:b], all_all[a:b]
        if a > 0:
            pos_le, all_le = pos_le - pos_all[a - 1], all_le - all_all[a - 1]
        out.append(Counts(pos_le, all_le, scores[a:b]))
    return out


def _run_totals(runs: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(pos_le, all_le, codes)`` at the last run of every distinct ``runs >> 1`` of distinct sorted keys ``runs``
    holding ``lengths`` samples each: the cumulative sums of the run lengths, and the codes (one host read: how many).
    """
    lengths = lengths.to(torch.int64)
    all_le = torch.cumsum(lengths, 0)
    pos_le = torch.cumsum(lengths * runs.bitwise_and(1).to(torch.int64), 0)
    codes = runs.bitwise_right_shift(1)
    last = torch.ones(codes.numel(), dtype=torch.bool, device=codes.device)
    torch.ne(codes[1:], codes[:-1], out=last[:-1])
    ends = torch.nonzero(last).flatten()
    return pos_le[ends], all_le[ends], codes[ends]


def _counts_of_runs(runs: Tensor, lengths: Tensor, dtype: torch.dtype, compact: bool) -> Counts:
    """:class:`Counts` of distinct sorted keys ``runs`` and how many samples each holds (``lengths``)."""
    pos_le, all_le, codes = _run_totals(runs, lengths)
    return Counts(pos_le, all_le, decode(codes, dtype, compact))


def _empty_counts(device: torch.device, scores: Tensor | None) -> Counts:
    empty = torch.zeros(0, dtype=torch.int64, device=device)
    return Counts(empty, empty.clone(), scores)


def ascending_counts(preds: Tensor, target: Tensor, with_scores: bool = False) -> Counts:
    """Positives and samples at or below every distinct score of ``preds`` (1-D floats, ``target`` bool / 0-1)."""
    if preds.numel() == 0:
        return _empty_counts(preds.device, preds.new_zeros(0) if with_scores else None)
    if packable(preds.dtype):
        if on_device(preds):
            keys, _, compact = _encode(preds, target, None)
            counts = runs_of_keys(keys, preds.dtype, compact)
            return counts if with_scores else Counts(counts.pos_le, counts.all_le, None, counts.neg_le)
        compact = fits_compact(preds)
        keys = sort_keys_(encode(preds, target, compact))
        return _counts_of_keys(keys, preds.dtype, with_scores, in_place=True, compact=compact)
    sorted_scores, order = torch.sort(preds)
    positives = target[order].to(torch.int64)
    del order
    positives.cumsum_(0)
    ends = _run_ends(sorted_scores)
    scores = sorted_scores[ends] if with_scores else None
    del sorted_scores
    return Counts(positives[ends], ends + 1, scores)


def materialize(col: SortedProblem, with_scores: bool) -> Counts:
    """The :class:`Counts` of a sorted problem (the keys of a :class:`SortedKeys` are left intact)."""
    if isinstance(col, Counts):
        return col
    if col.keys.numel() == 0:
        scores = torch.zeros(0, dtype=col.dtype, device=col.keys.device) if with_scores else None
        return _empty_counts(col.keys.device, scores)
    return _counts_of_keys(col.keys, col.dtype, with_scores, in_place=False, compact=col.compact)


def size(col: SortedProblem) -> tuple[int, int]:
    """``(positives, samples)`` of a sorted problem."""
    if isinstance(col, Counts):
        if col.pos_le.numel() == 0:
            return 0, 0
        return int(col.pos_le[-1]), int(col.all_le[-1])
    return col.n_pos, col.keys.numel()


def chunks(col: SortedProblem) -> Iterator[tuple[int, int, Counts | Tensor]]:
    """``(positives before, samples before, chunk)`` of consecutive chunks of a sorted problem.

    A chunk holds about :data:`CHUNK` samples and ends at the end of a run of equal scores; the partition depends
    only on the sorted multiset, and is the same for :class:`Counts` and :class:`SortedKeys` of the same data. A
    chunk is a slice of the sorted keys, or :class:`Counts` relative to the chunk's start (no scores).
    """
    if isinstance(col, Counts):
        n = int(col.all_le[-1]) if col.all_le.numel() else 0
        g0, a, p = 0, 0, 0
        while a < n:
            g1 = col.all_le.numel() if a + CHUNK >= n else int(torch.searchsorted(col.all_le, a + CHUNK)) + 1
            yield p, a, Counts(col.pos_le[g0:g1] - p, col.all_le[g0:g1] - a, None)
            g0, a, p = g1, int(col.all_le[g1 - 1]), int(col.pos_le[g1 - 1])
        return
    bounds = chunk_bounds(col.keys)
    p = 0
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        chunk = col.keys[a:b]
        yield p, a, chunk
        if b < bounds[-1]:
            p += count_positives(chunk)


def chunk_bounds(keys: Tensor) -> list[int]:
    """Where the chunks of :func:`chunks` start in sorted keys, and their end: about :data:`CHUNK` keys each, up to
    the end of a run of equal scores.
    """
    n = keys.numel()
    bounds = [0]
    while bounds[-1] < n:
        b = min(bounds[-1] + CHUNK, n)
        if b < n:
            b = int(torch.searchsorted(keys, keys[b - 1 : b].bitwise_or(1), right=True))
        bounds.append(b)
    return bounds


def count_positives(keys: Tensor) -> int:
    """How many of ``keys`` carry label 1 (chunk by chunk on CPU: no temporary of the keys' size; at once on the
    device path: one host read).
    """
    if on_device(keys):
        return int(keys.bitwise_and(1).sum())
    return sum(int(keys[a : a + CHUNK].bitwise_and(1).sum()) for a in range(0, keys.numel(), CHUNK))


def local_counts(chunk: Tensor) -> Counts:
    """Counts of a chunk of sorted keys, relative to its start (no scores)."""
    return _counts_of_keys(chunk, torch.float32, with_scores=False, in_place=False, compact=False)
