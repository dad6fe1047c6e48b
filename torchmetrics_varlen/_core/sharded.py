"""The sharded strategy (``compute_sharded=True``): every rank keeps one range of the scores and sums its part.

Only scalar statistics that reduce to per-range :class:`~torchmetrics_varlen.functional._ranking.RankSums` (AUROC,
average precision) compute this way; the metric reduces the global sums like any other (``_ranking.reduce_sums``).
The rows move in a sample sort (``_dist/shard.py``, transport only); the per-range math is this module's: the
columns it sorts and moves (:class:`_KeyColumn`, :class:`_ScoreColumn`, :class:`_WeightedColumn`) and the sums over
the range each rank receives.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen._core.dedup import conflicting_id, copy_scores, dedup_by_id
from torchmetrics_varlen._core.strategies import Compute, ComputeStrategy, Host, pieces, report
from torchmetrics_varlen._dist.exchange import INFO_COMPACT, CheckedIn, Info, SyncRequest, check_in_states
from torchmetrics_varlen._dist.group import comm_device
from torchmetrics_varlen._dist.shard import Shard, route_rows_by_id, sample_sort
from torchmetrics_varlen.functional._count import Pieces, split_rows
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
from torchmetrics_varlen.functional._tasks import Split
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
        return {**super().info(host), INFO_COMPACT: int(fits_compact(pieces(host, "preds")))}

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


class _KeyColumn:
    """Scores and labels packed into sorted int64 keys (``_sort.py``): one tensor moves."""

    def __init__(self, scores: Tensor | list[Tensor], labels: Tensor | list[Tensor], compact: bool) -> None:
        pieces = [scores] if isinstance(scores, Tensor) else scores
        self.dtype, self.device, self.compact = pieces[0].dtype, pieces[0].device, compact
        self.rows = sum(p.numel() for p in pieces)
        self.keys: Tensor | None = sort_keys_(encode(scores, labels, compact))

    def samples(self, at: Tensor) -> Tensor:
        assert self.keys is not None
        return decode(self.keys[at].bitwise_right_shift(1), self.dtype, self.compact)

    def edges(self, splitters: Tensor) -> list[int]:
        assert self.keys is not None
        bounds = encode(splitters.to(self.dtype), torch.zeros_like(splitters, dtype=torch.bool), self.compact)
        return [0, *torch.searchsorted(self.keys, bounds).tolist(), self.rows]

    def tallies(self, edges: list[int]) -> list[int]:
        assert self.keys is not None
        return [count_positives(self.keys[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]

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

    def tallies(self, edges: list[int]) -> list[int]:
        return [int(torch.count_nonzero(self.labels[a:b])) for a, b in zip(edges[:-1], edges[1:], strict=True)]

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

    def tallies(self, edges: list[int]) -> list[int]:
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
