"""The check-in and the one metadata all-gather of a sync, and the ranks' agreement on what they hold.

After the check-in (``checkin.py``) every rank all-gathers one small int64 vector of the same length (the check-in
made sure the ranks agree on which states and counters exist): its counters, its modes, and for every
concatenated ("cat") state its rows, dtype and trailing shape. From these every rank derives the same layout.

Before that all-gather every rank does everything that could fail on it alone: it checks that each state can be
encoded (a dtype with a wire code, at most ``_MAX_DIMS`` trailing dimensions, pieces of one trailing shape) and packs
its cat states into its send buffer (``transport.py``). A rank that fails says so in its vector (and why, in the
store), so every rank raises the same :class:`MetricSyncError` before any data moves and the process group stays in
step.
"""

from __future__ import annotations

import hashlib
import json

import torch
from torch import Tensor

from torchmetrics_varlen._dist.checkin import Ticket, check_in
from torchmetrics_varlen._dist.errors import MetricSyncError
from torchmetrics_varlen._dist.group import comm_device
from torchmetrics_varlen._dist.guard_errors import MESSAGE_BUDGET, shorten
from torchmetrics_varlen._dist.records import (
    _DTYPES,
    _MAX_DIMS,
    Agreed,
    CheckedIn,
    Info,
    Layout,
    Outbox,
    RankMeta,
    StateLayout,
    SyncRequest,
)
from torchmetrics_varlen._dist.transport import all_gather_fixed, flatten_summed, pack


def _family(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "float" if dtype.is_floating_point else "int"


def check_in_states(
    request: SyncRequest,
    cat: dict[str, list[Tensor]],
    summed: dict[str, Tensor],
    *,
    device: torch.device,
    info: Info | None = None,
    modes: dict[str, Agreed] | None = None,
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
            outbox.rows = pack(cat, mine, comm)
            outbox.summed = flatten_summed(summed, comm)
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
    problems: dict[str, list[int]] = {}  # ranks with the same problem share a line
    for r, k in zip(flagged, keys, strict=True):
        problems.setdefault(ticket.get(k).decode(), []).append(r)
    head = (
        f"{ticket.what} ({ticket.identity!r}): {layout.describe_all(flagged)} could not send"
        f" {'its' if len(flagged) == 1 else 'their'} states, so no rank exchanged any data:\n"
    )
    tail = "\nFix the input on the rank(s) named; the process group is unaffected and the next sync can proceed."
    room = max(80, (MESSAGE_BUDGET - len(head) - len(tail)) // len(problems) - 30)
    lines = [f"  {layout.describe_all(ranks)}: {shorten(text, room)}" for text, ranks in problems.items()]
    raise MetricSyncError(head + "\n".join(lines) + tail)


def _decode(row: list[int], info: list[str], modes: dict[str, Agreed], names: list[str]) -> RankMeta:
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


def _agree_on_mode(name: str, values: list[str | None], mode: Agreed, checked: CheckedIn) -> None:
    decided = {v for v in values if v is not None}
    if len(decided) > 1:
        layout = checked.ticket.layout
        rows = "\n".join(f"  {layout.describe(r)}: {shorten(str(v), 80)}" for r, v in enumerate(values))
        msg = (
            f"{checked.ticket.what}: the ranks disagree on `{name}`, so their states cannot be combined:\n{rows}\n"
            "Construct the metric with the same arguments on every rank and feed it inputs of the same kind."
        )
        raise MetricSyncError(msg)


def _agree_on_layout(name: str, entries: list[StateLayout], checked: CheckedIn) -> Layout:
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
    return Layout(dtype, present[0].trailing)
