"""One snapshot / restore of a metric around a batch: what a refused batch leaves behind when the refusal comes after
the metric (or another member of its collection) had started to take it. ``GuardedMetric.forward`` and ``Varlen``'s
intake put a metric back when its ``forward`` raises; ``VarlenCollection`` puts every member back when one of them
refuses a batch the others took (``update`` and ``forward``). The metric is left exactly as before the call, and the
call's rows count as rejected in its ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

# What a call changes: an ``update`` appends to the list states and adds to tensor states in place (the package's
# counters and summed states, most torchmetrics states); torchmetrics' ``forward`` first resets (empties the lists in
# place, assigns new tensors) and sets its switches (plain attributes). :func:`snapshot` keeps the list objects and
# their items (or, where an update only appends, their lengths), each tensor state (with a copy of its values when
# the call may write it in place) and every plain attribute, so that :func:`restore` puts all of it back without
# naming a torchmetrics switch. The same list and tensor objects are put back, their contents restored in place: a
# compute group's members share them.


@dataclass
class Snapshot:
    """A metric's states before a call (list states: the list and its items, or its length; tensor states: the
    tensor, and a copy of its values when the call may write it in place), its other plain attributes, and its
    ledger's count of rows dealt (``dealt``) and own counters.
    """

    lists: dict[str, tuple[list[Any], list[Any] | int]]  # the list, and its items (or, appended to only, its length)
    tensors: dict[str, tuple[Any, Tensor | None]]
    switches: dict[str, Any]
    dealt: int = 0
    own: list[int] | None = None  # a ledger that keeps its own counters: its counts before the call


def snapshot(metric: Metric, *, update: bool, tensors: bool | None = None) -> Snapshot:
    """What a call of ``metric`` may change (see above). ``update``: the call is an ``update``, which appends to the
    list states and writes the tensor states in place, so every tensor state is copied; otherwise (torchmetrics'
    ``forward``, which resets before its update) only the ledger's counters and the states of a metric whose
    ``forward`` updates them as they are (torchmetrics' full-state path, ``dist_sync_on_step``). ``tensors=False``:
    no tensor state is copied but the counters (a caller that knows the call writes nothing else it must undo).
    """
    state = metric.__dict__
    # the states the metric holds itself (``Varlen`` reads its wrapped metric's: that one is snapshot on its own)
    values = {name: state[name] for name in metric._defaults if name in state}
    ledger = state.get("_ledger")
    in_place = (
        (update or metric.full_state_update is not False or metric.dist_sync_on_step) if tensors is None else tensors
    )
    # the ledger's counters are added to in place by any call (``Varlen`` counts its batch on itself in ``forward``)
    counters = (*ledger.counters, "num_samples") if ledger is not None and ledger.counters is not None else ()
    # An update appends to a list state: its length puts it back (a wrapped torchmetrics metric's lists grow by a piece
    # a batch, copying them would cost O(batches) per batch), except for the package's own metrics, which merge the
    # pieces at its end (``_core/intake.py``: their lists stay short) and are copied whole, as for a forward.
    whole = not update or hasattr(metric, "_piece_count")
    return Snapshot(
        lists={
            name: (value, list(value) if whole else len(value))
            for name, value in values.items()
            if isinstance(value, list)
        },
        tensors={
            name: (value, value.clone() if isinstance(value, Tensor) and (in_place or name in counters) else None)
            for name, value in values.items()
            if not isinstance(value, list)
        },
        switches={name: value for name, value in state.items() if name not in values},
        dealt=ledger.dealt if ledger is not None else 0,
        own=list(ledger.own) if ledger is not None and ledger.counters is None else None,
    )


def restore(metric: Metric, saved: Snapshot, rows: int | None = None, *, keep_cached: bool = False) -> None:
    """Put back what :func:`snapshot` saved (after a call that raised): the same list and tensor objects with their
    contents, the switches; no cached value, as after a refused update (``keep_cached``: the cached value too, for a
    collection whose refusal leaves its metrics as they were). The call's ``rows`` (``None``: what its ledger was
    dealt since the snapshot) count as rejected.
    """
    state = metric.__dict__
    for name, (value, items) in saved.lists.items():
        if isinstance(items, int):
            del value[items:]
        else:
            value[:] = items
        state[name] = value
    outside_inference = not torch.is_inference_mode_enabled()
    for name, (value, values) in saved.tensors.items():
        # (an inference tensor cannot have been written in place outside inference mode: nothing to put back)
        if values is not None and not (outside_inference and value.is_inference()):
            value.copy_(values)
        setattr(metric, name, value)
    state.update(saved.switches)
    if not keep_cached:  # as after a refused update: the next compute() reports the refused rows too
        state["_computed"] = None
    ledger = state.get("_ledger")
    if ledger is None:
        return
    # Every row the call dealt (taken, then lost with the call, or refused) counts as rejected, once: the sampler
    # positions move on as they did, and no row is reported that the states do not hold.
    if rows is None:
        rows = ledger.dealt - saved.dealt
    ledger.dealt = saved.dealt
    if saved.own is not None:
        ledger.own = list(saved.own)
    ledger.refuse(metric, rows)
