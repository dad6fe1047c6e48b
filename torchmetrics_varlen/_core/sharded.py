"""The sharded strategy (``compute_sharded=True``): every rank keeps one range of the scores and sums its part.

Only scalar statistics that reduce to per-range :class:`~torchmetrics_varlen.functional._ranking.RankSums` (AUROC,
average precision) compute this way; the metric reduces the global sums like any other (``_ranking.reduce_sums``).
The rows move in a sample sort (``_dist/shard.py``, transport only); the per-range math is this module's: the
columns it sorts and moves (:class:`_KeyColumn`, :class:`_ScoreColumn`, :class:`_WeightedColumn`) and the sums over
the range each rank receives. On the device path (``functional._device.on_device``) a compute reads the device a
fixed number of times whatever the number of samples: the W sorted runs a rank receives are run-length encoded and
merged, not sorted again, and summed with whole-array cumulative sums (:func:`_device_sums`).
"""

from __future__ import annotations

import struct
from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen._core.dedup import conflicting_id, copy_scores, dedup_by_id
from torchmetrics_varlen._core.strategies import Compute, ComputeStrategy, Host, pieces, report
from torchmetrics_varlen._dist.exchange import INFO_COMPACT, CheckedIn, Info, SyncRequest, check_in_states
from torchmetrics_varlen._dist.group import comm_device
from torchmetrics_varlen._dist.shard import Range, Shard, route_rows_by_id, sample_sort
from torchmetrics_varlen.functional._count import Pieces, split_rows
from torchmetrics_varlen.functional._device import on_device
from torchmetrics_varlen.functional._ranking import RankSums, SumsNeeded, combine, rank_sums, reduce_sums
from torchmetrics_varlen.functional._sort import (
    Column,
    SortedKeys,
    ascending_counts,
    count_positives,
    decode,
    encode,
    fits_compact,
    packable,
    sort_keys_,
)
from torchmetrics_varlen.functional._validation import Split
from torchmetrics_varlen.functional._weighted import (
    WeightedRankSums,
    combine_weighted,
    weighted_counts,
    weighted_rank_sums,
)
from torchmetrics_varlen.functional._weighted import _split as weighted_columns


class Sharded(ComputeStrategy):
    """No row moves at the sync (a check-in only); the computation is spread over the ranks (module docstring)."""

    joins_collection_sync = False

    def info(self, host: Host) -> Info:
        """Plus whether compact sort keys fit this rank's scores: the keys of all ranks meet in one all-to-all."""
        preds = pieces(host, "preds")
        fits = _fits_compact_device(preds) if preds and on_device(preds[0]) else fits_compact(preds)
        return {**super().info(host), INFO_COMPACT: int(fits)}

    def exchange(self, host: Host, request: SyncRequest, guarded: Any) -> None:
        """The check-in and the metadata all-gather only: the rows stay where they are until the compute."""
        payload = self.payload(host)
        host._checked = check_in_states(
            request, payload.cat, {}, device=payload.device, info=payload.info, modes=payload.modes, pack=False
        )
        host._synced_info = host._checked.info

    def compute(self, host: Host, checked: CheckedIn, compute: Compute, *args: Any, **kwargs: Any) -> Tensor:
        """The metric's statistic from the global sums of every binary problem (every rank calls)."""
        statistic = host._statistic
        assert statistic is not None
        if any(r.modes.get("weights") == "weights" for r in checked.ranks):
            weighted = compute_sharded_weighted(host, checked)
            return reduce_sums(weighted, host._split, statistic, host.num_samples.device)
        sums = compute_sharded(host, checked, statistic.needs)
        return reduce_sums(sums, host._split, statistic, host.num_samples.device)


def compute_sharded(metric: Host, checked: CheckedIn, needs: SumsNeeded) -> list[RankSums]:
    """The global sums of every binary problem of ``metric`` (every rank calls; fills its ``sync_report``)."""
    compact = all(i[INFO_COMPACT] for i in checked.info)
    comm = comm_device(checked.ticket.layout.group, metric.num_samples.device)
    shard = Shard(checked.ticket, comm)
    dtype = checked.layouts["preds"].dtype
    kept = None
    preds: Pieces
    target: Pieces
    if "ids" in {r.modes["dedup"] for r in checked.ranks}:
        rows = {name: torch.cat(pieces(metric, name)).to(comm) for name in ("preds", "target", "ids", "ids_sub")}
        rows["preds"] = rows["preds"].to(dtype)
        routed = route_rows_by_id(shard, rows, rows["ids"])
        keep, kept = _dedup(shard, routed)
        preds, target = routed["preds"][keep], routed["target"][keep]
    else:
        # The stored batches go straight into the sort keys (binary task), never concatenated.
        preds = [p.to(device=comm, dtype=dtype) for p in pieces(metric, "preds")]
        target = [t.to(comm) for t in pieces(metric, "target")]
    problems = split_rows(metric._split, preds, target)
    del preds, target
    report(metric, kept, info=checked.info)
    sums = []
    while problems:
        scores, labels = problems.pop(0)
        sums.append(sharded_sums(shard, scores, labels, area=needs.area, ap=needs.ap, compact=compact))
        del scores, labels
    return sums


def compute_sharded_weighted(metric: Host, checked: CheckedIn) -> list[WeightedRankSums]:
    """As :func:`compute_sharded` with sample weights: the global weighted sums of every binary problem.

    The weights travel with the scores (a third column of the all-to-all); each rank counts its range of scores
    with :func:`~torchmetrics_varlen.functional._weighted.weighted_counts` and places it by the weights of the ranges
    below (float64 sums in rank order: within ~1e-16 of one process, the same bits on every rank).
    """
    comm = comm_device(checked.ticket.layout.group, metric.num_samples.device)
    shard = Shard(checked.ticket, comm)
    dtype = checked.layouts["preds"].dtype
    kept = None
    names = ("preds", "target", "weight")
    rows = {name: torch.cat(pieces(metric, name)).to(comm) for name in names}
    rows["preds"] = rows["preds"].to(dtype)
    if "ids" in {r.modes["dedup"] for r in checked.ranks}:
        rows.update({name: torch.cat(pieces(metric, name)).to(comm) for name in ("ids", "ids_sub")})
        routed = route_rows_by_id(shard, rows, rows["ids"])
        keep, kept = _dedup(shard, routed)
        preds, target, weight = (routed[name][keep] for name in names)
    else:
        preds, target, weight = rows["preds"], rows["target"], rows["weight"]
    report(metric, kept, info=checked.info)
    split = Split(metric.task, metric._split.average)
    return [_weighted_range_sums(shard, s, p, w) for s, p, w in weighted_columns(split, preds, target, weight)]


def _weighted_range_sums(shard: Shard, scores: Tensor, positives: Tensor, weight: Tensor) -> WeightedRankSums:
    """Global :class:`WeightedRankSums` of one weighted binary problem spread over the ranks (every rank calls)."""
    rank = shard.rank
    mine_scores, mine_pos, mine_w = sample_sort(shard, lambda: _WeightedColumn(scores, positives, weight)).moved
    counts = weighted_counts(mine_scores, mine_pos.to(torch.bool), mine_w, with_scores=False)
    w_pos = float(counts.pos_le[-1]) if counts.pos_le.numel() else 0.0
    w_all = float(counts.all_le[-1]) if counts.all_le.numel() else 0.0
    totals = shard.all_gather(torch.tensor([w_pos, w_all], dtype=torch.float64, device=shard.device)).cpu().tolist()
    pos_before = sum(t[0] for t in totals[:rank])
    all_before = sum(t[1] for t in totals[:rank])
    total = (sum(t[0] for t in totals), sum(t[1] for t in totals))
    part = weighted_rank_sums(counts, pos_before=pos_before, all_before=all_before, totals=total)
    parts = shard.all_gather(torch.tensor(list(part), dtype=torch.float64, device=shard.device)).cpu().tolist()
    return combine_weighted([WeightedRankSums(*p) for p in parts])


def sharded_sums(
    shard: Shard,
    scores: Tensor | list[Tensor],
    labels: Tensor | list[Tensor],
    *,
    area: bool,
    ap: bool,
    compact: bool = False,
) -> RankSums:
    """Global :class:`RankSums` of one binary problem whose samples are spread over the ranks (every rank calls).

    ``scores`` (1-D floats, the dtype agreed by every rank) and ``labels`` (bool) are this rank's samples, or lists
    of pieces of them (stored batches: encoded straight into the keys, never concatenated). ``compact`` (compact
    keys, see ``_sort``) must be the same on every rank, and only ``True`` if every rank's scores fit.
    """
    pieces = [scores] if isinstance(scores, Tensor) else scores
    dtype = pieces[0].dtype
    rank = shard.rank
    if on_device(pieces[0]):
        return _device_sums(shard, scores, labels, area=area, ap=ap, compact=compact)
    if packable(dtype):
        routed = sample_sort(shard, lambda: _KeyColumn(scores, labels, compact))
        # W sorted runs: a merge (NumPy's stable sort) on CPU.
        col: Column = SortedKeys(sort_keys_(routed.moved.pop(), runs=True), dtype, routed.per_range(0)[rank], compact)
    else:
        routed = sample_sort(shard, lambda: _ScoreColumn(scores, labels))
        mine_scores, mine_labels = routed.moved
        routed.moved.clear()
        col = ascending_counts(mine_scores, mine_labels.to(torch.bool))
        del mine_scores, mine_labels
    per_range, pos_per_range = routed.per_range(), routed.per_range(0)
    part = rank_sums(
        col,
        area=area,
        ap=ap,
        pos_before=sum(pos_per_range[:rank]),
        all_before=sum(per_range[:rank]),
        totals=(sum(pos_per_range), sum(per_range)),
    )
    packed = torch.tensor([part.n_pos, part.n_all, part.twice_area], dtype=torch.int64)
    ap_bits = torch.tensor([part.ap_sum], dtype=torch.float64).view(torch.int64)
    parts = shard.all_gather(torch.cat([packed, ap_bits]).to(shard.device)).cpu()
    return combine([RankSums(int(p[0]), int(p[1]), int(p[2]), float(p[3:4].view(torch.float64))) for p in parts])


# ---------------------------------------------------------------------------------------------------- device path
#
# On a device (and on CPU under ``force_device_path()``) the sample sort and the sums over each rank's range take a
# fixed number of host reads, whatever the number of samples: the keys are built in one pass per stored piece, sorted
# once, and after the all-to-all the W sorted runs a rank receives are run-length encoded and merged (binary searches
# of each run in its partner, a scatter) instead of sorted again; the sums are whole-array cumulative sums.

# For each 16/32-bit dtype: its integer of the same width, the wide key's integer, 2**(bits - 1), and the wide codes
# below which (and above 2**bits minus which) a code is a NaN. The keys are ``_sort``'s (``2 * code + label``),
# built here with torch operations only.
_DEVICE_KEYS = {
    torch.float32: (torch.int32, torch.int64, 1 << 31, 1 << 23),
    torch.float16: (torch.int16, torch.int32, 1 << 15, 1 << 10),
    torch.bfloat16: (torch.int16, torch.int32, 1 << 15, 1 << 7),
}


def _fits_compact_device(preds: list[Tensor]) -> bool:
    """Whether every score of the pieces lies in ``[0, 2)`` (NaN never does): one host read for all the pieces."""
    fits = [((lo >= 0) & (hi < 2)).reshape(1) for lo, hi in (torch.aminmax(p) for p in preds if p.numel())]
    return bool(torch.cat(fits).all()) if fits else True


def _device_keys(scores: list[Tensor], labels: list[Tensor], compact: bool) -> Tensor:
    """Unsorted keys ``2 * code + label`` of the pieces (``_sort``'s keys), written piece by piece into one buffer.

    Compact keys (every score in ``[0, 2)``) are the float's bits without the sign, shifted left, in the float's own
    width (``-0.0`` lands on ``+0.0``); wide keys map the sign-magnitude bits to an increasing integer of twice the
    width, every NaN to the highest code (one score above ``+inf``, as ``torch.sort`` ranks it).
    """
    as_int, wide, half, nan_below = _DEVICE_KEYS[scores[0].dtype]
    keys = torch.empty(sum(p.numel() for p in scores), dtype=as_int if compact else wide, device=scores[0].device)
    at = 0
    for piece, label in zip(scores, labels, strict=True):
        out = keys[at : at + piece.numel()]
        at += piece.numel()
        bits = piece.reshape(-1).view(as_int)
        if compact:
            torch.bitwise_and(bits, half - 1, out=out)
        else:
            code = bits.to(wide)
            code = torch.where(code >= 0, code + half, -code)
            out.copy_(code.masked_fill_((code < nan_below) | (code > 2 * half - nan_below), 2 * half - 1))
        out.bitwise_left_shift_(1).bitwise_or_((label.reshape(-1) != 0).to(out.dtype))
    return keys


def _device_decode(codes: Tensor, dtype: torch.dtype, compact: bool) -> Tensor:
    """The ``dtype`` scores of ``codes`` (keys shifted right by one): the inverse of :func:`_device_keys`."""
    as_int, _, half, _ = _DEVICE_KEYS[dtype]
    if not compact:
        codes = torch.where(codes >= half, codes - half, -codes)
    return codes.to(as_int).view(dtype)


def _float_codes(scores: Tensor) -> Tensor:
    """int64 codes that increase with float64 ``scores`` (``-0.0`` and ``+0.0`` share one, every NaN takes the
    highest): equal scores, equal codes, so runs of one score can be found and merged as integers.
    """
    bits = scores.view(torch.int64)
    codes = torch.where(bits >= 0, bits, -(bits & ((1 << 63) - 1)))
    return codes.masked_fill_(torch.isnan(scores), (1 << 63) - 1)


def _device_sums(
    shard: Shard, scores: Tensor | list[Tensor], labels: Tensor | list[Tensor], *, area: bool, ap: bool, compact: bool
) -> RankSums:
    """:func:`sharded_sums` on the device path: a fixed number of host reads per problem (the sample sort's three,
    two for the run-length encoding, one for the partial sums), none per chunk of samples.
    """
    rank = shard.rank
    pieces = [scores] if isinstance(scores, Tensor) else scores
    routed: Range
    if packable(pieces[0].dtype):
        routed = sample_sort(shard, lambda: _KeyColumn(scores, labels, compact))
        keys = routed.moved.pop()
        table = _merged(_key_runs(keys, routed.received()))
        del keys
        codes = table[0].bitwise_right_shift(1)
    else:
        routed = sample_sort(shard, lambda: _ScoreColumn(scores, labels))
        mine_scores, mine_labels = routed.moved
        routed.moved.clear()
        table = _merged(_score_runs(_float_codes(mine_scores), mine_labels, routed.received()))
        del mine_scores, mine_labels
        codes = table[0]
    per_range, pos_per_range = routed.per_range(), routed.per_range(0)
    pos_before, all_before = sum(pos_per_range[:rank]), sum(per_range[:rank])
    n_pos, n_all = pos_per_range[rank], per_range[rank]
    totals = (sum(pos_per_range), sum(per_range))
    sums = _range_sums(codes, table[1], table[2], pos_before, all_before, totals, area=area, ap=ap, big=n_all)
    # [n_pos, n_all, the area's high and low parts, ap_sum's bits]: the partial sums go to the host once, gathered
    part = torch.cat([torch.tensor([n_pos, n_all], dtype=torch.int64, device=sums.device), sums])
    parts = []
    for r, p in enumerate(shard.all_gather(part.to(shard.device)).tolist()):
        before = sum(per_range[:r]) - sum(pos_per_range[:r])  # negatives in the ranges below rank r's
        twice_area = (p[2] << _AREA_SHIFT) + p[3] + 2 * before * p[0]
        parts.append(RankSums(p[0], p[1], twice_area, struct.unpack("<d", struct.pack("<q", p[4]))[0]))
    return combine(parts)


# The area's sum of products is split at this bit when it could pass 2**63 (twice the square of the range's samples
# at least _AREA_SPLIT; the high part sums the products' high bits): exact for up to 2**32 positives per rank.
_AREA_SHIFT = 31
_AREA_SPLIT = 1 << 62

Table = tuple[Tensor, Tensor, Tensor]  # (merge keys increasing, positives, negatives): one entry per run of a key


def _run_starts(values: Tensor, received: list[int]) -> tuple[Tensor, list[int]]:
    """Where each run of equal values of the ``W`` sorted runs (``received``: their lengths) starts, and how many
    such runs each of the ``W`` holds (two host reads: the starts' count, their split).
    """
    n = values.numel()
    new = torch.ones(n, dtype=torch.bool, device=values.device)
    if n > 1:
        torch.ne(values[1:], values[:-1], out=new[1:])
    offsets = [sum(received[:r]) for r in range(len(received))]
    inner = [o for o in offsets if 0 < o < n]
    if inner:
        new[torch.tensor(inner, dtype=torch.int64, device=values.device)] = True
    starts = torch.nonzero(new).flatten()
    cuts = torch.searchsorted(starts, torch.tensor([*offsets, n], dtype=torch.int64, device=values.device))
    at = cuts.tolist()
    return starts, [b - a for a, b in zip(at[:-1], at[1:], strict=True)]


def _key_runs(keys: Tensor, received: list[int]) -> list[Table]:
    """The ``W`` sorted runs of keys run-length encoded: per distinct key of a run, its positives and negatives."""
    starts, lengths = _run_starts(keys, received)
    ends = torch.cat([starts[1:], starts.new_full((1,), keys.numel())])[: starts.numel()]
    counts = ends - starts
    distinct = keys[starts]
    pos = counts * distinct.bitwise_and(1).to(torch.int64)
    return _tables(lengths, distinct, pos, counts - pos)


def _score_runs(codes: Tensor, labels: Tensor, received: list[int]) -> list[Table]:
    """As :func:`_key_runs` for float64 scores (``codes``) and their labels: per distinct score of a run."""
    starts, lengths = _run_starts(codes, received)
    ends = torch.cat([starts[1:], starts.new_full((1,), codes.numel())])[: starts.numel()]
    # positives up to the end of each entry (one running count over the W runs end to end), then per entry
    pos_le = torch.cumsum(labels.to(torch.int64), 0)[ends - 1]
    pos = pos_le - torch.cat([pos_le.new_zeros(1), pos_le[:-1]])
    counts = ends - starts
    return _tables(lengths, codes[starts], pos, counts - pos)


def _tables(lengths: list[int], keys: Tensor, pos: Tensor, neg: Tensor) -> list[Table]:
    """The ``W`` runs' tables: consecutive slices of ``lengths`` entries of the three columns (views)."""
    at = [sum(lengths[:r]) for r in range(len(lengths) + 1)]
    return [(keys[a:b], pos[a:b], neg[a:b]) for a, b in zip(at[:-1], at[1:], strict=True)]


def _merged(runs: list[Table]) -> Table:
    """One table of the sorted runs, increasing: merged two by two (``log2 W`` levels), each entry placed at its
    index plus how many entries of the partner run sort before it (a binary search), then scattered. No sort.
    """
    runs = [r for r in runs if r[0].numel()] or runs[:1]
    while len(runs) > 1:
        runs = [_merge(runs[i], runs[i + 1]) if i + 1 < len(runs) else runs[i] for i in range(0, len(runs), 2)]
    return runs[0]


def _merge(a: Table, b: Table) -> Table:
    """Two increasing tables as one (equal keys: ``a``'s first)."""
    na, nb = a[0].numel(), b[0].numel()
    at_a = torch.searchsorted(b[0], a[0]).add_(torch.arange(na, device=a[0].device))
    at_b = torch.searchsorted(a[0], b[0], right=True).add_(torch.arange(nb, device=b[0].device))
    out = []
    for x, y in zip(a, b, strict=True):
        merged = torch.empty(na + nb, dtype=x.dtype, device=x.device)
        out.append(merged.index_copy_(0, at_a, x).index_copy_(0, at_b, y))
    return out[0], out[1], out[2]


def _range_sums(
    codes: Tensor,
    pos: Tensor,
    neg: Tensor,
    pos_before: int,
    all_before: int,
    totals: tuple[int, int],
    *,
    area: bool,
    ap: bool,
    big: int,
) -> Tensor:
    """``[area high, area low, ap_sum bits]`` (int64, on the device) of one rank's merged range.

    ``codes`` (increasing; equal codes are one score, possibly several entries) with each entry's positives and
    negatives. For every entry the samples strictly below its score and at or below it come from the cumulative
    sums at the first and last entry of its score (running max / min of indices). The area (without the negatives
    of the ranges below, added on the host) sums ``pos * (neg_below + neg_at_or_below)`` in int64, split at
    :data:`_AREA_SHIFT` bits when ``big`` (the range's samples) could make it pass 2**63. AP sums, at the last entry
    of every score, ``positives at it * TP / (TP + FP)`` at its threshold: the single-process terms, in float64.
    """
    n = codes.numel()
    device = codes.device
    zero = torch.zeros(1, dtype=torch.int64, device=device)
    if n == 0 or not (area or ap):
        return torch.cat([zero, zero, zero])
    index = torch.arange(n, device=device)
    new = torch.ones(n, dtype=torch.bool, device=device)
    torch.ne(codes[1:], codes[:-1], out=new[1:])
    last = torch.ones(n, dtype=torch.bool, device=device)
    last[:-1] = new[1:]
    first_at = torch.cummax(torch.where(new, index, 0), 0).values
    last_at = torch.where(last, index, n).flip(0).cummin(0).values.flip(0)
    pos_le = torch.cumsum(pos, 0)
    all_le = pos_le + torch.cumsum(neg, 0)
    pos_lt = (pos_le - pos)[first_at]
    all_lt = (all_le - pos - neg)[first_at]
    out = [zero, zero, zero]
    if area:
        neg_both = (all_lt - pos_lt).add_(all_le[last_at] - pos_le[last_at])  # below + at or below the score
        if 2 * big * big < _AREA_SPLIT:
            out[1] = torch.sum(pos * neg_both).reshape(1)
        else:
            mask = (1 << _AREA_SHIFT) - 1
            out[0] = torch.sum(pos * neg_both.bitwise_right_shift(_AREA_SHIFT)).reshape(1)
            out[1] = torch.sum(pos * neg_both.bitwise_and_(mask)).reshape(1)
    if ap:
        n_pos, n_all = totals
        at_score = (pos_le[last_at] - pos_lt).double()
        tps = (n_pos - pos_before - pos_lt).double()
        all_ge = (n_all - all_before - all_lt).double()
        terms = torch.where(last, at_score * tps.div_(all_ge), 0.0)
        out[2] = torch.sum(terms).reshape(1).view(torch.int64)
    return torch.cat(out)


class _KeyColumn:
    """Scores and labels packed into sorted int64 keys (``_sort.py``): one tensor moves. On the device path the keys
    are built with torch operations (:func:`_device_keys`) and sorted by ``torch.sort``, the positives per slice
    counted on the device.
    """

    def __init__(self, scores: Tensor | list[Tensor], labels: Tensor | list[Tensor], compact: bool) -> None:
        pieces = [scores] if isinstance(scores, Tensor) else scores
        self.dtype, self.device, self.compact = pieces[0].dtype, pieces[0].device, compact
        self.rows = sum(p.numel() for p in pieces)
        self.device_path = on_device(pieces[0])
        if self.device_path:
            label_pieces = [labels] if isinstance(labels, Tensor) else labels
            self.keys: Tensor | None = torch.sort(_device_keys(pieces, label_pieces, compact)).values
        else:
            self.keys = sort_keys_(encode(scores, labels, compact))

    def samples(self, at: Tensor) -> Tensor:
        assert self.keys is not None
        if self.device_path:
            return _device_decode(self.keys[at].bitwise_right_shift(1), self.dtype, self.compact)
        return decode(self.keys[at].bitwise_right_shift(1), self.dtype, self.compact)

    def edges(self, splitters: Tensor) -> list[int]:
        assert self.keys is not None
        bounds_of = _device_keys if self.device_path else encode
        bounds = bounds_of(
            [splitters.to(self.dtype)], [torch.zeros_like(splitters, dtype=torch.bool)], self.compact
        ).to(self.keys.dtype)
        return [0, *torch.searchsorted(self.keys, bounds).tolist(), self.rows]

    def tallies(self, edges: list[int]) -> list[int] | Tensor:
        assert self.keys is not None
        spans = list(zip(edges[:-1], edges[1:], strict=True))
        if self.device_path:
            return torch.stack([self.keys[a:b].bitwise_and(1).sum(dtype=torch.int64) for a, b in spans])
        return [count_positives(self.keys[a:b]) for a, b in spans]

    def take(self) -> list[Tensor]:
        assert self.keys is not None
        keys, self.keys = self.keys, None
        return [keys]


class _ScoreColumn:
    """Scores of a dtype that does not pack into keys (float64), sorted, and their labels: two tensors move."""

    def __init__(self, scores: Tensor | list[Tensor], labels: Tensor | list[Tensor]) -> None:
        pieces = [scores] if isinstance(scores, Tensor) else scores
        scores = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
        labels = labels if isinstance(labels, Tensor) else torch.cat(labels)
        self.rows, self.device = scores.numel(), scores.device
        self.scores, order = torch.sort(scores)
        self.labels = labels[order]

    def samples(self, at: Tensor) -> Tensor:
        return self.scores[at]

    def edges(self, splitters: Tensor) -> list[int]:
        return [0, *torch.searchsorted(self.scores, splitters.to(self.scores.dtype)).tolist(), self.rows]

    def tallies(self, edges: list[int]) -> list[int] | Tensor:
        spans = list(zip(edges[:-1], edges[1:], strict=True))
        if on_device(self.labels):
            return torch.stack([torch.count_nonzero(self.labels[a:b]) for a, b in spans])
        return [int(torch.count_nonzero(self.labels[a:b])) for a, b in spans]

    def take(self) -> list[Tensor]:
        moved = [self.scores, self.labels.to(torch.uint8)]
        del self.scores, self.labels
        return moved


class _WeightedColumn(_ScoreColumn):
    """Weighted scores: the scores, their labels and their float64 weights move; no tallies (the weights are
    summed over each range after the move).
    """

    def __init__(self, scores: Tensor, positives: Tensor, weight: Tensor) -> None:
        self.rows, self.device = scores.numel(), scores.device
        self.scores, order = torch.sort(scores)
        self.labels, self.weight = positives[order], weight[order].to(torch.float64)

    def tallies(self, edges: list[int]) -> list[int] | Tensor:
        return []

    def take(self) -> list[Tensor]:
        moved = [*super().take(), self.weight]
        del self.weight
        return moved


def _dedup(shard: Shard, rows: dict[str, Tensor]) -> tuple[Tensor, int]:
    """The rows to keep among those routed here (one per id) and the global number kept; a conflict raises on
    every rank, naming the id (and its two targets when they are single labels).
    """
    error: ValueError | None = None
    try:
        keep = dedup_by_id(rows["ids"], rows["ids_sub"], rows["target"], copy_scores(rows))
    except ValueError as err:
        error, keep = err, torch.zeros(0, dtype=torch.int64, device=shard.device)
    kept_ids = rows["ids"][keep]
    kept = int(kept_ids.numel() and 1 + torch.count_nonzero(kept_ids[1:] != kept_ids[:-1]))
    note = [0, 0, 0, 0]  # [found, id, its targets when single labels]: every rank can name the id
    if error is not None:
        sample_id, first, second = (getattr(error, name, None) for name in ("sample_id", "first", "second"))
        if not isinstance(sample_id, int):  # another bad-input error: left in the store for the others to quote
            key = f"dedup-error/{shard.rank}"
            shard.ticket.extra_keys.append(key)
            shard.ticket.set(key, str(error))
            note = [3, 0, 0, 0]
        elif isinstance(first, int) and isinstance(second, int):
            note = [2, sample_id, first, second]
        else:
            note = [1, sample_id, 0, 0]
    flags = shard.all_gather(torch.tensor([kept, *note], dtype=torch.int64, device=shard.device)).tolist()
    for rank, (_, found, sample_id, first, second) in enumerate(flags):  # the first rank's finding, on every rank
        if found and rank == shard.rank and error is not None:
            raise error
        if found:
            where = f" (found by {shard.ticket.layout.describe(rank)} in {shard.what})"
            if found == 3:
                quoted = shard.ticket.get(f"dedup-error/{rank}").decode()
                msg = f"{shard.what}: {shard.ticket.layout.describe(rank)} found: {quoted}"
                raise ValueError(msg)
            if found == 2:
                raise conflicting_id(sample_id, first, second, where)
            raise conflicting_id(sample_id, "a row", "another", where)
    return keep, sum(f[0] for f in flags)
