"""The batch transaction of :class:`~torchmetrics_varlen.Varlen`: check, cut and pass one batch to the wrapped
metric, all or nothing (:func:`take_wrapped_batch`), with what every batch reuses from the first one
(:class:`UpdatePlan`: the growth check of its list states). What a batch is checked against is
``_core/wrapped.py``'s; the package's own metrics take theirs in ``_core/intake.py``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from torchmetrics_varlen._core.ledger import Batch, Ledger
from torchmetrics_varlen._core.rollback import restore, snapshot
from torchmetrics_varlen._core.states import ROW, stored_unit
from torchmetrics_varlen._core.wrapped import (
    batch_rows,
    check_grown,
    check_growth,
    check_sample_ids,
    cut_batch,
    drop_empty,
    list_states,
    reductions_by_id,
)


def keep_units(
    plan: UpdatePlan, inner: Metric, before: list[int], rows: int, grown: dict[str, str], units: dict[str, str]
) -> None:
    """After an update with ids: record what each list state holds per sample (``grown``, into ``units``), and drop
    the empty elements the batch added to states of one row per sample (all of them, for a batch of no samples).
    """
    lengths = dict(zip(plan.names, before, strict=True))
    for name, value in list_states(inner).items():
        if not rows or grown.get(name) == ROW:
            drop_empty(value, max(lengths.get(name, 0), 0))
    units.update(grown)


class UpdatePlan:
    """What every batch of the wrapper reuses from the first one, as long as the wrapped metric keeps the same states
    and the same ``update`` attribute (a copy re-wraps it; a metric may add states in its first update).

    - ``names``: its states (the lengths of its list states are all the rollback and the growth check need);
    - ``custom``: its states reduced otherwise than by concatenation (``sample_ids`` need none).
    """

    __slots__ = ("custom", "names", "rows_units", "states", "wrapper")

    def __init__(self, inner: Metric) -> None:
        self.names = tuple(inner._defaults)
        self.rows_units = dict.fromkeys(self.names, ROW)  # ids: every state holds one row per sample
        get = operator.attrgetter(*self.names) if self.names else lambda _: ()
        self.states: Callable[[Metric], tuple[Any, ...]] = get if len(self.names) != 1 else lambda m: (get(m),)
        self.wrapper = inner.__dict__.get("update")
        self.custom = reductions_by_id(inner)

    def sample_ids(self, sample_ids: Any, rows: int, inner: Metric, lengths: list[int]) -> Tensor:
        """``sample_ids`` checked (:func:`check_sample_ids`): an int64 vector of ``rows`` ids, for a metric whose states
        are all lists (``lengths``: no ``-1``) reduced by concatenation, passes as it is; anything else is checked in
        full.
        """
        if (
            type(sample_ids) is Tensor
            and sample_ids.dtype == torch.int64
            and sample_ids.shape == (rows,)
            and not self.custom
            and -1 not in lengths
        ):
            return sample_ids
        return check_sample_ids(sample_ids, rows, inner)

    def check_growth(
        self, inner: Metric, before: list[int], rows: int | None, units: dict[str, str], earlier: Callable[[], int]
    ) -> dict[str, str] | None:
        """:func:`check_growth` of one update, from the lengths of the list states ``before`` it (``-1``: not a
        list). With ids (``rows``), what each list state holds per sample after the update (``None``: as ``units``,
        what they held before, says), from :func:`check_grown` (``earlier``: the number of samples before the batch).
        """
        if len(inner._defaults) != len(self.names):  # states added by the update
            if rows is None:
                check_growth(inner, {n: b for n, b in zip(self.names, before, strict=True) if b >= 0}, rows)
                return None
            lengths = dict(zip(self.names, before, strict=True))
            return self._grown(
                inner, [(n, lengths.get(n, 0), v) for n, v in list_states(inner).items()], rows, units, earlier
            )
        values = self.states(inner)
        for first, value in zip(before, values, strict=True):  # the common update: one tensor appended to each
            if not (
                first >= 0
                and type(value) is list
                and len(value) == first + 1
                and type(new := value[-1]) is Tensor
                and (rows is None or rows == (new.shape[0] if new.ndim else 1))
            ):
                break
        else:  # with ids: one row per sample (of a batch of rows, and as before) or one either way
            if rows is None or (rows and 0 not in before and (rows == 1 or units == self.rows_units)):
                return None
        if rows is not None:
            grown = [(n, f, v) for n, f, v in zip(self.names, before, values, strict=True) if isinstance(v, list)]
            return self._grown(inner, grown, rows, units, earlier)
        for name, first, value in zip(self.names, before, values, strict=True):
            if isinstance(value, list):
                if first >= 0 and len(value) == first + 1 and isinstance(value[-1], Tensor):
                    continue  # the common update: one tensor appended
                if len(value) == first:
                    continue  # nothing appended
                check_grown(inner, name, value, max(first, 0), rows)
        return None

    @staticmethod
    def _grown(
        inner: Metric, grown: list[tuple[str, int, Any]], rows: int, units: dict[str, str], earlier: Callable[[], int]
    ) -> dict[str, str]:
        """With ids: :func:`check_grown` of every list state ``(name, length before, list)``, what each holds per
        sample before the update read from ``units`` (or, if not recorded, from the stored list).
        """
        after: dict[str, str] = {}
        for name, first, value in grown:
            first = max(first, 0)
            held = units.get(name) if first else None
            if first and held is None:  # states loaded or shared: read once from the list
                held = stored_unit(value[:first], earlier())
            before_count = earlier() if not first and len(value) > first and rows else 0
            unit = check_grown(inner, name, value, first, rows, held, before_count)
            if unit is not None:
                after[name] = unit
        return after


def take_wrapped_batch(
    host: Any, args: tuple[Any, ...], kwargs: dict[str, Any], sample_ids: Tensor | None, call: Callable[..., Any] | None
) -> Any:
    """Check, cut and pass one batch to ``Varlen``'s (``host``) wrapped metric (``call``: its ``forward``; ``None``:
    its ``update``), all or nothing: a call that raises leaves its list states as they were and counts its rows as
    rejected.
    """
    state = host.__dict__
    ledger: Ledger = state["_ledger"]
    inner: Metric = state["_modules"]["metric"]
    plan: UpdatePlan | None = host._plan
    if plan is None or inner.__dict__.get("update") is not plan.wrapper or len(inner._defaults) != len(plan.names):
        plan = host._plan = UpdatePlan(inner)
    first = args[0] if args else None
    # An update came through torchmetrics' update wrapper, which counted the call; Varlen's forward counts its own call
    # only once the batch is taken.
    counted_call = call is None
    try:
        rows = (first.shape[0] if first.ndim else 1) if type(first) is Tensor else batch_rows(args, kwargs)
    except (ValueError, TypeError):  # no batch to count: the call alone is refused
        ledger.refuse(host, 0, counted_call=counted_call)
        raise
    # a call that raises: its rows rejected, and no update
    with ledger.batch(host, rows, None, host.process_group, counted_call=counted_call) as batch:
        return _pass_on(host, plan, inner, batch, args, kwargs, sample_ids, call)


def _pass_on(
    host: Any,
    plan: UpdatePlan,
    inner: Metric,
    batch: Batch,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    sample_ids: Tensor | None,
    call: Callable[..., Any] | None,
) -> Any:
    """:func:`take_wrapped_batch` inside its ledger batch: check the ids, cut the padding, pass the batch on, and put
    the wrapped metric's list states back if that raises.
    """
    state = host.__dict__
    rows = batch.rows
    before = [len(v) if isinstance(v, list) else -1 for v in plan.states(inner)]
    kept, ids, stored = rows, None, state["varlen_ids"]
    if sample_ids is not None or type(stored) is not list or stored:  # without ids only an epoch of ids refuses
        ids = _batch_ids(host, plan, inner, sample_ids, rows, before)
    if ids is None and batch.ledger.dataset_size is not None:
        kept = batch.cut()
        args, kwargs = cut_batch(args, kwargs, rows, kept)
    count = inner.__dict__["_update_count"]
    before_call = snapshot(inner, update=False) if call is not None and (kept or not rows) else None
    try:
        value = None
        if rows and not kept:
            pass
        elif call is not None:
            value = call(*args, **kwargs)
        else:
            inner.update(*args, **kwargs)
        units = host._units
        grown = plan.check_growth(inner, before, rows if ids is not None else None, units, host._id_count)
    except BaseException:
        if before_call is not None:  # torchmetrics' forward reset the states before its update raised
            restore(inner, before_call)
        lengths = {name: n for name, n in zip(plan.names, before, strict=True) if n >= 0}
        for name, elements in list_states(inner).items():
            del elements[lengths.get(name, 0) :]
        inner._update_count, inner._computed = count, None
        raise
    if grown is not None:
        keep_units(plan, inner, before, rows, grown, units)
    if len(inner._defaults) != len(state["_proxied"]):
        host._mirror()  # states a metric adds in its first update
    if ids is not None:
        host.varlen_ids.append(ids)
    return value


def _batch_ids(
    host: Any, plan: UpdatePlan, inner: Metric, sample_ids: Tensor | None, rows: int, lengths: list[int]
) -> Tensor | None:
    """The batch's ``sample_ids`` checked (``None`` without), and that the epoch's dedup mode takes them (a batch
    refused here counts its rows as rejected: it raises inside the ledger's batch).
    """
    state = host.__dict__
    ledger: Ledger = state["_ledger"]
    stored = state["varlen_ids"]
    ids = None
    if sample_ids is not None:
        ids = plan.sample_ids(sample_ids, rows, inner, lengths)
        where = state["varlen_rows"]
        if not (ids.is_cpu and where.is_cpu):
            ids = ids.to(where.device)
        ledger.check_ids(ids)
    if ids is None or type(stored) is not list or not stored:  # an epoch of ids takes ids
        ledger.check_mode(host._dedup_mode(), ids is not None)
    return ids
