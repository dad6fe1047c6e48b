"""``Varlen``: any torchmetrics metric, synced like the package's own metrics, with sampler-padding dedup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from torchmetrics_varlen._core.guarded_sync import (
    Agreed,
    Gathered,
    GuardedMetric,
    Payload,
    fresh_lists,
    own_list_states,
)
from torchmetrics_varlen._core.ledger import Ledger, warning_compute
from torchmetrics_varlen._core.report import SyncReport
from torchmetrics_varlen._core.states import (
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
    inner_config,
    list_states,
    wrappable,
)
from torchmetrics_varlen._core.wrapped_intake import UpdatePlan, take_wrapped_batch

_OWN: tuple[str, str, str, str] = ("varlen_ids", "varlen_rows", "varlen_padding", "varlen_rejected")
_IDS = "#ids"  # the wire name of the ids (never a state name of the wrapped metric)
_UNIT_MODE = "{} per sample"  # the sync's mode of each list state: what a sample adds to it (``_states.UNITS``)


def _own_loaded_lists(module: Varlen, incompatible: Any) -> None:
    """After ``load_state_dict``: the wrapped metric's list states are its own lists, not the state_dict's (which its
    next batches would append to: the same state_dict loaded again would hold them too).
    """
    own_list_states(module.metric)


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
        >>> metric = Varlen(RetrievalMAP(), dataset_size=5)  # len(dataset): samples, not batches
        >>> metric.update(tensor([0.9, 0.2, 0.6, 0.8, 0.1]), tensor([1, 0, 0, 1, 1]), indexes=tensor([0, 0, 0, 1, 1]))
        >>> metric.compute()
        tensor(1.)
        >>> metric.sync_report.kept, metric.sync_report.missing
        (5, 0)
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
        self.add_state("varlen_ids", default=[], dist_reduce_fx="cat")
        for name in _OWN[1:]:
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self._proxied: set[str] = set()
        self._units: dict[str, str] = {}  # with ids: what each list state of the metric holds per sample (ROW ...)
        self._plan: UpdatePlan | None = None  # what every batch reuses (``_core/wrapped_intake.py``; not pickled)
        self._ledger = Ledger(self._sync_name_of(metric), dataset_size, _OWN[1:])
        self._mirror()
        self._init_sync(sync_key)
        self.register_load_state_dict_post_hook(_own_loaded_lists)  # type: ignore[no-untyped-call]  # (torch's)

    # ------------------------------------------------------------------ the wrapped metric's states, as its own

    def __getattr__(self, name: str) -> Any:
        proxied = self.__dict__.get("_proxied")
        if proxied is not None and name in proxied:
            return getattr(self.__dict__["_modules"]["metric"], name)
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
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

    def update(self, *args: Any, sample_ids: Tensor | None = None, **kwargs: Any) -> None:
        """Drop the batch's sampler padding (``dataset_size``) or record its ids, then update the wrapped metric.

        A call that raises changes no list state of the wrapped metric (its rows still take their sampler positions,
        counted in ``sync_report.rejected``).
        """
        self._intake(args, kwargs, sample_ids, None)

    def forward(self, *args: Any, sample_ids: Tensor | None = None, **kwargs: Any) -> Any:
        """The wrapped metric's ``forward`` (the batch's own value, no sync; accumulates too), after the padding is
        dropped. A batch made only of padding leaves the wrapped metric untouched and returns ``None``.
        """
        self._computed = None
        # the wrapped metric's batch value: its own batch, no sync (its ``dist_sync_on_step`` is False)
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
        """Check, cut and pass one batch to the wrapped metric, all or nothing (``_core/wrapped_intake.py``)."""
        return take_wrapped_batch(self, args, kwargs, sample_ids, call)

    def _id_count(self) -> int:
        """The number of ``sample_ids`` this rank holds."""
        return sum(int(ids.shape[0]) for ids in self.varlen_ids)

    def _dedup_mode(self) -> str | None:
        """``"ids"`` or ``"none"`` once an accepted batch decided it, ``None`` before (:meth:`Ledger.stored_mode`)."""
        return self._ledger.stored_mode(self, "ids", bool(self.varlen_ids))

    def __getstate__(self) -> dict[str, Any]:
        """As torchmetrics'; without the plan (it holds the wrapped metric's ``update``; a copy makes its own)."""
        state = super().__getstate__()
        state["_plan"] = None
        return state

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
        modes = {"dedup": Agreed(self._dedup_mode(), ("none", "ids"))}
        for name in sorted(inner._defaults):
            if isinstance(inner._defaults[name], list):  # what a sample adds to it: the ranks must agree
                modes[_UNIT_MODE.format(name)] = Agreed(units.get(name) or None, UNITS)
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
        if not self._synced:  # one process, or sync_on_compute=False: this rank's samples, de-duplicated by id
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
            # The wrapped metric's own compute, not torchmetrics' wrapper around it: the states are synced already
            # (or local), so no second sync, no cached value left on the user's metric; this wrapper squeezes and
            # clones the value as torchmetrics' does.
            return type(inner).compute(inner)
        finally:
            for name, value in local.items():
                setattr(inner, name, value)

    def reset(self) -> None:
        """Forget every sample (the wrapped metric's states and the wrapper's counters); ``sync_report`` stays until
        the next ``compute()``, as the package's metrics keep theirs (Lightning resets right after computing).
        """
        super().reset()
        fresh_lists(self.metric)
        self.metric.reset()
        self._ledger.reset()
        self._units = {}

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
        self._units = {}  # read again from the loaded lists
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if any(self._ledger.counts(self)) and not self._update_count:
            self._update_count = 1  # loaded states are updates: compute() must not warn that none happened

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """The wrapped metric's plot of ``val`` (default: the synced value of :meth:`compute`)."""
        return self.metric.plot(val if val is not None else self.compute(), ax=ax)
