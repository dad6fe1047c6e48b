"""``compute_sharded=True``: every rank keeps one range of the scores and sums its part (see ``_dist/shard.py``).

Only scalar statistics that reduce to per-range :class:`~torchmetrics_varlen.functional._ranking.RankSums` (AUROC,
average precision) compute this way; the metric reduces the global sums like any other (``_reduce.reduce_sums``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from torchmetrics_varlen._dedup import dedup_by_id
from torchmetrics_varlen._dist.exchange import CheckedIn
from torchmetrics_varlen._dist.group import comm_device
from torchmetrics_varlen._dist.shard import (
    Shard,
    _sample,
    _sample_at,
    _samples_per_rank,
    _splitters,
    route_rows_by_id,
    sharded_sums,
)
from torchmetrics_varlen.functional._count import Pieces, split_rows
from torchmetrics_varlen.functional._ranking import RankSums
from torchmetrics_varlen.functional._reduce import SumsNeeded
from torchmetrics_varlen.functional._tasks import Split
from torchmetrics_varlen.functional._weighted import (
    WeightedRankSums,
    combine_weighted,
    weighted_counts,
    weighted_rank_sums,
)
from torchmetrics_varlen.functional._weighted import _split as weighted_columns

if TYPE_CHECKING:
    from torchmetrics_varlen.classification._base import _VarlenMetric


def compute_sharded(metric: _VarlenMetric, checked: CheckedIn, needs: SumsNeeded) -> list[RankSums]:
    """The global sums of every binary problem of ``metric`` (every rank calls; fills its ``sync_report``)."""
    compact = all(i["compact"] for i in checked.info)
    comm = comm_device(checked.ticket.layout.group, metric.num_samples.device)
    shard = Shard(checked.ticket, comm)
    dtype = checked.layouts["preds"][0]
    kept = None
    preds: Pieces
    target: Pieces
    if "ids" in {r.modes["dedup"] for r in checked.ranks}:
        rows = {name: torch.cat(metric._pieces(name)).to(comm) for name in ("preds", "target", "ids", "ids_sub")}
        rows["preds"] = rows["preds"].to(dtype)
        routed = route_rows_by_id(shard, rows, rows["ids"])
        keep, kept = _dedup(shard, routed)
        preds, target = routed["preds"][keep], routed["target"][keep]
    else:
        # The stored batches go straight into the sort keys (binary task), never concatenated.
        preds = [p.to(device=comm, dtype=dtype) for p in metric._pieces("preds")]
        target = [t.to(comm) for t in metric._pieces("target")]
    problems = split_rows(metric._split, preds, target)
    del preds, target
    metric._report(kept, info=checked.info)
    sums = []
    while problems:
        scores, labels = problems.pop(0)
        sums.append(sharded_sums(shard, scores, labels, area=needs.area, ap=needs.ap, compact=compact))
        del scores, labels
    return sums


def compute_sharded_weighted(metric: _VarlenMetric, checked: CheckedIn) -> list[WeightedRankSums]:
    """As :func:`compute_sharded` with sample weights: the global weighted sums of every binary problem.

    The weights travel with the scores (a third column of the all-to-all); each rank counts its range of scores
    with :func:`~torchmetrics_varlen.functional._weighted.weighted_counts` and places it by the weights of the ranges
    below (float64 sums in rank order: within ~1e-16 of one process, the same bits on every rank).
    """
    comm = comm_device(checked.ticket.layout.group, metric.num_samples.device)
    shard = Shard(checked.ticket, comm)
    dtype = checked.layouts["preds"][0]
    kept = None
    names = ("preds", "target", "weight")
    rows = {name: torch.cat(metric._pieces(name)).to(comm) for name in names}
    rows["preds"] = rows["preds"].to(dtype)
    if "ids" in {r.modes["dedup"] for r in checked.ranks}:
        rows.update({name: torch.cat(metric._pieces(name)).to(comm) for name in ("ids", "ids_sub")})
        routed = route_rows_by_id(shard, rows, rows["ids"])
        keep, kept = _dedup(shard, routed)
        preds, target, weight = (routed[name][keep] for name in names)
    else:
        preds, target, weight = rows["preds"], rows["target"], rows["weight"]
    metric._report(kept, info=checked.info)
    split = Split(metric.task, metric._split.average)
    return [_weighted_range_sums(shard, s, p, w) for s, p, w in weighted_columns(split, preds, target, weight)]


def _weighted_range_sums(shard: Shard, scores: Tensor, positives: Tensor, weight: Tensor) -> WeightedRankSums:
    """Global :class:`WeightedRankSums` of one weighted binary problem spread over the ranks (every rank calls)."""
    world, rank = shard.world, shard.rank
    n = scores.numel()
    sorted_scores, order = torch.sort(scores)
    sorted_pos, sorted_w = positives[order], weight[order].to(torch.float64)
    del order
    per_rank = _samples_per_rank(world)
    at = _sample_at(n, per_rank, scores.device)
    splitters = _splitters(shard.all_gather(_sample(n, sorted_scores[at], per_rank)), world)
    edges = [0, *torch.searchsorted(sorted_scores, splitters.to(scores.dtype)).tolist(), n]
    sent = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
    mine_scores, matrix = shard.route(sorted_scores, sent)
    recv_rows = matrix[:, rank].tolist()
    mine_pos = shard.all_to_all(sorted_pos.to(torch.uint8), sent, recv_rows).to(torch.bool)
    mine_w = shard.all_to_all(sorted_w, sent, recv_rows)
    counts = weighted_counts(mine_scores, mine_pos, mine_w, with_scores=False)
    w_pos = float(counts.pos_le[-1]) if counts.pos_le.numel() else 0.0
    w_all = float(counts.all_le[-1]) if counts.all_le.numel() else 0.0
    totals = shard.all_gather(torch.tensor([w_pos, w_all], dtype=torch.float64, device=shard.device)).cpu().tolist()
    pos_before = sum(t[0] for t in totals[:rank])
    all_before = sum(t[1] for t in totals[:rank])
    total = (sum(t[0] for t in totals), sum(t[1] for t in totals))
    part = weighted_rank_sums(counts, pos_before=pos_before, all_before=all_before, totals=total)
    parts = shard.all_gather(torch.tensor(list(part), dtype=torch.float64, device=shard.device)).cpu().tolist()
    return combine_weighted([WeightedRankSums(*p) for p in parts])


def _dedup(shard: Shard, rows: dict[str, Tensor]) -> tuple[Tensor, int]:
    """The rows to keep among those routed here (one per id) and the global number kept; a conflict raises on
    every rank.
    """
    error: ValueError | None = None
    try:
        keep = dedup_by_id(rows["ids"], rows["ids_sub"], rows["target"], rows["preds"])
    except ValueError as err:
        error, keep = err, torch.zeros(0, dtype=torch.int64, device=shard.device)
    kept_ids = rows["ids"][keep]
    kept = int(kept_ids.numel() and 1 + torch.count_nonzero(kept_ids[1:] != kept_ids[:-1]))
    flags = shard.all_gather(torch.tensor([error is not None, kept], dtype=torch.int64, device=shard.device))
    bad = [r for r, flag in enumerate(flags[:, 0].tolist()) if flag]
    if error is not None:
        raise error
    if bad:
        msg = (
            f"{shard.what}: rank {bad[0]} found a sample id seen twice with different targets (its error names"
            " the id). Copies of one id must be the same sample: check that `sample_ids` are global dataset"
            " indices, not per-rank or per-batch positions."
        )
        raise ValueError(msg)
    return keep, int(flags[:, 1].sum())
