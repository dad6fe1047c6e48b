"""Transport of the sharded compute: a sample sort over ``all_to_all``, so that no rank ever holds every prediction.

This module moves rows and knows no metric math: the caller (``_core/sharded.py``) passes each problem's
samples in as a :class:`SortedColumn` (its own sort, keys and counts) and does the per-range math on the
:class:`Range` it gets back. Per binary problem, after the usual check-in:

1. every rank sorts its own samples (the column) and all-gathers a fixed number of evenly spaced samples of their
   scores (with its count);
2. every rank picks the same ``W - 1`` splitters (weighted quantiles of the samples): rank ``r`` will own the scores
   in ``[s_r, s_{r+1})``, so all copies of one score land on one rank;
3. every rank all-gathers how many rows it sends to each rank, with the column's tallies per slice (positives): the
   ``W x W`` matrix gives every rank the totals and how many rows / positives lie below its range;
4. one ``all_to_all_single`` per moved tensor sends the (already sorted, hence contiguous) rows to their owners;
5. the caller sums over its range (with the offsets of step 3) and all-gathers the ``W`` partial sums.

Host reads: the samples' counts, the edges and the matrix once each (a column may count its tallies on the device),
whatever the number of rows.

Duplicate ids are first routed to ``id % W`` with one more ``all_to_all`` (:func:`route_rows_by_id`), so every copy
of a sample meets its twins on one rank. Data stays on the communication device (CUDA for NCCL); the store-based
check-in runs before, as for every sync.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from torchmetrics_varlen._dist import collectives
from torchmetrics_varlen._dist.checkin import Ticket
from torchmetrics_varlen._dist.errors import MetricSyncError
from torchmetrics_varlen._dist.transport import all_gather_fixed, wait


class Shard:
    """The collectives of one sharded compute: one sync's ticket (group, deadline, names for errors) and device."""

    def __init__(self, ticket: Ticket, device: torch.device) -> None:
        self.ticket = ticket
        self.group = ticket.layout.group
        self.what = ticket.what
        self.device = device
        self.rank = ticket.layout.rank
        self.world = ticket.layout.world
        self.problem = 0  # sample sorts so far (each names its failure notes)

    def all_gather(self, local: Tensor) -> Tensor:
        """``(W, *local.shape)``: every rank's ``local`` (same shape everywhere)."""
        return all_gather_fixed(local, self.ticket, "a sharded all-gather")

    def all_to_all(self, send: Tensor, send_rows: list[int], recv_rows: list[int]) -> Tensor:
        """Rows ``send_rows[r]`` of ``send`` (in order) go to rank ``r``; returns what every rank sent here."""
        # Moved as raw bytes: gloo has no int16 (compact keys of 16-bit scores), and bytes are bytes.
        row = math.prod(send.shape[1:]) * send.element_size()
        recv = torch.empty((sum(recv_rows), *send.shape[1:]), dtype=send.dtype, device=send.device)
        work = collectives.all_to_all(
            recv.view(-1).view(torch.uint8),
            _bytes(send),
            [n * row for n in recv_rows],
            [n * row for n in send_rows],
            self.group,
            self.ticket.timeout,
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


def _splitters(gathered: Tensor, counts: list[int], world: int) -> Tensor:
    """``W - 1`` increasing score bounds that split the samples' weight (what each stands for) into ``W`` parts.

    ``counts`` are the ranks' row counts (``gathered[:, 0]``, read once): no host read per rank.
    """
    values, weights = [], []
    for row, n in zip(gathered, counts, strict=True):
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


class SortedColumn(Protocol):
    """One rank's samples of one problem, sorted by score: what the caller's math gives the sample sort."""

    rows: int
    device: torch.device

    def samples(self, at: Tensor) -> Tensor:
        """The scores at the sorted positions ``at`` (the splitters' candidates)."""
        ...

    def edges(self, splitters: Tensor) -> list[int]:
        """``[0, ..., rows]``: where each of the ``W`` slices (scores below each splitter, then above) begins."""
        ...

    def tallies(self, edges: list[int]) -> list[int] | Tensor:
        """Integers per slice that travel with the row counts (e.g. positives), the same length on every rank: a
        list, or a 1-D tensor on the communication device (counted there: no host read on the device path).
        """
        ...

    def take(self) -> list[Tensor]:
        """The sorted tensors to move, aligned by row; the column lets go of them (moved one at a time)."""
        ...


@dataclass(frozen=True)
class Range:
    """What the sample sort gives one rank: its range of each moved tensor (the ``W`` sorted runs in rank order)
    and the ``W x (W + W * k)`` matrix of rows, then tallies, that every rank sent to every rank (read to the host
    once: ``rows``).
    """

    moved: list[Tensor]
    matrix: Tensor
    rank: int
    world: int
    rows: list[list[int]]

    def per_range(self, tally: int | None = None) -> list[int]:
        """Rows (or, with ``tally``, that tally) of every rank's range, in rank order."""
        at = 0 if tally is None else self.world * (1 + tally)
        return [sum(row[at + r] for row in self.rows) for r in range(self.world)]

    def received(self) -> list[int]:
        """How many rows of this rank's range came from each rank: the lengths of its ``W`` sorted runs."""
        return [row[self.rank] for row in self.rows]


def sample_sort(shard: Shard, make_column: Callable[[], SortedColumn]) -> Range:
    """Move every rank's sorted rows of one problem to the rank that owns their score range (every rank calls).

    The column is made (this rank's sort, the step that can fail on the rank's own data) before the first
    collective. If it fails, the rank leaves the error in the store and still joins that all-gather, with a count of
    -1: every rank then leaves the sample sort at the same step, the failing one with its error, the others with a
    :class:`MetricSyncError` quoting it, and no collective is left waiting (the group stays usable).
    """
    world, rank = shard.world, shard.rank
    per_rank = _samples_per_rank(world)
    key = f"shard-error/{shard.problem}"
    shard.problem += 1
    try:
        column = make_column()
        n = column.rows
        at = _sample_at(n, per_rank, column.device)
        local = _sample(n, column.samples(at), per_rank).to(shard.device)
    except Exception as err:
        shard.ticket.extra_keys.append(f"{key}/{rank}")
        shard.ticket.set(f"{key}/{rank}", f"{type(err).__name__}: {err}")
        shard.all_gather(torch.full((per_rank + 1,), -1.0, dtype=torch.float64, device=shard.device))
        raise
    gathered = shard.all_gather(local)
    counts = [int(c) for c in gathered[:, 0].tolist()]  # one host read for every rank's count
    failed = [r for r in range(world) if counts[r] < 0]
    if failed:
        notes = [f"{shard.ticket.layout.describe(r)}: {shard.ticket.get(f'{key}/{r}').decode()}" for r in failed]
        msg = f"{shard.what}: the sharded computation failed on {'; '.join(notes)}"
        raise MetricSyncError(msg)
    splitters = _splitters(gathered, counts, world)
    edges = column.edges(splitters)
    sent = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
    tallies = column.tallies(edges)
    row = torch.tensor(sent if isinstance(tallies, Tensor) else sent + tallies, dtype=torch.int64)
    if isinstance(tallies, Tensor):  # counted on the device: joined there, read with the matrix
        row = torch.cat([row.to(shard.device), tallies.to(device=shard.device, dtype=torch.int64)])
    matrix = shard.all_gather(row.to(shard.device))
    rows = matrix.tolist()  # the one host read of the matrix
    recv_rows = [r[rank] for r in rows]
    sources, moved = column.take(), []
    while sources:
        moved.append(shard.all_to_all(sources.pop(0), sent, recv_rows))
    return Range(moved, matrix, rank, world, rows)


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
