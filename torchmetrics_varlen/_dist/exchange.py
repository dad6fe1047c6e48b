"""One guarded sync: a metadata check-in, then one data exchange for any number of states.

Concatenated ("cat") states of every rank are packed into one byte buffer per rank (each state 8-byte aligned,
floats promoted to the dtype common to all ranks) and moved together: on gloo one broadcast per rank that has rows,
all in flight at once, each rank packing straight into its own slot of the receive buffer; on NCCL one uneven
all-gather; to one rank (``dst``) point-to-point sends straight into that rank's buffer. Summed states are moved
with one all-reduce. The number of collectives never depends on the number of states. Nothing is pickled: only
raw tensor bytes travel, on the communication device of the group (CUDA for NCCL, the tensors' own device
otherwise).
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_varlen._dist.errors import MetricSyncError
from torchmetrics_varlen._dist.guard import check_consistent, check_in, group_layout

_ALIGN = 8


@dataclass(frozen=True)
class Gathered:
    """What one sync returns: the combined states and how many rows each rank sent (per cat state).

    ``cat`` holds one tensor per cat state, or, with ``concat=False``, one list of per-rank pieces (views of the
    received buffer, no copy; ranks without rows left out, at least one piece).
    """

    cat: dict[str, Tensor | list[Tensor]]
    summed: dict[str, Tensor]
    rows_per_rank: dict[str, list[int]]
    info: list[dict[str, Any]]


def _family(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "float" if dtype.is_floating_point else "int"


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."))
    assert isinstance(dtype, torch.dtype)
    return dtype


def comm_device(group: Any, fallback: torch.device) -> torch.device:
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend and fallback.type != "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return fallback


def wait(work: Any, timeout: float | None, what: str) -> None:
    try:
        if timeout is None:
            work.wait()
        else:
            work.wait(datetime.timedelta(seconds=timeout))
    except RuntimeError as err:
        msg = (
            f"{what}: the data exchange did not complete ({err}). A peer rank probably died or stopped"
            " responding after the check-in."
        )
        raise MetricSyncError(msg) from err


def _describe_pieces(pieces: list[Tensor]) -> list[Any]:
    """``[dtype, trailing shape, rows]`` of one rank's state, given as the list of its stored batches."""
    dtype = pieces[0].dtype
    for piece in pieces[1:]:
        dtype = torch.promote_types(dtype, piece.dtype)
    shaped = next((p for p in pieces if p.shape[0]), pieces[0])
    return [str(dtype), list(shaped.shape[1:]), sum(int(p.shape[0]) for p in pieces)]


def sync_states(
    cat: dict[str, list[Tensor]],
    summed: dict[str, Tensor],
    *,
    config: dict[str, Any],
    group: Any,
    timeout: float | None,
    what: str,
    fix: str,
    device: torch.device,
    info: dict[str, Any] | None = None,
    unset_ok: dict[str, Any] | None = None,
    dst: int | None = None,
    concat: bool = True,
) -> Gathered:
    """Check in, verify that all ranks agree, and move every state: one exchange per state kind (cat, summed).

    ``cat`` states are given as lists of pieces (the stored batches, packed straight into the send buffer without a
    concatenation first; at least one piece, possibly empty). They may have any number of rows (including zero)
    per rank and must agree across ranks on their trailing shape and dtype family (ranks without rows are
    wildcards). ``summed`` tensors must agree exactly.
    ``info`` (small JSON values, e.g. per-rank counters) travels with the check-in and comes back per rank;
    ``unset_ok`` values must agree across the ranks where they are not ``None``. With ``dst`` (a rank of the
    group) only that rank receives the cat states; the others get them with zero rows and never hold more than
    their own share. ``concat=False`` returns the cat states as per-rank pieces (see :class:`Gathered`).
    """
    checked = check_in_states(
        cat, summed, config=config, group=group, timeout=timeout, what=what, fix=fix, info=info, unset_ok=unset_ok
    )
    rank, world, global_ranks = checked.rank, checked.world, checked.global_ranks
    records, layouts = checked.records, checked.layouts
    comm = comm_device(group, device)
    rows = {name: [r["cat"][name][2] for r in records] for name in cat}
    gathered = _gather_packed(cat, layouts, rows, rank, world, global_ranks, group, comm, timeout, what, dst)
    reduced = _reduce_summed(summed, group, comm, timeout, what)
    moved: dict[str, Tensor | list[Tensor]] = {
        k: [p.to(device) for p in v] if not concat else v[0].to(device) if len(v) == 1 else torch.cat(v).to(device)
        for k, v in gathered.items()
    }
    return Gathered(
        cat=moved,
        summed={k: v.to(device) for k, v in reduced.items()},
        rows_per_rank=rows,
        info=[r["info"] for r in records],
    )


@dataclass(frozen=True)
class CheckedIn:
    """What every rank knows after the check-in: every rank's record and the agreed layout of each cat state."""

    rank: int
    world: int
    global_ranks: list[int]
    records: list[dict[str, Any]]
    layouts: dict[str, tuple[torch.dtype, list[int]]]


def check_in_states(
    cat: dict[str, list[Tensor]],
    summed: dict[str, Tensor],
    *,
    config: dict[str, Any],
    group: Any,
    timeout: float | None,
    what: str,
    fix: str,
    info: dict[str, Any] | None = None,
    unset_ok: dict[str, Any] | None = None,
) -> CheckedIn:
    """The check-in half of :func:`sync_states`: publish the metadata, wait for every rank, verify agreement."""
    rank, world, global_ranks = group_layout(group)
    record = {
        "info": info or {},
        "unset_ok": unset_ok or {},
        "config": config,
        "cat_states": sorted(cat),
        "summed_states": {k: [str(v.dtype), list(v.shape)] for k, v in sorted(summed.items())},
        "cat": {k: _describe_pieces(v) for k, v in sorted(cat.items())},
    }
    records = check_in(record, group=group, timeout=timeout, what=what, fix=fix)
    check_consistent(records, ["config", "cat_states", "summed_states"], what, global_ranks)
    for key in sorted(unset_ok or {}):
        check_consistent(records, [key], what, global_ranks, field="unset_ok")
    layouts = {name: _agree_on_layout(name, [r["cat"][name] for r in records], what, global_ranks) for name in cat}
    return CheckedIn(rank, world, global_ranks, records, layouts)


def _agree_on_layout(
    name: str, entries: list[list[Any]], what: str, global_ranks: list[int]
) -> tuple[torch.dtype, list[int]]:
    """Common dtype and trailing shape of one cat state; ranks without rows do not constrain either."""
    present = [e for e in entries if e[2] > 0] or entries[:1]
    shapes = {tuple(e[1]) for e in present}
    families = {_family(_dtype(e[0])) for e in present}
    if len(shapes) > 1 or len(families) > 1:
        rows = "\n".join(
            f"  rank {r} (global {global_ranks[r]}): dtype {e[0]}, trailing shape {tuple(e[1])}, {e[2]} rows"
            for r, e in enumerate(entries)
        )
        msg = (
            f"{what}: the ranks' `{name}` tensors cannot be concatenated: they differ in"
            f" {'trailing shape' if len(shapes) > 1 else 'dtype family'}:\n{rows}\n"
            "Every rank must produce the same kind of output (same trailing dimensions, all floating point or all"
            " integer)."
        )
        raise MetricSyncError(msg)
    dtype = _dtype(present[0][0])
    for e in present[1:]:
        dtype = torch.promote_types(dtype, _dtype(e[0]))
    return dtype, list(present[0][1])


def _nbytes(rows: int, trailing: list[int], dtype: torch.dtype) -> int:
    raw = rows * math.prod(trailing) * dtype.itemsize
    return -(-raw // _ALIGN) * _ALIGN


def _empty_states(
    names: list[str], layouts: dict[str, tuple[torch.dtype, list[int]]], device: torch.device
) -> dict[str, list[Tensor]]:
    return {n: [torch.empty((0, *layouts[n][1]), dtype=layouts[n][0], device=device)] for n in names}


def _gather_packed(
    cat: dict[str, list[Tensor]],
    layouts: dict[str, tuple[torch.dtype, list[int]]],
    rows: dict[str, list[int]],
    rank: int,
    world: int,
    global_ranks: list[int],
    group: Any,
    comm: torch.device,
    timeout: float | None,
    what: str,
    dst: int | None = None,
) -> dict[str, list[Tensor]]:
    """Every rank's rows of every cat state, as per-rank pieces (views of the received buffer)."""
    names = sorted(cat)
    sizes = [sum(_nbytes(rows[n][r], layouts[n][1], layouts[n][0]) for n in names) for r in range(world)]
    total = sum(sizes)
    if total == 0:
        return _empty_states(names, layouts, comm)
    nccl = "nccl" in str(dist.get_backend(group)).lower()
    bounds = [sum(sizes[:r]) for r in range(world + 1)]
    receives = dst is None or rank == dst
    out = torch.empty(total if receives else 0, dtype=torch.uint8, device=comm)
    parts = [out[bounds[r] : bounds[r + 1]] for r in range(world)] if receives else []
    # gloo's broadcasts and the receiving rank of a gather pack straight into their own slot of the receive buffer;
    # NCCL's all-gather and a rank that only sends pack into a send buffer of their own. (Uninitialised on purpose:
    # alignment bytes are never read back.)
    separate = not receives or (nccl and dst is None)
    mine = torch.empty(sizes[rank], dtype=torch.uint8, device=comm) if separate else parts[rank]
    _pack(cat, names, layouts, {n: rows[n][rank] for n in names}, mine)
    if dst is not None:
        # Gather to one rank, point to point, straight into the slots of one buffer (gloo's gather would pad every
        # rank to the widest and stage a second full-size copy).
        if rank == dst:
            ops = [
                dist.P2POp(dist.irecv, parts[r], global_ranks[r], group) for r in range(world) if r != rank and sizes[r]
            ]
        else:
            ops = [dist.P2POp(dist.isend, mine, global_ranks[dst], group)] if sizes[rank] else []
        for work in dist.batch_isend_irecv(ops) if ops else []:
            wait(work, timeout, what)
        if rank != dst:
            return _empty_states(names, layouts, comm)
    elif nccl:
        wait(dist.all_gather(parts, mine, group=group, async_op=True), timeout, what)
    else:
        # gloo: one broadcast per rank with rows, all in flight together. Unlike gloo's all-gather (equal sizes only,
        # and the result staged in a second full-size buffer) this moves uneven shards without padding or extra copy.
        works = [
            dist.broadcast(parts[r], src=global_ranks[r], group=group, async_op=True) for r in range(world) if sizes[r]
        ]
        for work in works:
            wait(work, timeout, what)
    return _unpack(parts, names, layouts, rows)


def _pack(
    cat: dict[str, list[Tensor]],
    names: list[str],
    layouts: dict[str, tuple[torch.dtype, list[int]]],
    rows: dict[str, int],
    buf: Tensor,
) -> None:
    """Copy this rank's stored batches of every state, in name order and 8-byte aligned, into the byte buffer."""
    offset = 0
    for n in names:
        start = offset
        for piece in cat[n]:
            flat = piece.to(device=buf.device, dtype=layouts[n][0]).reshape(-1)
            nbytes = flat.numel() * flat.element_size()
            buf[start : start + nbytes].copy_(flat.view(torch.uint8))
            start += nbytes
        offset += _nbytes(rows[n], layouts[n][1], layouts[n][0])


def _unpack(
    parts: list[Tensor], names: list[str], layouts: dict[str, tuple[torch.dtype, list[int]]], rows: dict[str, list[int]]
) -> dict[str, list[Tensor]]:
    pieces: dict[str, list[Tensor]] = {n: [] for n in names}
    for r, part in enumerate(parts):
        offset = 0
        for n in names:
            dtype, trailing = layouts[n]
            count = rows[n][r] * math.prod(trailing)
            chunk = part[offset : offset + count * dtype.itemsize]
            if rows[n][r] or (r == len(parts) - 1 and not pieces[n]):
                pieces[n].append(chunk.view(dtype).reshape(rows[n][r], *trailing))
            offset += _nbytes(rows[n][r], trailing, dtype)
    return pieces


def _reduce_summed(
    summed: dict[str, Tensor], group: Any, comm: torch.device, timeout: float | None, what: str
) -> dict[str, Tensor]:
    if not summed:
        return {}
    names = sorted(summed)
    kinds = {summed[n].is_floating_point() for n in names}
    if len(kinds) > 1:
        msg = f"{what}: summed states must be all integer or all floating point."
        raise MetricSyncError(msg)
    wire = torch.float64 if kinds.pop() else torch.int64
    flat = torch.cat([summed[n].to(device=comm, dtype=wire).reshape(-1) for n in names])
    wait(dist.all_reduce(flat, group=group, async_op=True), timeout, what)
    out: dict[str, Tensor] = {}
    offset = 0
    for n in names:
        numel = summed[n].numel()
        out[n] = flat[offset : offset + numel].reshape(summed[n].shape).to(summed[n].dtype)
        offset += numel
    return out
