"""One guarded sync: the check-in, one fixed-size metadata all-gather, then one data exchange for any number of states.

After the check-in (``guard.py``) every rank all-gathers one small int64 vector of the same length (the check-in
made sure the ranks agree on which states and counters exist): its counters, its modes, and for every
concatenated ("cat") state its rows, dtype and trailing shape. From these every rank derives the same layout.

The cat states of every rank are then packed into one byte buffer per rank (each state 8-byte aligned, floats
promoted to the dtype common to all ranks) and moved together: on gloo one broadcast per rank that has rows, all in
flight at once, each rank packing straight into its own slot of the receive buffer; on NCCL one uneven all-gather;
to one rank (``dst``) point-to-point sends straight into that rank's buffer. Summed states are moved with one
all-reduce. The number of collectives never depends on the number of states. Every collective runs asynchronously
and is waited for with a deadline; a failure names the ranks that stopped responding. Nothing is pickled: only raw
tensor bytes travel, on the communication device of the group (CUDA for NCCL, the tensors' own device otherwise).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from torchmetrics_varlen._dist.errors import MetricSyncError
from torchmetrics_varlen._dist.group import GroupLayout, comm_device, is_nccl
from torchmetrics_varlen._dist.guard import Ticket, check_in
from torchmetrics_varlen._dist.works import keep

_ALIGN = 8
_MAX_DIMS = 8  # trailing dimensions a cat state may have
# Dtypes by wire code (the position in this tuple).
_DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
)


@dataclass(frozen=True)
class SyncRequest:
    """Who syncs, and how to talk about it: the same on every rank for the same sync."""

    layout: GroupLayout
    identity: str
    config: dict[str, Any]
    timeout: float | None
    what: str
    fix: str
    epoch: int = 0  # resets of the metric so far: syncs of different epochs never pair
    version: int | None = None  # changes with the states within the epoch (None: every call syncs new states)


@dataclass(frozen=True)
class Mode:
    """A setting the ranks must agree on once they have one: ``value`` ``None`` (not decided yet) agrees with any."""

    value: str | None
    choices: tuple[str, ...]

    def code(self) -> int:
        return -1 if self.value is None else self.choices.index(self.value)


@dataclass(frozen=True)
class StateLayout:
    """One rank's cat state: element dtype, trailing shape (everything after dim 0) and number of rows."""

    dtype: torch.dtype
    trailing: tuple[int, ...]
    rows: int

    @classmethod
    def of(cls, pieces: list[Tensor]) -> StateLayout:
        """The layout of a state given as its stored batches (at least one, possibly empty)."""
        dtype = pieces[0].dtype
        for piece in pieces[1:]:
            dtype = torch.promote_types(dtype, piece.dtype)
        shaped = next((p for p in pieces if p.shape[0]), pieces[0])
        return cls(dtype, tuple(shaped.shape[1:]), sum(int(p.shape[0]) for p in pieces))

    def describe(self) -> str:
        return f"dtype {self.dtype}, trailing shape {self.trailing}, {self.rows} rows"


@dataclass(frozen=True)
class RankMeta:
    """What one rank reported in the metadata all-gather."""

    states: dict[str, StateLayout]
    info: dict[str, int]
    modes: dict[str, str | None]


@dataclass(frozen=True)
class CheckedIn:
    """What every rank knows after the check-in and the metadata all-gather (the same on every rank)."""

    ticket: Ticket
    ranks: list[RankMeta]
    layouts: dict[str, tuple[torch.dtype, tuple[int, ...]]] = field(default_factory=dict)

    @property
    def info(self) -> list[dict[str, int]]:
        """Every rank's counters, in rank order."""
        return [r.info for r in self.ranks]

    def rows(self, name: str) -> list[int]:
        """Rows of cat state ``name`` on every rank."""
        return [r.states[name].rows for r in self.ranks]


@dataclass(frozen=True)
class Gathered:
    """What one sync returns: the combined states and what every rank reported.

    ``cat`` holds one tensor per cat state, or, with ``concat=False``, one list of per-rank pieces (views of the
    received buffer, no copy; ranks without rows left out, at least one piece).
    """

    cat: dict[str, Tensor | list[Tensor]]
    summed: dict[str, Tensor]
    checked: CheckedIn


def _family(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "float" if dtype.is_floating_point else "int"


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
    gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    wait(gather_single(out, local.contiguous().view(-1), group=group, async_op=True), ticket, step)
    return out.view(world, *local.shape)


def check_in_states(
    request: SyncRequest,
    cat: dict[str, list[Tensor]],
    summed: dict[str, Tensor],
    *,
    device: torch.device,
    info: dict[str, int] | None = None,
    modes: dict[str, Mode] | None = None,
) -> CheckedIn:
    """The check-in and the metadata all-gather; verifies that the ranks' states can be combined.

    ``cat`` states are lists of pieces (stored batches; at least one, possibly empty). ``info`` (small integers,
    e.g. per-rank counters) comes back per rank; ``modes`` must agree across the ranks where they are set.

    Raises:
        MetricSyncError: On every rank, if a rank is missing, or the ranks' configurations, modes, dtype families
            or trailing shapes disagree.
    """
    info, modes = info or {}, modes or {}
    mine = {name: StateLayout.of(pieces) for name, pieces in sorted(cat.items())}
    too_deep = [n for n, s in mine.items() if len(s.trailing) > _MAX_DIMS]
    if too_deep:
        msg = f"{request.what}: states with more than {_MAX_DIMS} trailing dimensions cannot be synced: {too_deep}."
        raise ValueError(msg)
    agreed = {
        "config": request.config,
        "states": {
            "cat": sorted(cat),
            "summed": {k: [str(v.dtype), list(v.shape)] for k, v in sorted(summed.items())},
            "info": sorted(info),
            "modes": {k: list(m.choices) for k, m in sorted(modes.items())},
        },
    }
    text = json.dumps(agreed, sort_keys=True, default=str)
    signature = hashlib.sha1(text.encode()).hexdigest()
    ticket = check_in(
        request.layout,
        identity=request.identity,
        signature=signature,
        record=lambda: json.loads(text),
        timeout=request.timeout,
        what=request.what,
        fix=request.fix,
        epoch=request.epoch,
        version=request.version,
    )
    vector = [int(signature[:15], 16), *(info[k] for k in sorted(info)), *(modes[k].code() for k in sorted(modes))]
    for layout in mine.values():
        dims = [*layout.trailing, *([0] * (_MAX_DIMS - len(layout.trailing)))]
        vector += [layout.rows, _DTYPES.index(layout.dtype), len(layout.trailing), *dims]
    local = torch.tensor(vector, dtype=torch.int64, device=comm_device(request.layout.group, device))
    rows = all_gather_fixed(local, ticket, "the metadata all-gather").tolist()
    if len({r[0] for r in rows}) > 1:  # pragma: no cover - a 60-bit digest collision in the check-in
        msg = f"{request.what}: the ranks' configurations differ (their digests do)."
        raise MetricSyncError(msg)
    ranks = [_decode(r, sorted(info), modes, sorted(cat)) for r in rows]
    checked = CheckedIn(ticket, ranks)
    for name, mode in sorted(modes.items()):
        _agree_on_mode(name, [r.modes[name] for r in ranks], mode, checked)
    for name in sorted(cat):
        checked.layouts[name] = _agree_on_layout(name, [r.states[name] for r in ranks], checked)
    return checked


def _decode(row: list[int], info: list[str], modes: dict[str, Mode], names: list[str]) -> RankMeta:
    at = 1
    counters = dict(zip(info, row[at : at + len(info)], strict=True))
    at += len(info)
    settled = {}
    for key in sorted(modes):
        code = row[at]
        settled[key] = None if code < 0 else modes[key].choices[code]
        at += 1
    states = {}
    for name in names:
        rows, code, ndim = row[at : at + 3]
        states[name] = StateLayout(_DTYPES[code], tuple(row[at + 3 : at + 3 + ndim]), rows)
        at += 3 + _MAX_DIMS
    return RankMeta(states, counters, settled)


def _agree_on_mode(name: str, values: list[str | None], mode: Mode, checked: CheckedIn) -> None:
    decided = {v for v in values if v is not None}
    if len(decided) > 1:
        layout = checked.ticket.layout
        rows = "\n".join(f"  {layout.describe(r)}: {v}" for r, v in enumerate(values))
        msg = (
            f"{checked.ticket.what}: the ranks disagree on `{name}`, so their states cannot be combined:\n{rows}\n"
            "Construct the metric with the same arguments on every rank and feed it inputs of the same kind."
        )
        raise MetricSyncError(msg)


def _agree_on_layout(name: str, entries: list[StateLayout], checked: CheckedIn) -> tuple[torch.dtype, tuple[int, ...]]:
    """Common dtype and trailing shape of one cat state; ranks without rows do not constrain either."""
    present = [e for e in entries if e.rows > 0] or entries[:1]
    shapes = {e.trailing for e in present}
    families = {_family(e.dtype) for e in present}
    if len(shapes) > 1 or len(families) > 1:
        layout = checked.ticket.layout
        rows = "\n".join(f"  rank {r} (global {layout.global_ranks[r]}): {e.describe()}" for r, e in enumerate(entries))
        msg = (
            f"{checked.ticket.what}: the ranks' `{name}` tensors cannot be concatenated: they differ in"
            f" {'trailing shape' if len(shapes) > 1 else 'dtype family'}:\n{rows}\n"
            "Every rank must produce the same kind of output (same trailing dimensions, all floating point or all"
            " integer)."
        )
        raise MetricSyncError(msg)
    dtype = present[0].dtype
    for e in present[1:]:
        dtype = torch.promote_types(dtype, e.dtype)
    return dtype, present[0].trailing


def sync_states(
    request: SyncRequest,
    cat: dict[str, list[Tensor]],
    summed: dict[str, Tensor],
    *,
    device: torch.device,
    info: dict[str, int] | None = None,
    modes: dict[str, Mode] | None = None,
    dst: int | None = None,
    concat: bool = True,
) -> Gathered:
    """Check in, verify that all ranks agree, and move every state: one exchange per state kind (cat, summed).

    See :func:`check_in_states` for the arguments they share. ``summed`` tensors must agree exactly in shape and
    dtype. With ``dst`` (a rank of the group) only that rank receives the cat states; the others get them with
    zero rows and never hold more than their own share. ``concat=False`` returns the cat states as per-rank pieces
    (see :class:`Gathered`).
    """
    checked = check_in_states(request, cat, summed, device=device, info=info, modes=modes)
    return exchange_states(checked, cat, summed, device=device, dst=dst, concat=concat)


def exchange_states(
    checked: CheckedIn,
    cat: dict[str, list[Tensor]],
    summed: dict[str, Tensor],
    *,
    device: torch.device,
    dst: int | None = None,
    concat: bool = True,
) -> Gathered:
    """The data half of :func:`sync_states`, after :func:`check_in_states` returned ``checked`` for these states."""
    comm = comm_device(checked.ticket.layout.group, device)
    try:
        gathered = _gather_packed(cat, checked, comm, dst)
        reduced = _reduce_summed(summed, checked, comm)
    except MetricSyncError:
        raise
    except Exception as err:  # a local failure (e.g. out of memory): tell the other ranks before raising
        raise checked.ticket.failed(err, "the data exchange") from err
    moved: dict[str, Tensor | list[Tensor]] = {
        k: [p.to(device) for p in v] if not concat else v[0].to(device) if len(v) == 1 else torch.cat(v).to(device)
        for k, v in gathered.items()
    }
    return Gathered(cat=moved, summed={k: v.to(device) for k, v in reduced.items()}, checked=checked)


def _nbytes(rows: int, trailing: tuple[int, ...], dtype: torch.dtype) -> int:
    raw = rows * math.prod(trailing) * dtype.itemsize
    return -(-raw // _ALIGN) * _ALIGN


def _empty_states(checked: CheckedIn, names: list[str], device: torch.device) -> dict[str, list[Tensor]]:
    return {n: [torch.empty((0, *checked.layouts[n][1]), dtype=checked.layouts[n][0], device=device)] for n in names}


def _gather_packed(
    cat: dict[str, list[Tensor]], checked: CheckedIn, comm: torch.device, dst: int | None
) -> dict[str, list[Tensor]]:
    """Every rank's rows of every cat state, as per-rank pieces (views of the received buffer)."""
    ticket = checked.ticket
    layout = ticket.layout
    rank, world, group = layout.rank, layout.world, layout.group
    names = sorted(cat)
    rows = {n: checked.rows(n) for n in names}
    sizes = [
        sum(_nbytes(rows[n][r], checked.layouts[n][1], checked.layouts[n][0]) for n in names) for r in range(world)
    ]
    total = sum(sizes)
    if total == 0:
        return _empty_states(checked, names, comm)
    nccl = is_nccl(group)
    bounds = [sum(sizes[:r]) for r in range(world + 1)]
    receives = dst is None or rank == dst
    out = torch.empty(total if receives else 0, dtype=torch.uint8, device=comm)
    parts = [out[bounds[r] : bounds[r + 1]] for r in range(world)] if receives else []
    # gloo's broadcasts and the receiving rank of a gather pack straight into their own slot of the receive buffer;
    # NCCL's all-gather and a rank that only sends pack into a send buffer of their own. (Uninitialised on purpose:
    # alignment bytes are never read back.)
    separate = not receives or (nccl and dst is None)
    mine = torch.empty(sizes[rank], dtype=torch.uint8, device=comm) if separate else parts[rank]
    _pack(cat, names, checked, mine)
    if dst is not None:
        # Gather to one rank, point to point, straight into the slots of one buffer (gloo's gather would pad every
        # rank to the widest and stage a second full-size copy).
        glob = layout.global_ranks
        if rank == dst:
            ops = [dist.P2POp(dist.irecv, parts[r], glob[r], group) for r in range(world) if r != rank and sizes[r]]
        else:
            ops = [dist.P2POp(dist.isend, mine, glob[dst], group)] if sizes[rank] else []
        for work in [keep(w) for w in dist.batch_isend_irecv(ops)] if ops else []:
            wait(work, ticket, "the gather to one rank")
        if rank != dst:
            return _empty_states(checked, names, comm)
    elif nccl:
        wait(dist.all_gather(parts, mine, group=group, async_op=True), ticket, "the data all-gather")
    else:
        # gloo: one broadcast per rank with rows, all in flight together. Unlike gloo's all-gather (equal sizes only,
        # and the result staged in a second full-size buffer) this moves uneven shards without padding or extra copy.
        glob = layout.global_ranks
        works = [
            keep(dist.broadcast(parts[r], src=glob[r], group=group, async_op=True)) for r in range(world) if sizes[r]
        ]
        for work in works:
            wait(work, ticket, "the data broadcasts")
    return _unpack(parts, names, checked, rows)


def _pack(cat: dict[str, list[Tensor]], names: list[str], checked: CheckedIn, buf: Tensor) -> None:
    """Copy this rank's stored batches of every state, in name order and 8-byte aligned, into the byte buffer."""
    rank = checked.ticket.layout.rank
    offset = 0
    for n in names:
        dtype, trailing = checked.layouts[n]
        start = offset
        for piece in cat[n]:
            flat = piece.to(device=buf.device, dtype=dtype).reshape(-1)
            nbytes = flat.numel() * flat.element_size()
            buf[start : start + nbytes].copy_(flat.view(torch.uint8))
            start += nbytes
        offset += _nbytes(checked.rows(n)[rank], trailing, dtype)


def _unpack(
    parts: list[Tensor], names: list[str], checked: CheckedIn, rows: dict[str, list[int]]
) -> dict[str, list[Tensor]]:
    pieces: dict[str, list[Tensor]] = {n: [] for n in names}
    for r, part in enumerate(parts):
        offset = 0
        for n in names:
            dtype, trailing = checked.layouts[n]
            count = rows[n][r] * math.prod(trailing)
            chunk = part[offset : offset + count * dtype.itemsize]
            if rows[n][r] or (r == len(parts) - 1 and not pieces[n]):
                pieces[n].append(chunk.view(dtype).reshape(rows[n][r], *trailing))
            offset += _nbytes(rows[n][r], trailing, dtype)
    return pieces


def _reduce_summed(summed: dict[str, Tensor], checked: CheckedIn, comm: torch.device) -> dict[str, Tensor]:
    if not summed:
        return {}
    names = sorted(summed)
    kinds = {summed[n].is_floating_point() for n in names}
    if len(kinds) > 1:
        msg = f"{checked.ticket.what}: summed states must be all integer or all floating point."
        raise MetricSyncError(msg)
    wire = torch.float64 if kinds.pop() else torch.int64
    flat = torch.cat([summed[n].to(device=comm, dtype=wire).reshape(-1) for n in names])
    group = checked.ticket.layout.group
    wait(dist.all_reduce(flat, group=group, async_op=True), checked.ticket, "the all-reduce of summed states")
    out: dict[str, Tensor] = {}
    offset = 0
    for n in names:
        numel = summed[n].numel()
        out[n] = flat[offset : offset + numel].reshape(summed[n].shape).to(summed[n].dtype)
        offset += numel
    return out


# ----------------------------------------------------------------------------- a computed value, from one rank


def broadcast_value(
    ticket: Ticket, src: int, compute: Callable[[], tuple[Any, dict[str, Any]]], device: torch.device, *, key: str
) -> tuple[Any, dict[str, Any]]:
    """Run ``compute`` on rank ``src`` only and give its result to every rank of the sync.

    ``compute`` returns ``(value, extra)``: the value is a tensor or a (nested) tuple / list of tensors, ``extra``
    small JSON. The shapes and ``extra`` travel through the store (one key), the tensors' bytes in one broadcast,
    both with the sync's deadline. If ``compute`` raises on ``src``, every rank raises, with its message. ``key``
    names the value among those of the sync (metrics of a compute group share one sync).
    """
    layout, store_key = ticket.layout, f"value/{key}"
    ticket.extra_keys.append(store_key)
    if layout.rank == src:
        try:
            value, extra = compute()
        except Exception as err:
            note = json.dumps({"error": f"{type(err).__name__}: {err}"})
            ticket.set(store_key, note)
            raise
        tensors: list[Tensor] = []
        spec = _spec(value, tensors)
        sizes = [_nbytes(t.numel(), (), t.dtype) for t in tensors]
        ticket.set(store_key, json.dumps({"spec": spec, "extra": extra}))
        payload = torch.empty(sum(sizes), dtype=torch.uint8, device=comm_device(layout.group, device))
        offset = 0
        for t, size in zip(tensors, sizes, strict=True):
            flat = t.detach().reshape(-1).to(payload.device)
            payload[offset : offset + flat.numel() * flat.element_size()].copy_(flat.view(torch.uint8))
            offset += size
    else:
        # The other ranks wait for the computation on ``src`` at most ``sync_timeout`` seconds.
        if not ticket.wait_keys([store_key], ticket.timeout):
            late = TimeoutError(f"no value from {layout.describe(src)} within {ticket.timeout:g} s")
            raise ticket.failed(late, f"waiting for the value computed on {layout.describe(src)}")
        note = json.loads(ticket.get(store_key))
        if "error" in note:
            msg = f"{ticket.what}: the computation on {layout.describe(src)} failed: {note['error']}"
            raise MetricSyncError(msg)
        spec, extra = note["spec"], note["extra"]
        total = sum(_nbytes(math.prod(s[1]), (), _DTYPES[s[0]]) for s in _leaves(spec))
        payload = torch.empty(total, dtype=torch.uint8, device=comm_device(layout.group, device))
    if payload.numel():
        work = dist.broadcast(payload, src=layout.global_ranks[src], group=layout.group, async_op=True)
        wait(work, ticket, "the broadcast of the computed value")
    if layout.rank == src:
        return value, extra
    return _rebuild(spec, payload.to(device), [0]), extra


def _spec(value: Any, tensors: list[Tensor]) -> Any:
    """JSON description of a value: ``[dtype code, shape]`` per tensor, lists for tuples / lists."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return [_DTYPES.index(value.dtype), list(value.shape)]
    if isinstance(value, (tuple, list)):
        return {"seq": [_spec(v, tensors) for v in value], "tuple": isinstance(value, tuple)}
    msg = f"Cannot send a computed value of type {type(value).__name__} (tensors, tuples and lists only)."
    raise TypeError(msg)


def _leaves(spec: Any) -> list[Any]:
    if isinstance(spec, dict):
        return [leaf for s in spec["seq"] for leaf in _leaves(s)]
    return [spec]


def _rebuild(spec: Any, payload: Tensor, offset: list[int]) -> Any:
    if isinstance(spec, dict):
        items = [_rebuild(s, payload, offset) for s in spec["seq"]]
        return tuple(items) if spec["tuple"] else items
    dtype, shape = _DTYPES[spec[0]], spec[1]
    numel = math.prod(shape)
    chunk = payload[offset[0] : offset[0] + numel * dtype.itemsize]
    offset[0] += _nbytes(numel, (), dtype)
    return chunk.view(dtype).reshape(shape).clone()
