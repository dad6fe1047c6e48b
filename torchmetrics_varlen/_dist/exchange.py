"""One guarded sync: the check-in, one fixed-size metadata all-gather, then one data exchange for any number of states.

After the check-in (``guard.py``) every rank all-gathers one small int64 vector of the same length (the check-in
made sure the ranks agree on which states and counters exist): its counters, its modes, and for every
concatenated ("cat") state its rows, dtype and trailing shape. From these every rank derives the same layout.

Before that all-gather every rank does everything that could fail on it alone: it checks that each state can be
encoded (a dtype with a wire code, at most ``_MAX_DIMS`` trailing dimensions, pieces of one trailing shape) and packs
its cat states into its send buffer, whatever their layout (strided, transposed, expanded, offset views are copied
straight into the buffer, in their own dtype). A rank that fails says so in its vector (and why, in the store), so
every rank raises the same :class:`MetricSyncError` before any data moves and the process group stays in step.

The packed cat states (each state 16-byte aligned, in the sending rank's own dtype; the receivers promote to the
dtype common to all ranks) are then moved together: on gloo one broadcast per rank that has rows, all in
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

_ALIGN = 16  # the widest element (complex128): every piece can be viewed in its dtype
_MAX_DIMS = 8  # trailing dimensions a cat state may have
# Dtypes by wire code (the position in this tuple). Others (uint16-64, float8, complex32, quantized) cannot be synced.
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


@dataclass
class Outbox:
    """This rank's states as they leave it, packed before the metadata all-gather (taken by the data exchange).

    ``rows``: the cat states' bytes (in name order, each state 16-byte aligned, in this rank's own dtypes) on the
    communication device; ``summed``: the summed states flattened into their wire dtype. ``None`` until packed.
    """

    rows: Tensor | None = None
    summed: Tensor | None = None


@dataclass(frozen=True)
class CheckedIn:
    """What every rank knows after the check-in and the metadata all-gather (the same on every rank), and this
    rank's packed states (``outbox``).
    """

    ticket: Ticket
    ranks: list[RankMeta]
    layouts: dict[str, tuple[torch.dtype, tuple[int, ...]]] = field(default_factory=dict)
    outbox: Outbox = field(default_factory=Outbox)

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
    pack: bool = True,
) -> CheckedIn:
    """The check-in and the metadata all-gather; verifies that the ranks' states can be combined.

    ``cat`` states are lists of pieces (stored batches, of any layout; at least one, possibly empty). ``info``
    (small integers, e.g. per-rank counters) comes back per rank; ``modes`` must agree across the ranks where they
    are set. Unless ``pack=False`` (a sync that moves no rows), every rank packs its states for the data exchange
    before the metadata all-gather, so that a failure to encode or pack them is known to every rank before any data
    moves.

    Raises:
        MetricSyncError: On every rank, if a rank is missing, a rank cannot encode or pack its states (naming it and
            why), or the ranks' configurations, modes, dtype families or trailing shapes disagree.
    """
    info, modes = info or {}, modes or {}
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
    comm = comm_device(request.layout.group, device)
    outbox = Outbox()
    mine, problem = _prepare(cat, summed, comm, outbox if pack else None)
    if problem is not None:
        ticket.set(f"problem/{request.layout.rank}", problem[:1000])
    vector = [int(signature[:15], 16), problem is not None]
    vector += [*(info[k] for k in sorted(info)), *(modes[k].code() for k in sorted(modes))]
    for name in sorted(cat):
        layout = mine.get(name)
        if layout is None:  # this rank reports a problem: the layout is never read
            vector += [0] * (3 + _MAX_DIMS)
            continue
        dims = [*layout.trailing, *([0] * (_MAX_DIMS - len(layout.trailing)))]
        vector += [layout.rows, _DTYPES.index(layout.dtype), len(layout.trailing), *dims]
    local = torch.tensor(vector, dtype=torch.int64, device=comm)
    rows = all_gather_fixed(local, ticket, "the metadata all-gather").tolist()
    if len({r[0] for r in rows}) > 1:  # pragma: no cover - a 60-bit digest collision in the check-in
        msg = f"{request.what}: the ranks' configurations differ (their digests do)."
        raise MetricSyncError(msg)
    _raise_problems(ticket, [r for r, row in enumerate(rows) if row[1]])
    ranks = [_decode(r, sorted(info), modes, sorted(cat)) for r in rows]
    checked = CheckedIn(ticket, ranks, outbox=outbox)
    for name, mode in sorted(modes.items()):
        _agree_on_mode(name, [r.modes[name] for r in ranks], mode, checked)
    for name in sorted(cat):
        checked.layouts[name] = _agree_on_layout(name, [r.states[name] for r in ranks], checked)
    return checked


def _prepare(
    cat: dict[str, list[Tensor]], summed: dict[str, Tensor], comm: torch.device, outbox: Outbox | None
) -> tuple[dict[str, StateLayout], str | None]:
    """Everything of a sync that can fail on this rank alone, done before the metadata all-gather; never raises.

    Returns this rank's layout of every cat state and ``None``, or a short reason why its states cannot be sent.
    With ``outbox``, packs the states into it.
    """
    mine: dict[str, StateLayout] = {}
    try:
        for name, pieces in sorted(cat.items()):
            mine[name] = _local_layout(name, pieces)
        if (
            summed
            and len({v.is_floating_point() for v in summed.values()}) > 1
            or any(v.is_complex() for v in summed.values())
        ):
            return mine, "summed states must be all integer or all real floating point"
        if outbox is not None:
            outbox.rows = _pack(cat, mine, comm)
            outbox.summed = _flatten_summed(summed, comm)
    except _Unsendable as err:
        return mine, str(err)
    except Exception as err:  # whatever it is, every rank must hear of it before the exchange
        return mine, f"{type(err).__name__}: {err}"
    return mine, None


class _Unsendable(ValueError):
    """A state this rank cannot send (the message says why)."""


def _local_layout(name: str, pieces: list[Tensor]) -> StateLayout:
    """This rank's layout of cat state ``name``; raises :class:`_Unsendable` if it cannot be sent."""
    if not pieces:
        msg = f"state `{name}` holds no tensor (at least one, possibly empty, is needed)"
        raise _Unsendable(msg)
    scalars = [p for p in pieces if p.ndim == 0]
    if scalars:
        msg = f"state `{name}` holds a 0-d tensor (a scalar): concatenated states need at least one dimension"
        raise _Unsendable(msg)
    odd = sorted({str(p.dtype) for p in pieces if p.dtype not in _DTYPES})
    if odd:
        msg = (
            f"state `{name}` has dtype {', '.join(odd)}, which cannot be sent (supported: bool, uint8, int8-int64,"
            " float16, bfloat16, float32, float64, complex64, complex128); convert it before syncing"
        )
        raise _Unsendable(msg)
    layout = StateLayout.of(pieces)
    if len(layout.trailing) > _MAX_DIMS:
        msg = f"state `{name}` has {len(layout.trailing)} trailing dimensions; at most {_MAX_DIMS} can be synced"
        raise _Unsendable(msg)
    shapes = sorted({tuple(p.shape[1:]) for p in pieces if p.shape[0]})
    if len(shapes) > 1:
        msg = f"the pieces of state `{name}` differ in trailing shape ({', '.join(map(str, shapes))})"
        raise _Unsendable(msg)
    return layout


def _raise_problems(ticket: Ticket, flagged: list[int]) -> None:
    """After the metadata all-gather: if some ranks could not encode or pack their states, raise on every rank."""
    if not flagged:
        return
    layout = ticket.layout
    keys = [f"problem/{r}" for r in flagged]
    ticket.extra_keys.extend(keys)  # deleted with the sync's other keys
    lines = [f"  {layout.describe(r)}: {ticket.get(k).decode()}" for r, k in zip(flagged, keys, strict=True)]
    msg = (
        f"{ticket.what} ({ticket.identity!r}): {layout.describe_all(flagged)} could not send"
        f" {'its' if len(flagged) == 1 else 'their'} states, so no rank exchanged any data:\n"
        + "\n".join(lines)
        + "\nFix the input on the rank(s) named; the process group is unaffected and the next sync can proceed."
    )
    raise MetricSyncError(msg)


def _decode(row: list[int], info: list[str], modes: dict[str, Mode], names: list[str]) -> RankMeta:
    at = 2  # after the configuration digest and the problem flag
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
    box = checked.outbox
    rows, box.rows = box.rows, None  # the exchange takes them: no reference outlives it
    flat, box.summed = box.summed, None
    try:
        if rows is None:  # checked in with pack=False: pack now
            rows = _pack(cat, {n: checked.ranks[checked.ticket.layout.rank].states[n] for n in cat}, comm)
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


def _nbytes(rows: int, trailing: tuple[int, ...], dtype: torch.dtype) -> int:
    raw = rows * math.prod(trailing) * dtype.itemsize
    return -(-raw // _ALIGN) * _ALIGN


def _empty_states(checked: CheckedIn, names: list[str], device: torch.device) -> dict[str, list[Tensor]]:
    return {n: [torch.empty((0, *checked.layouts[n][1]), dtype=checked.layouts[n][0], device=device)] for n in names}


def _write(region: Tensor, tensor: Tensor) -> None:
    """Copy ``tensor`` (any layout, device or dtype) into the byte slice ``region`` as ``region``'s dtype, in one
    copy: ``region`` is viewed as a contiguous tensor of ``tensor``'s shape, so strided, transposed, expanded and
    offset views are laid out row-major on the way, and a contiguous tensor is copied exactly once.
    """
    region.view(tensor.shape).copy_(tensor.detach())


def _pack(cat: dict[str, list[Tensor]], layouts: dict[str, StateLayout], comm: torch.device) -> Tensor:
    """This rank's stored batches of every state, in name order and 16-byte aligned, in one byte buffer on ``comm``,
    each state in this rank's own dtype (``layouts``); uninitialised alignment bytes are never read back.
    """
    names = sorted(cat)
    sizes = [_nbytes(layouts[n].rows, layouts[n].trailing, layouts[n].dtype) for n in names]
    buf = torch.empty(sum(sizes), dtype=torch.uint8, device=comm)
    offset = 0
    for n, size in zip(names, sizes, strict=True):
        dtype = layouts[n].dtype
        start = offset
        for piece in cat[n]:
            nbytes = piece.numel() * dtype.itemsize
            if nbytes:
                _write(buf[start : start + nbytes].view(dtype), piece)
            start += nbytes
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
        sum(_nbytes(rows[n][r], checked.layouts[n][1], checked.ranks[r].states[n].dtype) for n in names)
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
            keep(dist.broadcast(parts[r], src=glob[r], group=group, async_op=True)) for r in range(world) if sizes[r]
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
            dtype, trailing = checked.layouts[n]
            sent = checked.ranks[r].states[n].dtype
            count = rows[n][r] * math.prod(trailing)
            if rows[n][r]:
                chunk = part[offset : offset + count * sent.itemsize].view(sent).view(rows[n][r], *trailing)
                pieces[n].append(chunk if sent == dtype else chunk.to(dtype))
                offset += _nbytes(rows[n][r], trailing, sent)
    for n in names:
        if not pieces[n]:
            dtype, trailing = checked.layouts[n]
            pieces[n].append(torch.empty((0, *trailing), dtype=dtype, device=parts[0].device))
    return pieces


def _flatten_summed(summed: dict[str, Tensor], comm: torch.device) -> Tensor | None:
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
        flat = _flatten_summed(summed, comm)
        assert flat is not None
    names = sorted(summed)
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
        # Everything that can fail here (the computation, encoding and packing its value) happens before the
        # others learn that a value comes: a failure reaches them as a note, never as a missing broadcast.
        try:
            value, extra = compute()
            tensors: list[Tensor] = []
            spec = _spec(value, tensors)
            note = json.dumps({"spec": spec, "extra": extra})
            sizes = [_nbytes(t.numel(), (), t.dtype) for t in tensors]
            payload = torch.empty(sum(sizes), dtype=torch.uint8, device=comm_device(layout.group, device))
            offset = 0
            for t, size in zip(tensors, sizes, strict=True):
                if t.numel():
                    _write(payload[offset : offset + t.numel() * t.dtype.itemsize].view(t.dtype), t)
                offset += size
        except Exception as err:
            ticket.set(store_key, json.dumps({"error": f"{type(err).__name__}: {err}"}))
            raise
        ticket.set(store_key, note)
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
        if value.dtype not in _DTYPES:
            msg = f"Cannot send a computed value of dtype {value.dtype}."
            raise TypeError(msg)
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
