"""``Varlen``: any torchmetrics metric, synced like the package's own metrics, with sampler-padding dedup."""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from torchmetrics_varlen._compat import set_grad_mode
from torchmetrics_varlen._core.dedup import SyncReport
from torchmetrics_varlen._core.ledger import Ledger, host_counters, warning_compute
from torchmetrics_varlen._core.seam import Gathered, GuardedMetric, Mode, Payload
from torchmetrics_varlen._core.snapshot import forward_snapshot, restore_forward
from torchmetrics_varlen._core.states import (
    ROW,
    UNITS,
    as_rows,
    decode_state,
    dedup_states,
    encode_state,
    local_state,
    per_element,
    stored_unit,
)
from torchmetrics_varlen._core.wrapped import (
    batch_rows,
    check_grown,
    check_growth,
    check_sample_ids,
    cut_batch,
    drop_empty,
    inner_config,
    list_states,
    reductions_by_id,
    wrappable,
)

_OWN: tuple[str, str, str, str] = ("varlen_ids", "varlen_rows", "varlen_padding", "varlen_rejected")
_PLAIN = frozenset(("_computed", "_update_count", "_forward_cache"))  # plain attributes torchmetrics sets per update
_IDS = "#ids"  # the wire name of the ids (never a state name of the wrapped metric)
_COMPUTE_WARNING = r"The ``compute`` method of metric"
_PLAN_KEY = "_varlen_plan"  # the wrapper's _Plan of its metric, in its __dict__ (not pickled: made again)
_UNITS_KEY = "_varlen_units"  # with ids: what each list state of the metric holds per sample (``_states.ROW`` ...)
_UNIT_MODE = "{} per sample"  # the sync's mode of each list state: what a sample adds to it (``_states.UNITS``)
_WRAPPER_CODE = Metric._wrap_update(None, print).__code__  # type: ignore[arg-type]  # torchmetrics' update wrapper


def _device_error(metric: Metric, err: RuntimeError) -> None:
    """Raise torchmetrics' message for inputs on another device than the metric (its update wrapper's), if ``err``
    is that case.
    """
    if "Expected all tensors to be on" in str(err):
        name = type(metric).__name__
        msg = (
            "Encountered different devices in metric calculation (see stacktrace for details). This could be due to"
            f" the metric class not being on the same device as input. Instead of `metric={name}(...)` try to do"
            f" `metric={name}(...).to(device)` where device corresponds to the device of the input."
        )
        raise RuntimeError(msg) from err


def _run_update(metric: Metric, update: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The body of torchmetrics' update wrapper (``Metric._wrap_update``) after its two counters: ``update`` under the
    metric's grad mode (set, and put back, only when it differs: what torchmetrics' ``set_grad_enabled`` context
    does), its message for tensors on different devices, and the move of the list states to the CPU.
    """
    enable = metric._enable_grad
    previous = torch.is_grad_enabled()
    try:
        if previous != enable:
            set_grad_mode(enable)
        update(*args, **kwargs)
    except RuntimeError as err:
        _device_error(metric, err)
        raise
    finally:
        if torch.is_grad_enabled() != previous:
            set_grad_mode(previous)
    if metric.compute_on_cpu:
        metric._move_list_states_to_cpu()


def _keep_units(
    plan: _Plan, inner: Metric, before: list[int], rows: int, grown: dict[str, str], units: dict[str, str]
) -> None:
    """After an update with ids: record what each list state holds per sample (``grown``, into ``units``), and drop
    the empty elements the batch added to states of one row per sample (all of them, for a batch of no samples).
    """
    lengths = dict(zip(plan.names, before, strict=True))
    for name, value in list_states(inner).items():
        if not rows or grown.get(name) == ROW:
            drop_empty(value, max(lengths.get(name, 0), 0))
    units.update(grown)


class _Plan:
    """What every batch of the wrapper reuses from the first one, as long as the wrapped metric keeps the same states
    and the same ``update`` attribute (a copy re-wraps it; a metric may add states in its first update).

    - ``names``: its states (the lengths of its list states are all the rollback and the growth check need);
    - ``custom``: its states reduced otherwise than by concatenation (``sample_ids`` need none);
    - ``method``: the class's ``update`` when the attribute is torchmetrics' own update wrapper of it, on a metric that
      sets its attributes as torchmetrics does (``None`` otherwise). Then the wrapper runs that method itself with
      that wrapper's bookkeeping, once, instead of through two nested torchmetrics wrappers.
    """

    __slots__ = ("custom", "method", "names", "rows_units", "states", "wrapper")

    def __init__(self, inner: Metric) -> None:
        self.names = tuple(inner._defaults)
        self.rows_units = dict.fromkeys(self.names, ROW)  # ids: every state holds one row per sample
        get = operator.attrgetter(*self.names) if self.names else lambda _: ()
        self.states: Callable[[Metric], tuple[Any, ...]] = get if len(self.names) != 1 else lambda m: (get(m),)
        self.wrapper = inner.__dict__.get("update")
        self.custom = reductions_by_id(inner)
        bound = getattr(self.wrapper, "__wrapped__", None)
        cls = type(inner)
        plain = cls._wrap_update is Metric._wrap_update and cls.__setattr__ is Metric.__setattr__
        own = getattr(self.wrapper, "__code__", None) is _WRAPPER_CODE and getattr(bound, "__self__", None) is inner
        ours = plain and own and getattr(bound, "__func__", None) is cls.update
        self.method: Callable[..., Any] | None = bound if ours else None

    def update(self, inner: Metric, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The wrapped metric's update of one batch: its class's ``update`` with torchmetrics' bookkeeping when
        ``method`` is known, else its ``update`` attribute.
        """
        method = self.method
        if method is None:
            inner.update(*args, **kwargs)
            return
        state = inner.__dict__
        state["_computed"] = None
        state["_update_count"] += 1
        _run_update(inner, method, args, kwargs)

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


class Varlen(GuardedMetric):
    r"""Any torchmetrics metric, synced the way this package's own metrics are.

    Replaces the metric's per-state gathers with one guarded check-in and one exchange for all of its states, whatever
    their reduction (``"cat"``, ``"sum"``, ``"mean"``, ``"max"``, ``"min"``, ``None``, callables), each reduced
    afterwards as torchmetrics reduces it: every rank gets the value of every rank's samples (any number per rank,
    none included; float widths promoted), or a :class:`MetricSyncError` naming the metric and the ranks within
    ``sync_timeout`` seconds, and the next sync every rank enters is exact again. Dedup, as the package's metrics:

    - ``dataset_size=N`` drops the ``DistributedSampler`` padding from every batch before the metric sees it (sum
      states included): rows are counted along dim 0 of the first tensor (or list of samples) among the arguments,
      and every argument with that many rows is cut;
    - ``update(..., sample_ids=ids)`` (one global integer id per sample) counts each id once, in id order, for
      metrics whose states are lists growing by one row per sample (a batch's tensor) or by one element per sample
      (a tensor of its own: an image's boxes in ``MeanAveragePrecision``); for any other, ``update`` says to use
      ``dataset_size``.

    The metric's API is kept (``update``, ``forward``, ``compute``, ``reset``, ``state_dict``, ``plot``), in
    ``MetricCollection`` (compute groups included), ``ClasswiseWrapper(Varlen(metric))``, ``MetricTracker`` and
    Lightning's ``self.log``. The wrapper takes the metric over: use the wrapper afterwards. ``sync_report`` tells
    what the last ``compute()`` evaluated. See ``docs/pages/wrapper.md``.

    Args:
        metric: The metric. Not a wrapper (put ``Varlen`` inside it) and not a metric of this package.
        dataset_size: ``len(dataset)`` of the ``DistributedSampler``, to drop its padding; ``None``: no dedup.
        sync_timeout: Seconds to wait for the other ranks at the check-in; ``None`` waits forever.
        sync_key: The sync identity; needed only when ranks create their metrics in different orders.

    Example:
        >>> from torch import tensor
        >>> from torchmetrics.retrieval import RetrievalMAP
        >>> metric = Varlen(RetrievalMAP(), dataset_size=4)  # one process: the 5th row is sampler padding
        >>> metric.update(tensor([0.9, 0.2, 0.6, 0.8, 0.1]), tensor([1, 0, 0, 1, 1]), indexes=tensor([0, 0, 0, 1, 1]))
        >>> metric.compute()
        tensor(1.)
        >>> metric.sync_report.duplicates_dropped
        1
    """

    full_state_update = False
    varlen_ids: list[Tensor]
    varlen_rows: Tensor
    varlen_padding: Tensor
    varlen_rejected: Tensor
    sync_report: SyncReport | None

    def __init__(
        self,
        metric: Metric,
        dataset_size: int | None = None,
        *,
        sync_timeout: float | None = 60.0,
        sync_key: str | None = None,
    ) -> None:
        wrappable(metric, dataset_size, sync_timeout)
        super().__init__(
            compute_on_cpu=metric.compute_on_cpu,
            process_group=metric.process_group,
            sync_on_compute=metric.sync_on_compute,
            compute_with_cache=metric.compute_with_cache,
            distributed_available_fn=metric.distributed_available_fn,
        )
        self.metric = metric
        self.dataset_size = dataset_size
        self.sync_timeout = sync_timeout
        self.sync_report = None
        self._config = {**inner_config(metric), "metric": self._sync_name_of(metric), "dataset_size": dataset_size}
        metric.sync_on_compute = False  # the wrapper syncs; the metric itself never gathers again
        metric._to_sync = False
        self.add_state("varlen_ids", default=[], dist_reduce_fx="cat")
        for name in _OWN[1:]:
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self._proxied: set[str] = set()
        self.__dict__[_UNITS_KEY] = {}
        self._ledger = Ledger(self._sync_name_of(metric), dataset_size, _OWN[1:])
        self._mirror()
        self._init_sync(sync_key)

    # ------------------------------------------------------------------ the wrapped metric's states, as its own

    def __getattr__(self, name: str) -> Any:
        proxied = self.__dict__.get("_proxied")
        if proxied is not None and name in proxied:
            return getattr(self.__dict__["_modules"]["metric"], name)
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _PLAIN:  # what nn.Module.__setattr__ would do for them, without its checks (per update)
            object.__setattr__(self, name, value)
            return
        proxied = self.__dict__.get("_proxied")
        if proxied is not None and name in proxied:
            setattr(self.__dict__["_modules"]["metric"], name, value)
        else:
            super().__setattr__(name, value)

    def _mirror(self) -> None:
        """Expose the wrapped metric's states as this metric's (``MetricCollection`` compares and shares them)."""
        inner = self.metric
        for name in inner._defaults:
            if name in self._proxied:
                continue
            if name in _OWN or name in self.__dict__ or name in self._modules or hasattr(type(self), name):
                msg = f"Varlen cannot wrap {type(inner).__name__}: its state `{name}` clashes with a Varlen attribute."
                raise ValueError(msg)
            self._defaults[name] = inner._defaults[name]
            self._reductions[name] = inner._reductions[name]
            self._persistent[name] = False  # saved by the wrapped metric itself, under "metric."
            self._proxied.add(name)

    @staticmethod
    def _sync_name_of(metric: Metric) -> str:
        return f"Varlen({type(metric).__name__})"

    def _sync_name(self) -> str:
        return self._sync_name_of(self.metric)

    @property
    def higher_is_better(self) -> bool | None:  # type: ignore[override]
        """The wrapped metric's."""
        return self.metric.higher_is_better

    @property
    def is_differentiable(self) -> bool | None:  # type: ignore[override]
        """The wrapped metric's."""
        return self.metric.is_differentiable

    # ------------------------------------------------------------------ update

    def _wrap_update(self, update: Callable[..., Any]) -> Callable[..., Any]:
        """Torchmetrics' update wrapper (``_computed`` cleared, the count, the grad mode, its device error, the move to
        the CPU) around :meth:`update`, without its per-call cost: the attributes are written directly, the grad mode
        is set only when it differs, and :meth:`update`'s body runs inside it.
        """
        if getattr(update, "__func__", None) is not Varlen.update or getattr(update, "__self__", None) is not self:

            @functools.wraps(update)
            def wrapped_other(*args: Any, **kwargs: Any) -> None:  # a subclass's own update
                state = self.__dict__
                state["_computed"] = None
                state["_update_count"] += 1
                _run_update(self, update, args, kwargs)

            return wrapped_other

        @functools.wraps(update)
        def wrapped_update(*args: Any, sample_ids: Tensor | None = None, **kwargs: Any) -> None:
            state = self.__dict__
            state["_computed"] = None
            state["_update_count"] += 1
            try:
                _run_update(self, self._intake, (args, kwargs, sample_ids, None), {})
            except BaseException:
                state["_update_count"] -= 1  # the failed call does not count as an update
                raise

        return wrapped_update

    def update(self, *args: Any, sample_ids: Tensor | None = None, **kwargs: Any) -> None:
        """Drop the batch's sampler padding (``dataset_size``) or record its ids, then update the wrapped metric.

        A call that raises changes no list state of the wrapped metric (its rows still take their sampler positions,
        counted in ``sync_report.rejected``).
        """
        try:
            self._intake(args, kwargs, sample_ids, None)
        except BaseException:
            self._update_count -= 1  # the failed call does not count as an update
            raise

    def forward(self, *args: Any, sample_ids: Tensor | None = None, **kwargs: Any) -> Any:
        """The wrapped metric's ``forward`` (the batch's own value, no sync; accumulates too), after the padding is
        dropped. A batch made only of padding leaves the wrapped metric untouched and returns ``None``.
        """
        self._computed = None
        value = self._intake(args, kwargs, sample_ids, self.metric.forward)
        self._update_count += 1
        self._forward_cache = value
        return value

    def _filter_kwargs(self, **kwargs: Any) -> dict[str, Any]:
        """The keyword arguments the wrapped metric's ``update`` takes, and ``sample_ids`` (``MetricCollection``)."""
        own = {"sample_ids": kwargs["sample_ids"]} if "sample_ids" in kwargs else {}
        return {**self.metric._filter_kwargs(**kwargs), **own}

    def _intake(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], sample_ids: Tensor | None, call: Callable[..., Any] | None
    ) -> Any:
        """Check, cut and pass one batch to the wrapped metric (``call``: its ``forward``; ``None``: its ``update``),
        all or nothing: a call that raises leaves its list states as they were and counts its rows as rejected.
        """
        state = self.__dict__
        ledger: Ledger = state["_ledger"]
        inner: Metric = state["_modules"]["metric"]
        plan: _Plan | None = state.get(_PLAN_KEY)
        if plan is None or inner.__dict__.get("update") is not plan.wrapper or len(inner._defaults) != len(plan.names):
            plan = state[_PLAN_KEY] = _Plan(inner)
        first = args[0] if args else None
        rows = (first.shape[0] if first.ndim else 1) if type(first) is Tensor else batch_rows(args, kwargs)
        before = [len(v) if isinstance(v, list) else -1 for v in plan.states(inner)]
        kept, ids, stored = rows, None, state["varlen_ids"]
        if sample_ids is not None or type(stored) is not list or stored:  # without ids only an epoch of ids refuses
            ids = self._batch_ids(plan, inner, sample_ids, rows, before)
        if ids is None and ledger.dataset_size is not None:
            kept = ledger.kept_rows(ledger.position(self), rows, self.process_group)
            args, kwargs = cut_batch(args, kwargs, rows, kept)
        count = inner.__dict__["_update_count"]
        snapshot = forward_snapshot(inner) if call is not None and (kept or not rows) else None
        try:
            value = None
            if rows and not kept:
                pass
            elif call is not None:
                value = call(*args, **kwargs)
            else:
                plan.update(inner, args, kwargs)
            units = state[_UNITS_KEY]
            grown = plan.check_growth(inner, before, rows if ids is not None else None, units, self._id_count)
        except BaseException:
            if snapshot is not None:  # torchmetrics' forward reset the states before its update raised
                restore_forward(inner, snapshot)
            lengths = {name: n for name, n in zip(plan.names, before, strict=True) if n >= 0}
            for name, elements in list_states(inner).items():
                del elements[lengths.get(name, 0) :]
            inner._update_count, inner._computed = count, None
            ledger.reject(self, 0, rows)
            raise
        if grown is not None:
            _keep_units(plan, inner, before, rows, grown, units)
        if len(inner._defaults) != len(state["_proxied"]):
            self._mirror()  # states a metric adds in its first update
        if ids is not None:
            self.varlen_ids.append(ids)
        ledger.taken(rows, kept, 0)
        return value

    def _batch_ids(
        self, plan: _Plan, inner: Metric, sample_ids: Tensor | None, rows: int, lengths: list[int]
    ) -> Tensor | None:
        """The batch's ``sample_ids`` checked (``None`` without), and that the epoch's dedup mode takes them; a batch
        refused here counts its rows as rejected.
        """
        state = self.__dict__
        ledger: Ledger = state["_ledger"]
        stored = state["varlen_ids"]
        ids = None
        try:
            if sample_ids is not None:
                ids = plan.sample_ids(sample_ids, rows, inner, lengths)
                where = state["varlen_rows"]
                if not (ids.is_cpu and where.is_cpu):
                    ids = ids.to(where.device)
                ledger.check_ids(ids)
            if ids is None or type(stored) is not list or not stored:  # an epoch of ids takes ids
                ledger.check_mode(self._dedup_mode(), ids is not None)
        except ValueError:
            ledger.reject(self, 0, rows)
            raise
        return ids

    def _id_count(self) -> int:
        """The number of ``sample_ids`` this rank holds."""
        return sum(int(ids.shape[0]) for ids in self.varlen_ids)

    def _dedup_mode(self) -> str | None:
        """``"ids"`` or ``"none"`` once an accepted batch decided it, ``None`` before (:meth:`Ledger.stored_mode`)."""
        return self._ledger.stored_mode(self, "ids", bool(self.varlen_ids))

    def __getstate__(self) -> dict[str, Any]:
        """As torchmetrics'; without the plan (it holds the wrapped metric's ``update``; a copy makes its own)."""
        self.__dict__.pop(_PLAN_KEY, None)
        return super().__getstate__()

    # ------------------------------------------------------------------ sync and compute

    def _local_info(self) -> dict[str, int]:
        return self._ledger.info(self)

    def _sync_payload(self) -> Payload:
        self._mirror()
        inner = self.metric
        device = torch.device("cpu") if self.compute_on_cpu else self.varlen_rows.device
        cat: dict[str, list[Tensor]] = {}
        for name in sorted(inner._defaults):
            cat.update(encode_state(name, getattr(inner, name), inner._reductions[name]))
        cat[_IDS] = list(self.varlen_ids) or [torch.zeros(0, dtype=torch.int64, device=device)]
        ids_mode = self._dedup_mode() == "ids"
        units = self._stored_units() if ids_mode else {}
        modes = {"dedup": Mode(self._dedup_mode(), ("none", "ids"))}
        for name in sorted(inner._defaults):
            if isinstance(inner._defaults[name], list):  # what a sample adds to it: the ranks must agree
                modes[_UNIT_MODE.format(name)] = Mode(units.get(name) or None, UNITS)
        return Payload(cat=cat, device=device, info=self._local_info(), modes=modes)

    def _stored_units(self) -> dict[str, str]:
        """What each list state of the wrapped metric holds per sample id on this rank (:func:`stored_unit`)."""
        count = self._id_count()
        return {name: stored_unit(value, count) for name, value in list_states(self.metric).items()}

    def _sync_receive(self, result: Gathered) -> None:
        inner, what = self.metric, f"{self._sync_name()}.compute()"
        ranks = result.checked.ranks
        ids, elements = None, frozenset[str]()
        if any(r.modes["dedup"] == "ids" for r in ranks):
            ids = as_rows(result.cat[_IDS])
            units = {
                key: next((r.modes[key] for r in ranks if r.modes[key] is not None), None) for key in ranks[0].modes
            }
            elements = self._per_element(lambda name: units.get(_UNIT_MODE.format(name)))
        states = {
            name: decode_state(
                name, None if name in elements else inner._reductions[name], result.cat, result.checked, what
            )
            for name in inner._defaults
        }
        self._set_deduplicated(states, ids, elements)
        self._report(result.checked.info, self._kept, synced=True)

    def _per_element(self, unit: Callable[[str], str | None]) -> frozenset[str]:
        """The wrapped metric's list states de-duplicated element by element, given what each holds per sample."""
        inner = self.metric
        lists = [n for n in inner._defaults if isinstance(inner._defaults[n], list)]
        return frozenset(n for n in lists if per_element(unit(n), inner._reductions[n]))

    def _set_deduplicated(
        self, states: dict[str, Tensor | list[Tensor]], ids: Tensor | None, elements: frozenset[str]
    ) -> None:
        """Set the wrapped metric's states to ``states`` de-duplicated by ``ids`` (:func:`dedup_states`), the states
        de-duplicated element by element (``elements``) then reduced as the metric reduces them (a concatenation).
        """
        inner = self.metric
        states, self._kept = dedup_states(states, ids, self._sync_name(), elements)
        for name, value in states.items():
            if name in elements and value and inner._reductions[name] is dim_zero_cat:
                value = dim_zero_cat(value)
            setattr(inner, name, value)

    _kept: int | None = None  # distinct samples of the last de-duplication (``None``: no ids)

    def _sync_alias_key(self) -> tuple[list[Any], str]:
        # No reuse of syncs across compute-group members (_sync_share_key): a rank decides that alone, from its own
        # data; a joint sync (VarlenCollection) takes shared rows from the other metric rank by rank instead.
        inner = self.metric
        names = sorted(inner._defaults)
        objs = [getattr(inner, n) for n in names] + [getattr(self, n) for n in _OWN]
        return objs, repr([(n, getattr(inner._reductions[n], "__name__", repr(inner._reductions[n]))) for n in names])

    def _report(self, info: list[dict[str, int]] | None, kept: int | None, *, synced: bool) -> None:
        self.sync_report = self._ledger.report(self, info, kept, synced=synced)

    def _wrap_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        return warning_compute(self, super()._wrap_compute(compute))

    def compute(self) -> Any:
        """The wrapped metric's value on every rank's samples (after the sync torchmetrics' wrapper runs)."""
        inner = self.metric
        local: dict[str, Any] = {}
        if not self._is_synced:  # one process, or sync_on_compute=False: this rank's samples, de-duplicated by id
            self._kept = None
            if self.varlen_ids:
                local = {name: getattr(inner, name) for name in inner._defaults}
                units = self._stored_units()
                elements = self._per_element(units.get)
                states = {
                    name: value if name in elements else local_state(value, inner._reductions[name])
                    for name, value in local.items()
                }
                self._set_deduplicated(states, torch.cat(self.varlen_ids), elements)
            self._report(None, self._kept, synced=False)
        try:
            inner._computed = None
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_COMPUTE_WARNING, category=UserWarning)
                return inner.compute()
        finally:
            inner._computed = None
            for name, value in local.items():
                setattr(inner, name, value)

    def reset(self) -> None:
        """Forget every sample (the wrapped metric's states and the wrapper's counters)."""
        super().reset()
        self.metric.reset()
        self._ledger.reset()
        self.__dict__[_UNITS_KEY] = {}
        self.sync_report = None

    def persistent(self, mode: bool = False) -> None:
        """Make the wrapper's and the wrapped metric's states part of ``state_dict()`` (or not)."""
        for name in _OWN:
            self._persistent[name] = mode
        self.metric.persistent(mode)

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        self._ledger.save(self, destination, prefix, self._persistent[_OWN[1]])

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        self._ledger.load(self, state_dict, prefix)
        self.__dict__[_UNITS_KEY] = {}  # read again from the loaded lists
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if any(self._ledger.counts(self)) and not self._update_count:
            self._update_count = 1  # loaded states are updates: compute() must not warn that none happened

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """The wrapped metric's plot of ``val`` (default: the synced value of :meth:`compute`)."""
        return self.metric.plot(val if val is not None else self.compute(), ax=ax)


host_counters(Varlen, _OWN[1:])  # per-batch counts stay host-side ints until the states are read
