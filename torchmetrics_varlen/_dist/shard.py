"""Sharded exact compute: a sample sort over ``all_to_all``, so that no rank ever holds every prediction.

Per binary problem, after the usual check-in:

1. every rank sorts its own scores and all-gathers a fixed number of evenly spaced samples of them (with its count);
2. every rank picks the same ``W - 1`` splitters (weighted quantiles of the samples): rank ``r`` will own the scores
   in ``[s_r, s_{r+1})``, so all copies of one score land on one rank;
3. every rank all-gathers how many samples (and positives) it sends to each rank: the ``W x W`` matrix gives every
   rank the totals and how many samples / positives lie below its range;
4. one ``all_to_all_single`` moves the (already sorted, hence contiguous) keys to their owners, which merge them;
5. each rank streams the AUROC / AP sums over its range (:func:`~torchmetrics_varlen.functional._ranking.rank_sums`
   with the offsets of step 3) and the ``W`` partial sums are all-gathered and added in rank order.

The area is an exact integer, so AUROC is the single-process value bit for bit; AP is a float64 sum taken in a
different order (relative difference ~1e-16). Duplicate ids are first routed to ``id % W`` with one more
``all_to_all``, so every copy of a sample meets its twins on one rank. Data stays on the communication device
(CUDA for NCCL); the store-based check-in runs before, as for every sync.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_varlen._dist.exchange import all_gather_fixed, wait
from torchmetrics_varlen._dist.guard import Ticket
from torchmetrics_varlen.functional._ranking import RankSums, combine, rank_sums
from torchmetrics_varlen.functional._sort import (
    Column,
    SortedKeys,
    ascending_counts,
    count_positives,
    decode,
    encode,
    packable,
    sort_keys_,
)


class Shard:
    """The collectives of one sharded compute: one sync's ticket (group, deadline, names for errors) and device."""

    def __init__(self, ticket: Ticket, device: torch.device) -> None:
        self.ticket = ticket
        self.group = ticket.layout.group
        self.what = ticket.what
        self.device = device
        self.rank = ticket.layout.rank
        self.world = ticket.layout.world

    def all_gather(self, local: Tensor) -> Tensor:
        """``(W, *local.shape)``: every rank's ``local`` (same shape everywhere)."""
        return all_gather_fixed(local, self.ticket, "a sharded all-gather")

    def all_to_all(self, send: Tensor, send_rows: list[int], recv_rows: list[int]) -> Tensor:
        """Rows ``send_rows[r]`` of ``send`` (in order) go to rank ``r``; returns what every rank sent here."""
        # Moved as raw bytes: gloo has no int16 (compact keys of 16-bit scores), and bytes are bytes.
        row = math.prod(send.shape[1:]) * send.element_size()
        recv = torch.empty((sum(recv_rows), *send.shape[1:]), dtype=send.dtype, device=send.device)
        work = dist.all_to_all_single(
            recv.view(-1).view(torch.uint8),
            _bytes(send),
            output_split_sizes=[n * row for n in recv_rows],
            input_split_sizes=[n * row for n in send_rows],
            group=self.group,
            async_op=True,
        )
        wait(work, self.ticket, "a sharded all-to-all")
        return recv

    def route(self, send: Tensor, send_rows: list[int]) -> tuple[Tensor, Tensor]:
        """All-to-all rows whose destinations are contiguous; returns (received, ``W x W`` row matrix)."""
        matrix = self.all_gather(torch.tensor(send_rows, dtype=torch.int64, device=self.device))
        recv_rows = matrix[:, self.rank].tolist()
        return self.all_to_all(send, send_rows, recv_rows), matrix


def _bytes(tensor: Tensor) -> Tensor:
    """``tensor``'s elements in row-major order as bytes: a view when it is laid out so, else one copy.

    ``contiguous()`` alone is not enough: a tensor of one row (or none) counts as contiguous whatever its strides
    (a column ``scores[:, c]`` of one sample), and viewing that as bytes fails.
    """
    flat = tensor.reshape(-1)
    if flat.numel() and flat.stride(0) != 1:
        flat = torch.empty(flat.shape, dtype=flat.dtype, device=flat.device).copy_(flat)
    if not flat.numel():
        flat = torch.empty(0, dtype=flat.dtype, device=flat.device)
    return flat.view(torch.uint8)


def _samples_per_rank(world: int) -> int:
    """Samples each rank contributes to the splitters: more per rank for few ranks, a bounded total for many."""
    return max(16, min(1024, 65536 // world))


def _sample_at(n: int, count: int, device: torch.device) -> Tensor:
    """Positions of ``min(count, n)`` evenly spaced elements of a vector of length ``n``."""
    taken = min(count, n)
    at = (torch.arange(taken, device=device, dtype=torch.float64) + 0.5) * (n / max(taken, 1))
    return at.to(torch.int64)


def _sample(n: int, values: Tensor, count: int) -> Tensor:
    """``[n, values..., 0...]`` float64 of length ``count + 1``."""
    out = torch.zeros(count + 1, dtype=torch.float64, device=values.device)
    out[0] = n
    out[1 : values.numel() + 1] = values.double()
    return out


def _splitters(gathered: Tensor, world: int) -> Tensor:
    """``W - 1`` increasing score bounds that split the samples' weight (what each stands for) into ``W`` parts."""
    values, weights = [], []
    for row in gathered:
        n = int(row[0])
        taken = min(n, row.numel() - 1)
        if taken:
            values.append(row[1 : taken + 1])
            weights.append(torch.full((taken,), n / taken, dtype=torch.float64, device=row.device))
    if not values:
        return gathered.new_zeros(world - 1)
    value, order = torch.sort(torch.cat(values))
    cumulative = torch.cumsum(torch.cat(weights)[order], 0)
    targets = cumulative[-1] * torch.arange(1, world, dtype=torch.float64, device=value.device) / world
    at = torch.searchsorted(cumulative, targets).clamp_(max=value.numel() - 1)
    return value[at]


def _positives_per_slice(labels: Tensor, edges: list[int]) -> list[int]:
    return [int(torch.count_nonzero(labels[a:b])) for a, b in zip(edges[:-1], edges[1:], strict=True)]


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
    world, rank = shard.world, shard.rank
    per_rank = _samples_per_rank(world)
    keys: Tensor | None = None
    pieces = [scores] if isinstance(scores, Tensor) else scores
    dtype, device = pieces[0].dtype, pieces[0].device
    n = sum(p.numel() for p in pieces)
    at = _sample_at(n, per_rank, device)
    if packable(dtype):
        keys = sort_keys_(encode(scores, labels, compact))
        local_sample = _sample(n, decode(keys[at].bitwise_right_shift(1), dtype, compact), per_rank)
    else:
        scores = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
        labels = labels if isinstance(labels, Tensor) else torch.cat(labels)
        sorted_scores, order = torch.sort(scores)
        sorted_labels = labels[order]
        del order
        local_sample = _sample(n, sorted_scores[at], per_rank)
    splitters = _splitters(shard.all_gather(local_sample), world)
    if keys is not None:
        bounds = encode(splitters.to(dtype), torch.zeros_like(splitters, dtype=torch.bool), compact)
        edges = [0, *torch.searchsorted(keys, bounds).tolist(), n]
        sent_pos = [count_positives(keys[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    else:
        edges = [0, *torch.searchsorted(sorted_scores, splitters.to(dtype)).tolist(), n]
        sent_pos = _positives_per_slice(sorted_labels, edges)
    sent = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
    matrix = shard.all_gather(torch.tensor(sent + sent_pos, dtype=torch.int64, device=shard.device))
    per_range, pos_per_range = matrix[:, :world].sum(0).tolist(), matrix[:, world:].sum(0).tolist()
    recv_rows = matrix[:, rank].tolist()
    col: Column
    if keys is not None:
        mine = shard.all_to_all(keys, sent, recv_rows)
        del keys
        # W sorted runs: a merge (NumPy's stable sort) on CPU.
        col = SortedKeys(sort_keys_(mine, runs=True), dtype, pos_per_range[rank], compact)
    else:
        mine_scores = shard.all_to_all(sorted_scores, sent, recv_rows)
        mine_labels = shard.all_to_all(sorted_labels.to(torch.uint8), sent, recv_rows)
        del sorted_scores, sorted_labels
        col = ascending_counts(mine_scores, mine_labels.to(torch.bool))
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


def route_rows_by_id(shard: Shard, rows: dict[str, Tensor], ids: Tensor) -> dict[str, Tensor]:
    """Send every row to rank ``id % W`` (one all-to-all of the rows packed as bytes); ``rows`` includes ``ids``."""
    world = shard.world
    dest = torch.remainder(ids, world)
    order = torch.sort(dest, stable=True).indices
    sent = torch.bincount(dest, minlength=world).tolist()
    names = sorted(rows)
    columns = [rows[n][order].reshape(order.numel(), math.prod(rows[n].shape[1:])) for n in names]
    widths = [c.shape[1] * c.element_size() for c in columns]
    packed = torch.cat([_bytes(c).view(order.numel(), width) for c, width in zip(columns, widths, strict=True)], 1)
    recv, _ = shard.route(packed, sent)
    out: dict[str, Tensor] = {}
    offset = 0
    for name, column, width in zip(names, columns, widths, strict=True):
        # A fresh copy of the column's bytes: a slice of one row may start at any byte, too far for a view.
        piece = recv[:, offset : offset + width].clone(memory_format=torch.contiguous_format).view(column.dtype)
        out[name] = piece.reshape(recv.shape[0], *rows[name].shape[1:])
        offset += width
    return out
