"""One check-in and one exchange for several metrics' payloads (``VarlenCollection``), compute groups included.

Every metric is one part of the joint sync on every rank, so the layout of the sync never depends on a rank's data.
A ``MetricCollection`` forms its compute groups on each rank from that rank's first batch (a rank that saw no data
forms none), so which metrics share their states can differ from rank to rank. A metric whose states are, on this
rank, those of an earlier part (``aliases``) sends no rows here and says so in its counters; every rank then takes
that rank's rows from the earlier part. On the wire every name is prefixed with its part's key and a dot
(``"auroc.preds"``), so the errors of the check-in name the metric whose state or setting differs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen._core.guarded_sync import Payload
from torchmetrics_varlen._dist.exchange import Agreed, CheckedIn, Gathered, Layout, RankMeta, SyncRequest, sync_states

_ALIAS = "#alias"  # counter of every part: the index of the part whose rows it takes on this rank, -1 for its own


def sync_together(request: SyncRequest, parts: dict[str, Payload], aliases: dict[str, str]) -> dict[str, Gathered]:
    """Sync every part in one check-in and one exchange; ``aliases`` maps a part to an earlier part whose states it
    shares on this rank. Returns each part's own view of the result (per-rank pieces, as ``concat=False``).
    """
    if any(p.dst is not None for p in parts.values()):
        msg = "sync_together: payloads gathered to one rank (dst) cannot share an exchange."
        raise ValueError(msg)
    names = list(parts)
    cat: dict[str, list[Tensor]] = {}
    summed: dict[str, Tensor] = {}
    info: dict[str, int] = {}
    modes: dict[str, Agreed] = {}
    for key, part in parts.items():
        source = aliases.get(key)
        rows = part.cat if source is None else {n: [p[:0] for p in pieces[:1]] for n, pieces in part.cat.items()}
        cat.update({f"{key}.{n}": v for n, v in rows.items()})
        summed.update({f"{key}.{n}": v for n, v in part.summed.items()})
        counters = {**part.info, _ALIAS: -1 if source is None else names.index(source)}
        info.update({f"{key}.{n}": v for n, v in counters.items()})
        modes.update({f"{key}.{n}": v for n, v in part.modes.items()})
    device = next(iter(parts.values())).device
    result = sync_states(request, cat, summed, device=device, info=info, modes=modes, concat=False)
    views = {key: _view(result, f"{key}.", part.device) for key, part in parts.items()}
    return {key: _unalias(views, names, key) for key in names}


def _view(result: Gathered, prefix: str, device: torch.device) -> Gathered:
    """The part of a joint sync's result whose names start with ``prefix``, without the prefix."""

    def own(states: dict[str, Any]) -> dict[str, Any]:
        return {name[len(prefix) :]: value for name, value in states.items() if name.startswith(prefix)}

    ranks = [RankMeta(own(r.states), own(r.info), own(r.modes)) for r in result.checked.ranks]
    checked = CheckedIn(result.checked.ticket, ranks, own(result.checked.layouts))
    cat: dict[str, Tensor | list[Tensor]] = {
        name: [p.to(device) for p in pieces] if isinstance(pieces, list) else pieces.to(device)
        for name, pieces in own(result.cat).items()
    }
    summed = {name: value.to(device) for name, value in own(result.summed).items()}
    return Gathered(cat=cat, summed=summed, checked=checked)


def _by_rank(view: Gathered, state: str) -> list[Tensor | None]:
    """Each rank's piece of a cat state (``None`` for a rank without rows)."""
    pieces = view.cat[state]
    found = iter(pieces if isinstance(pieces, list) else [pieces])
    return [next(found) if rows else None for rows in view.checked.rows(state)]


def _unalias(views: dict[str, Gathered], names: list[str], key: str) -> Gathered:
    """``key``'s view, with the rows of the ranks where it shared another part's states taken from that part."""
    view = views[key]
    sources = [r.info[_ALIAS] for r in view.checked.ranks]
    ranks = [
        RankMeta(dict(r.states), {k: v for k, v in r.info.items() if k != _ALIAS}, r.modes) for r in view.checked.ranks
    ]
    if all(s < 0 for s in sources):
        return dataclasses.replace(view, checked=CheckedIn(view.checked.ticket, ranks, view.checked.layouts))
    cat: dict[str, Tensor | list[Tensor]] = {}
    layouts: dict[str, Layout] = {}
    for state in view.cat:
        per_source = {s: _by_rank(views[names[s]] if s >= 0 else view, state) for s in set(sources)}
        pieces = [per_source[s][r] for r, s in enumerate(sources)]
        for r, s in enumerate(sources):
            if s >= 0:
                ranks[r].states[state] = views[names[s]].checked.ranks[r].states[state]
        present = [p for p in pieces if p is not None]
        dtype, trailing = view.checked.layouts[state].dtype, view.checked.layouts[state].trailing
        if present:
            dtype, trailing = present[0].dtype, tuple(present[0].shape[1:])
            for p in present[1:]:
                dtype = torch.promote_types(dtype, p.dtype)
        layouts[state] = Layout(dtype, trailing)
        cat[state] = present or [torch.empty((0, *trailing), dtype=dtype, device=_device_of(view))]
    return Gathered(cat=cat, summed=view.summed, checked=CheckedIn(view.checked.ticket, ranks, layouts))


def _device_of(view: Gathered) -> torch.device:
    for pieces in view.cat.values():
        first = pieces[0] if isinstance(pieces, list) else pieces
        return first.device
    return torch.device("cpu")
