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
from torchmetrics_varlen._dist.shard import Shard, route_rows_by_id, sharded_sums
from torchmetrics_varlen.functional._count import Pieces, split_rows
from torchmetrics_varlen.functional._ranking import RankSums
from torchmetrics_varlen.functional._reduce import SumsNeeded

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
        (preds, target), kept = _dedup(shard, route_rows_by_id(shard, rows, rows["ids"]))
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


def _dedup(shard: Shard, rows: dict[str, Tensor]) -> tuple[tuple[Tensor, Tensor], int]:
    """Drop duplicate ids among the rows routed here; a conflict raises on every rank."""
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
    return (rows["preds"][keep], rows["target"][keep]), int(flags[:, 1].sum())
