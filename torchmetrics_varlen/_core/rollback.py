"""One snapshot / restore of a metric's states around a batch: what ``forward`` (``GuardedMetric.forward``,
``Varlen``'s intake, ``VarlenCollection.forward``) puts back when the batch is refused, so that a refused batch
leaves the states exactly as a refused ``update`` does; the rows it dealt count as rejected in the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor
from torchmetrics import Metric

# What torchmetrics' ``forward`` changes before it updates: its ``reset()`` empties the list states in place and
# assigns new tensor states, and it sets its switches (plain attributes); it puts them back only when the update and
# the batch's compute succeed. ``forward_snapshot`` / ``restore_forward`` put every state and every plain attribute back
# when ``forward`` raises (a refused batch), so that the metric is exactly as before the call, as after a refused
# ``update``, without naming torchmetrics' switches.


@dataclass
class ForwardSnapshot:
    """The states of a metric before its ``forward`` (list states: the list and its items; tensors: the tensor, or a
    copy of those written in place), its other plain attributes, and its ledger's count of rows dealt (``dealt``) and
    own counters.
    """

    lists: dict[str, tuple[list[Any], list[Any]]]
    tensors: dict[str, Any]
    switches: dict[str, Any]
    dealt: int = 0
    own: list[int] | None = None  # a ledger that keeps its own counters: its counts before the call


def forward_snapshot(metric: Metric, counters_kept: bool = True) -> ForwardSnapshot:
    """What ``metric``'s ``forward`` replaces, empties or adds to in place (see above): the tensors of a metric whose
    ``forward`` first updates its own states (torchmetrics' full-state path, which may add to its tensors in place)
    are copied, and so are the ledger's counters (added to in place, ``_core/ledger.py``) unless ``counters_kept`` is
    false: a ``forward`` that resets the metric before its update (torchmetrics' own) writes new counter tensors.
    """
    state = metric.__dict__
    # the states the metric holds itself (``Varlen`` reads its wrapped metric's: that one is snapshot on its own)
    values = {name: state[name] for name in metric._defaults if name in state}
    ledger = state.get("_ledger")
    in_place = metric.full_state_update is not False or metric.dist_sync_on_step
    counters = (
        () if ledger is None or ledger.counters is None or not counters_kept else (*ledger.counters, "num_samples")
    )
    return ForwardSnapshot(
        lists={name: (value, list(value)) for name, value in values.items() if isinstance(value, list)},
        tensors={
            name: value.clone() if (in_place or name in counters) and isinstance(value, Tensor) else value
            for name, value in values.items()
            if not isinstance(value, list)
        },
        switches={name: value for name, value in state.items() if name not in values},
        dealt=ledger.dealt if ledger is not None else 0,
        own=list(ledger.own) if ledger is not None and ledger.counters is None else None,
    )


def restore_forward(metric: Metric, snapshot: ForwardSnapshot, rows: int | None = None) -> None:
    """Put back what :func:`forward_snapshot` saved (after a ``forward`` that raised): the same list objects with
    their items (a compute group shares them), the tensors, the switches; no cached value. The call's ``rows``
    (``None``: what its ledger was dealt since the snapshot) count as rejected.
    """
    state = metric.__dict__
    for name, (value, items) in snapshot.lists.items():
        value[:] = items
        state[name] = value
    for name, value in snapshot.tensors.items():
        setattr(metric, name, value)
    state.update(snapshot.switches)
    state["_computed"] = None  # as after a refused update: the next compute() reports the refused rows too
    ledger = state.get("_ledger")
    if ledger is None:
        return
    # Every row the call dealt (taken by the update, then lost with the batch's value, or refused) counts as
    # rejected: the sampler positions move on as they did, and no row is reported that the states do not hold.
    dealt = ledger.dealt - snapshot.dealt if rows is None else rows
    if snapshot.own is not None:
        ledger.own = list(snapshot.own)
    ledger.refuse(metric, dealt)
    ledger.dealt -= dealt  # dealt once, by the call (the refusal only moves them to the rejected rows)
