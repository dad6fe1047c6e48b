"""The data half of a sync: pack, move and unpack the states, after the metadata all-gather (``metadata.py``).

The packed cat states (each state 16-byte aligned, in the sending rank's own dtype; the receivers promote to the
dtype common to all ranks) are moved together: on gloo one broadcast per rank that has rows, all in flight at once,
each rank packing straight into its own slot of the receive buffer; on NCCL one uneven all-gather; to one rank
(``dst``) point-to-point sends straight into that rank's buffer. Summed states are moved with one all-reduce. The
number of collectives never depends on the number of states. Every collective runs asynchronously and is waited for
with a deadline (:func:`wait`); a failure names the ranks that stopped responding. Nothing is pickled: only raw
tensor bytes travel, on the communication device of the group (CUDA for NCCL, the tensors' own device otherwise).
"""

from __future__ import annotations

import datetime
import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_varlen._dist import collectives
from torchmetrics_varlen._dist.checkin import Ticket
from torchmetrics_varlen._dist.errors import MetricSyncError
from torchmetrics_varlen._dist.group import comm_device, is_nccl
from torchmetrics_varlen._dist.records import CheckedIn, Gathered, StateLayout, nbytes
from torchmetrics_varlen._dist.works import keep


def wait(work: Any, ticket: Ticket, step: str) -> None:
    """Wait for one asynchronous collective, at most ``sync_timeout`` seconds; a failure names the silent ranks.

    The work object is kept until a later sync (``works.py``), so that gloo's worker thread never frees its tensors.
    """
    keep(work)
    try:
        if ticket.timeout is None:
            work.wait()
        else:
            work.wait(datetime.timedelta(seconds=ticket.timeout))
    except RuntimeError as err:
        raise ticket.failed(err, step) from err


def all_gather_fixed(local: Tensor, ticket: Ticket, step: str) -> Tensor:
    """``(W, *local.shape)``: every rank's ``local`` (the same shape on every rank), with the sync's deadline."""
    world, group = ticket.layout.world, ticket.layout.group
    out = torch.empty(world * local.numel(), dtype=local.dtype, device=local.device)
    wait(collectives.all_gather_into(out, local.contiguous().view(-1), group, ticket.timeout), ticket, step)
    return out.view(world, *local.shape)


def exchange_states(
    checked: CheckedIn,
    cat: dict[str, list[Tensor]],
    summed: dict[str, Tensor],
    *,
    device: torch.device,
    dst: int | None = None,
    concat: bool = True,
) -> Gathered:
    """The data half of a sync, after :func:`~torchmetrics_varlen._dist.metadata.check_in_states` returned ``checked``
    for these states (see :func:`~torchmetrics_varlen._dist.exchange.sync_states` for the arguments).
    """
    comm = comm_device(checked.ticket.layout.group, device)
    box = checked.outbox
    rows, box.rows = box.rows, None  # the exchange takes them: no reference outlives it
    flat, box.summed = box.summed, None
    try:
        if rows is None:  # checked in with pack=False: pack now
            rows = pack(cat, {n: checked.ranks[checked.ticket.layout.rank].states[n] for n in cat}, comm)
        gathered = _gather_packed(rows, sorted(cat), checked, comm, dst)
        reduced = _reduce_summed(summed, flat, checked, comm)
    except MetricSyncError:
        raise
    except Exception as err:  # a local failure (e.g. out of memory): tell the other ranks before raising
        raise checked.ticket.failed(err, "the data exchange") from err
    moved: dict[str, Tensor | list[Tensor]] = {
        k: [p.to(device) for p in v] if not concat else v[0].to(device) if len(v) == 1 else torch.cat(v).to(device)
        for k, v in gathered.items()
    }
    return Gathered(cat=moved, summed={k: v.to(device) for k, v in reduced.items()}, checked=checked)


def _empty_states(checked: CheckedIn, names: list[str], device: torch.device) -> dict[str, list[Tensor]]:
    return {
        n: [torch.empty((0, *checked.layouts[n].trailing), dtype=checked.layouts[n].dtype, device=device)]
        for n in names
    }


def write_into(region: Tensor, tensor: Tensor) -> None:
    """Copy ``tensor`` (any layout, device or dtype) into the byte slice ``region`` as ``region``'s dtype, in one
    copy: ``region`` is viewed as a contiguous tensor of ``tensor``'s shape, so strided, transposed, expanded and
    offset views are laid out row-major on the way, and a contiguous tensor is copied exactly once.
    """
    region.view(tensor.shape).copy_(tensor.detach())


def pack(cat: dict[str, list[Tensor]], layouts: dict[str, StateLayout], comm: torch.device) -> Tensor:
    """This rank's stored batches of every state, in name order and 16-byte aligned, in one byte buffer on ``comm``,
    each state in this rank's own dtype (``layouts``); uninitialised alignment bytes are never read back.
    """
    names = sorted(cat)
    sizes = [nbytes(layouts[n].rows, layouts[n].trailing, layouts[n].dtype) for n in names]
    buf = torch.empty(sum(sizes), dtype=torch.uint8, device=comm)
    offset = 0
    for n, size in zip(names, sizes, strict=True):
        dtype = layouts[n].dtype
        start = offset
        for piece in cat[n]:
            used = piece.numel() * dtype.itemsize
            if used:
                write_into(buf[start : start + used].view(dtype), piece)
            start += used
        offset += size
    return buf


def _gather_packed(
    mine: Tensor, names: list[str], checked: CheckedIn, comm: torch.device, dst: int | None
) -> dict[str, list[Tensor]]:
    """Every rank's rows of every cat state, as per-rank pieces (views of the received buffer), from ``mine`` (this
    rank's packed rows).
    """
    ticket = checked.ticket
    layout = ticket.layout
    rank, world, group = layout.rank, layout.world, layout.group
    rows = {n: checked.rows(n) for n in names}
    sizes = [
        sum(nbytes(rows[n][r], checked.layouts[n].trailing, checked.ranks[r].states[n].dtype) for n in names)
        for r in range(world)
    ]
    if sum(sizes) == 0:
        return _empty_states(checked, names, comm)
    receives = dst is None or rank == dst
    glob = layout.global_ranks
    if is_nccl(group) and dst is None:
        out = torch.empty(sum(sizes), dtype=torch.uint8, device=comm)
        bounds = [sum(sizes[:r]) for r in range(world + 1)]
        parts = [out[bounds[r] : bounds[r + 1]] for r in range(world)]
        wait(dist.all_gather(parts, mine, group=group, async_op=True), ticket, "the data all-gather")
        return _unpack(parts, names, checked, rows)
    # gloo, and a gather to one rank: this rank's own part is its send buffer; the others' parts are slots of one
    # receive buffer (no copy of the own rows, no padding).
    others = torch.empty(sum(sizes) - sizes[rank] if receives else 0, dtype=torch.uint8, device=comm)
    parts, at = [], 0
    for r in range(world):
        if r == rank:
            parts.append(mine)
        else:
            size = sizes[r] if receives else 0
            parts.append(others[at : at + size])
            at += size
    if dst is not None:
        # Gather to one rank, point to point, straight into the slots of one buffer (gloo's gather would pad every
        # rank to the widest and stage a second full-size copy).
        if rank == dst:
            ops = [dist.P2POp(dist.irecv, parts[r], glob[r], group) for r in range(world) if r != rank and sizes[r]]
        else:
            ops = [dist.P2POp(dist.isend, mine, glob[dst], group)] if sizes[rank] else []
        for work in [keep(w) for w in dist.batch_isend_irecv(ops)] if ops else []:
            wait(work, ticket, "the gather to one rank")
        if rank != dst:
            return _empty_states(checked, names, comm)
    else:
        # gloo: one broadcast per rank with rows, all in flight together. Unlike gloo's all-gather (equal sizes only,
        # and the result staged in a second full-size buffer) this moves uneven shards without padding or extra copy.
        works = [
            keep(collectives.broadcast(parts[r], r, group, glob[r], ticket.timeout)) for r in range(world) if sizes[r]
        ]
        for work in works:
            wait(work, ticket, "the data broadcasts")
    return _unpack(parts, names, checked, rows)


def _unpack(
    parts: list[Tensor], names: list[str], checked: CheckedIn, rows: dict[str, list[int]]
) -> dict[str, list[Tensor]]:
    """Per-rank pieces of every state: views of the parts in the sending rank's dtype, promoted to the agreed one."""
    pieces: dict[str, list[Tensor]] = {n: [] for n in names}
    for r, part in enumerate(parts):
        offset = 0
        for n in names:
            dtype, trailing = checked.layouts[n].dtype, checked.layouts[n].trailing
            sent = checked.ranks[r].states[n].dtype
            count = rows[n][r] * math.prod(trailing)
            if rows[n][r]:
                chunk = part[offset : offset + count * sent.itemsize].view(sent).view(rows[n][r], *trailing)
                pieces[n].append(chunk if sent == dtype else chunk.to(dtype))
                offset += nbytes(rows[n][r], trailing, sent)
    for n in names:
        if not pieces[n]:
            dtype, trailing = checked.layouts[n].dtype, checked.layouts[n].trailing
            pieces[n].append(torch.empty((0, *trailing), dtype=dtype, device=parts[0].device))
    return pieces


def flatten_summed(summed: dict[str, Tensor], comm: torch.device) -> Tensor | None:
    """The summed states in name order, flattened into one tensor of their wire dtype (float64 or int64)."""
    if not summed:
        return None
    names = sorted(summed)
    wire = torch.float64 if summed[names[0]].is_floating_point() else torch.int64
    return torch.cat([summed[n].to(device=comm, dtype=wire).reshape(-1) for n in names])


def _reduce_summed(
    summed: dict[str, Tensor], flat: Tensor | None, checked: CheckedIn, comm: torch.device
) -> dict[str, Tensor]:
    if not summed:
        return {}
    if flat is None:  # checked in with pack=False
        flat = flatten_summed(summed, comm)
        assert flat is not None
    names = sorted(summed)
    group = checked.ticket.layout.group
    work = collectives.all_reduce_sum(flat, group, checked.ticket.timeout)
    wait(work, checked.ticket, "the all-reduce of summed states")
    out: dict[str, Tensor] = {}
    offset = 0
    for n in names:
        numel = summed[n].numel()
        out[n] = flat[offset : offset + numel].reshape(summed[n].shape).to(summed[n].dtype)
        offset += numel
    return out
