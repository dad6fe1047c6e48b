"""``VarlenCollection``: a ``MetricCollection`` whose metrics all sync in one check-in and one exchange."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchmetrics import Metric, MetricCollection
from torchmetrics.wrappers.abstract import WrapperMetric

from torchmetrics_varlen._core.guarded_sync import (
    GroupLayout,
    GuardedMetric,
    Payload,
    SyncRequest,
    check_sync_key,
    distributed_available,
    leave_epoch,
    new_identity,
)
from torchmetrics_varlen._core.joint import sync_together
from torchmetrics_varlen._core.ledger import Ledger
from torchmetrics_varlen._core.report import SyncReport
from torchmetrics_varlen._core.rollback import restore, snapshot
from torchmetrics_varlen._core.wrapped import batch_rows, cut_batch, inner_config
from torchmetrics_varlen.functional._validation import validate_dedup_and_timeout
from torchmetrics_varlen.wrappers import Varlen

_LEDGER = "#ledger."  # the prefix of the collection's counters in its first part's metadata


def _adopt(name: str, metric: Metric) -> Metric:
    """The metric as the collection keeps it: the package's own as they are, any other wrapped in :class:`Varlen`."""
    if isinstance(metric, GuardedMetric):
        return metric
    if isinstance(metric, WrapperMetric):
        if any(isinstance(m, GuardedMetric) for m in _with_inner(metric)):
            return metric  # e.g. ClasswiseWrapper(Varlen(metric)): guarded, synced on its own
        msg = (
            f"Expected the metrics of a VarlenCollection to be metrics or wrappers around Varlen, but got `{name}`:"
            f" {type(metric).__name__} around an unwrapped metric. Put Varlen inside it:"
            f" {type(metric).__name__}(Varlen(metric))."
        )
        raise TypeError(msg)
    return Varlen(metric)


class EpochState:
    """What a :class:`VarlenCollection` tracks within an epoch, written per batch: the dedup mode its first accepted
    batch decided, the version of its states (for the joint sync) and every rank's counters from the last joint
    sync. A plain object (its fields are set without ``nn.Module.__setattr__``).
    """

    __slots__ = ("ledger_info", "member_epochs", "mode", "version")

    def __init__(self) -> None:
        self.mode: str | None = None
        # each member's guarded metrics and their ``_sync_epoch`` when the epoch's first batch reached them: a member
        # whose count moved on was reset on its own (Lightning's ``log_dict(collection)`` resets every member)
        self.member_epochs: list[tuple[Any, int]] | None = None
        self.version = 0  # update() / forward() calls since the epoch began: changes whenever the states do
        self.ledger_info: list[dict[str, int]] | None = None


class VarlenCollection(MetricCollection):
    r"""A ``MetricCollection`` whose metrics sync together: one guarded check-in and one data exchange per
    ``compute()``, for the package's own metrics and any torchmetrics metric alike.

    Takes what ``MetricCollection`` takes (a dict, a list, or a whole ``MetricCollection``); every metric that is not
    one of this package's is wrapped in :class:`Varlen`. ``compute()`` then fetches the states of every metric in
    one exchange (a compute group's shared states travel once) and each metric computes from them; torchmetrics
    would gather every state of every metric separately. The guard is the package's: every rank gets the values, or
    every rank gets a :class:`MetricSyncError` naming the ranks (and, when configurations differ, the metric and
    setting). Metrics that gather to one rank (``compute_on_rank``) or compute sharded, wrappers such as
    ``ClasswiseWrapper(Varlen(metric))``, and metrics on another process group sync on their own, after it.

    Args:
        metrics: As for ``MetricCollection``.
        additional_metrics: As for ``MetricCollection``.
        prefix: As for ``MetricCollection``.
        postfix: As for ``MetricCollection``.
        compute_groups: As for ``MetricCollection``.
        dataset_size: ``len(dataset)`` of the ``DistributedSampler``: its padding is dropped from every batch before
            any metric sees it (unless the batch carries ``sample_ids``).
        sync_timeout: Seconds to wait for the other ranks at the joint check-in; ``None`` waits forever.
        sync_key: The joint sync's identity; needed only when ranks create their collections in different orders.

    Example:
        >>> from torch import tensor
        >>> from torchmetrics.classification import BinaryAccuracy
        >>> from torchmetrics_varlen import VarlenAUROC
        >>> metrics = VarlenCollection({"auroc": VarlenAUROC(), "acc": BinaryAccuracy()}, dataset_size=4)
        >>> metrics.update(tensor([0.9, 0.2, 0.6, 0.3]), tensor([1, 0, 1, 0]))  # one process: no sampler padding
        >>> {name: float(value) for name, value in metrics.compute().items()}
        {'acc': 1.0, 'auroc': 1.0}
    """

    def __init__(
        self,
        metrics: Metric | MetricCollection | Sequence[Metric | MetricCollection] | dict[str, Metric | MetricCollection],
        *additional_metrics: Metric,
        prefix: str | None = None,
        postfix: str | None = None,
        compute_groups: bool | list[list[str]] = True,
        dataset_size: int | None = None,
        sync_timeout: float | None = 60.0,
        sync_key: str | None = None,
    ) -> None:
        validate_dedup_and_timeout(dataset_size, sync_timeout)
        self.dataset_size = dataset_size  # before the metrics are added (``add_metrics``)
        self._ledger = Ledger("VarlenCollection", dataset_size)  # sampler positions, counters, report, warning
        super().__init__(metrics, *additional_metrics, prefix=prefix, postfix=postfix, compute_groups=compute_groups)
        self.sync_timeout = sync_timeout
        check_sync_key(sync_key)
        self._sync_base = sync_key or "VarlenCollection"
        self._sync_identity = new_identity(self._sync_base)
        self._epoch = EpochState()  # written per batch: a plain object, not module attributes
        self.sync_report: SyncReport | None = None
        self._sync_epoch = 0  # reset() calls so far: the joint sync's epoch

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy (``clone``, ``deepcopy``, unpickling) is a new collection: a new sync identity."""
        super().__setstate__(state)  # type: ignore[no-untyped-call]
        self._sync_identity = new_identity(self._sync_base)

    def add_metrics(self, metrics: Any, *additional_metrics: Metric) -> None:
        """Add metrics as ``MetricCollection`` does, wrapping every metric that is not the package's in ``Varlen``."""
        super().add_metrics(metrics, *additional_metrics)
        for name in list(self._modules):
            metric = self._modules[name]
            if isinstance(metric, Metric):
                self._modules[name] = _adopt(name, metric)
        cut_by = self._ledger if self.dataset_size is not None else None
        for _, guard in self._member_guards():
            # A member computed on its own (Lightning's ``log_dict(collection)``) reports, checks the padding and
            # warns against the collection's dataset_size: the collection cut the padding of the batches it got.
            guard._ledger.cut_by = cut_by

    # ------------------------------------------------------------------ batches

    def _take(self, args: tuple[Any, ...], kwargs: dict[str, Any], call: Any, forward: bool = False) -> Any:
        """Drop the batch's sampler padding (the ledger's rule) and pass it to ``call`` (the collection's update, or
        with ``forward`` its forward), all or nothing across the members (:meth:`_all_or_nothing`); ``{}`` if all
        padding.
        """
        self._follow_member_resets()
        ledger, ids = self._ledger, kwargs.get("sample_ids")
        self._epoch.ledger_info = None  # new rows: the last joint sync's counters are stale
        out: Any = {}
        with ledger.batch(self, batch_rows(args, kwargs)) as batch:  # refused (it raises): its rows rejected
            if kwargs:
                self._check_keywords(kwargs, "forward" if forward else "update")
            ledger.check_mode(self._epoch.mode, ids is not None)
            if ids is not None:
                ledger.check_ids(ids)
            rows = batch.rows
            kept = rows if ids is not None else batch.cut()
            if kept < rows:  # the members may be computed one by one (log_dict): no compute() of the collection
                ledger.check_rank_padding(batch.process_group, ledger.own[1] + rows - kept)
            if kept or not rows:
                args, kwargs = cut_batch(args, kwargs, rows, kept)
                out = self._all_or_nothing(call, args, kwargs, forward, kept)
            else:  # all sampler padding: no member takes it, but every member's cached value is stale, as after
                # an update (a rank whose batch was real syncs at its next compute(); this one must sync with it)
                self._drop_cached_values()
        epoch = self._epoch
        epoch.mode = epoch.mode or ("ids" if ids is not None else "none")
        return out

    def _check_keywords(self, kwargs: dict[str, Any], method: str) -> None:
        """Raise on a keyword argument that no metric takes (``MetricCollection`` gives each metric the keywords its
        ``update`` takes and drops the rest: a misspelt ``sample_id=`` would silently turn the dedup off).
        """
        taken = {key for metric in self._modules.values() for key in metric._filter_kwargs(**kwargs)}
        unknown = sorted(set(kwargs) - taken)
        if unknown:
            msg = (
                f"VarlenCollection.{method}() got the keyword argument(s) {unknown}, which none of its metrics takes;"
                " check the spelling (e.g. `sample_ids`, `sample_weight`). The batch was not added."
            )
            raise TypeError(msg)

    def _all_or_nothing(
        self, call: Any, args: tuple[Any, ...], kwargs: dict[str, Any], forward: bool, rows: int
    ) -> Any:
        """``call(*args, **kwargs)``; when several metrics take the batch (compute groups in ``update``, every metric
        in ``forward``) and one refuses it (or fails after taking it), every metric is put back as it was
        (``_core/rollback.py``), cached values included, so that the batch reaches none of them; its ``rows``
        count as rejected in each.
        """
        groups = self.compute_groups  # before the groups are formed, each metric is a group of its own
        takers: list[Any]
        if forward or not groups:  # every metric takes it (forward, or no compute groups)
            takers = list(self._modules.values())
        else:  # each compute group's first metric (the others share its states)
            takers = [getattr(self, group[0]) for group in groups.values()]
        if len(takers) < 2:  # one metric (or compute group) takes it: its own update is all or nothing
            return call(*args, **kwargs)
        # The tensors each update may write in place are copied, except the last one's: its own update is all or
        # nothing (a refusal writes only its counters, always copied). Each metric's forward resets it first.
        last = takers[-1]
        before = [
            (m, snapshot(m, update=not forward, tensors=False if metric is last and not forward else None))
            for metric in takers
            for m in _with_inner(metric)
        ]
        try:
            return call(*args, **kwargs)
        except BaseException:
            for metric, saved in before:
                restore(metric, saved, rows, keep_cached=True)
            raise

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Drop the batch's sampler padding (``dataset_size``), then update every metric (or compute group): a batch
        one of them refuses reaches none of them.
        """
        self._epoch.version += 1
        self._take(args, kwargs, super().update)

    def _drop_cached_values(self) -> None:
        """Every member's cached value dropped, as ``MetricCollection.update`` does, as the plain attribute it is."""
        for metric in self._modules.values():
            metric.__dict__["_computed"] = None

    @staticmethod
    def _equal_metric_states(metric1: Metric, metric2: Metric) -> bool:
        """As torchmetrics (equal states after the first batch), and only between metrics that turn a batch into
        states by the same rules (:func:`_same_intake`): a compute group's later batches are taken by its first
        metric alone, so a member with another ``ignore_index``, ``normalization``, ``validate_args`` or
        ``dataset_size`` would get them by the first one's rules (refusals and values changed silently).
        """
        return _same_intake(metric1, metric2) and MetricCollection._equal_metric_states(metric1, metric2)

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Drop the batch's sampler padding, then every metric's ``forward`` (batch values, no sync), all or nothing
        across the metrics; a batch made only of padding reaches no metric and gives ``{}``.
        """
        self._epoch.version += 1
        out: dict[str, Any] = self._take(args, kwargs, super().forward, forward=True)
        return out

    def reset(self) -> None:
        """Reset every metric, the sampler position and the counters."""
        super().reset()
        self._new_epoch()

    def _new_epoch(self) -> None:
        """Sampler positions from 0, counters cleared, the next joint sync in a new epoch (the members are reset)."""
        guards = self._member_guards()
        if guards:  # ranks still waiting at this epoch's joint sync learn at once that this rank left it
            leave_epoch(guards[0][1].process_group, self._sync_identity, self._sync_epoch)
        self._ledger.reset()
        self._epoch = EpochState()  # sync_report stays, as a metric's does, until the next compute
        self._sync_epoch += 1

    def _follow_member_resets(self) -> None:
        """Start a new epoch once every member was reset on its own since this epoch's first batch.

        Lightning's ``self.log_dict(collection)`` computes and resets each member, never the collection (so does any
        loop over ``collection.items()``): the collection's sampler positions must restart with them, or the next
        epoch's rows would be cut as padding. When only some members were reset and ``dataset_size`` cuts padding,
        no position is right for all of them: raise, rather than cut one of them wrongly.
        """
        epoch = self._epoch
        if epoch.member_epochs is None:
            epoch.member_epochs = [(g, g._sync_epoch) for _, g in self._member_guards()]
            return
        moved = {id(g) for g, e in epoch.member_epochs if g._sync_epoch != e}
        if not moved:
            return
        if len(moved) < len(epoch.member_epochs) and self.dataset_size is not None:
            named = self._member_guards()
            reset = sorted(name for name, g in named if id(g) in moved)
            kept = sorted(name for name, g in named if id(g) not in moved)
            msg = (
                f"VarlenCollection(dataset_size={self.dataset_size}): the metric(s) {reset} were reset on their own,"
                f" but {kept} were not, so the collection cannot tell where the epoch starts for its sampler padding."
                " Reset the whole collection (collection.reset()), or log every metric with"
                " self.log_dict(collection), which resets each; to log one metric alone, give it its own"
                " `dataset_size=` and keep it out of the collection."
            )
            raise ValueError(msg)
        self._new_epoch()
        self._epoch.member_epochs = [(g, g._sync_epoch) for _, g in self._member_guards()]

    def _member_guards(self) -> list[tuple[str, GuardedMetric]]:
        """Each member's name and guarded metric (itself, or the ``Varlen`` inside a wrapper: ``ClasswiseWrapper``)."""
        found = []
        for name, metric in self._modules.items():
            guard = next((m for m in _with_inner(metric) if isinstance(m, GuardedMetric)), None)
            if guard is not None:
                found.append((name, guard))
        return found

    def persistent(self, mode: bool = True) -> None:
        """As ``MetricCollection.persistent``; the collection's sampler position and counters follow."""
        super().persistent(mode)
        self._ledger.persistent = mode

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        self._ledger.save(self, destination, prefix, self._ledger.persistent)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        self._ledger.load(self, state_dict, prefix)
        epoch = self._epoch
        epoch.mode, epoch.ledger_info = None, None
        epoch.version += 1  # loaded states are new states
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # ------------------------------------------------------------------ the joint sync

    def compute(self) -> dict[str, Any]:
        """Every metric's value, after one joint sync of all of their states."""
        members = self._sync_members()
        # the collection warns for its members (below), once: they stay quiet in this compute
        quiet = [(g._ledger, g._ledger.warned) for _, g in self._member_guards() if g._ledger.cut_by is not None]
        for ledger, _ in quiet:
            ledger.warned = True
        try:
            values = super().compute()
        finally:
            for metric in members:
                metric._pending_sync = None
            for ledger, warned in quiet:
                ledger.warned = warned
        self._report()
        self._refuse_direct_updates()
        self._ledger.warn(self.sync_report)
        return values

    def _refuse_direct_updates(self) -> None:
        """With ``dataset_size``, the collection drops the padding of the batches it is given; members that hold
        samples when no rank gave it one were updated directly (``collection["map"].update(...)``), their padding kept
        and counted: raise on every rank (each knows every rank's counts after the joint sync) instead of that value.
        """
        report = self.sync_report
        if self.dataset_size is None or report is None or report.kept <= 0 or any(report.seen_per_rank):
            return
        msg = (
            f"Expected the metrics of VarlenCollection(dataset_size={self.dataset_size}) to be updated through the"
            f" collection, but no rank gave it a batch while its metrics hold {report.kept} samples: a metric updated"
            " directly (collection[name].update(...)) keeps the DistributedSampler's padding. Call"
            " collection.update(...), or, for metrics whose update() takes different arguments, give each its own"
            " `dataset_size=` (the package's classes, or Varlen(metric, dataset_size=N)) and none to the collection."
        )
        raise ValueError(msg)

    def _report(self) -> None:
        """The collection's ``sync_report``: its own counters (every rank's, after a joint sync) and the distinct
        samples a member evaluated (ids mode).
        """
        reports: list[SyncReport] = [
            r for m in self._modules.values() for r in (getattr(m, "sync_report", None),) if r is not None
        ]
        synced = [r for r in reports if r.world_size > 1]
        epoch = self._epoch
        if epoch.ledger_info is None and synced:  # no joint sync: the members synced on their own, and know it all
            self.sync_report = synced[0]
            return
        # A rank without an accepted batch (``_mode`` None) does not know the epoch's mode, but after the joint sync
        # its members know the distinct samples: their count stands (without ids it equals what they received).
        known = epoch.mode == "ids" or (epoch.mode is None and epoch.ledger_info is not None)
        kept = reports[0].kept if reports and known else None
        self.sync_report = self._ledger.report(self, epoch.ledger_info, kept, synced=epoch.ledger_info is not None)

    def _sync_members(self) -> list[GuardedMetric]:
        """Fetch the states of every metric that joins the joint sync; each will take its part in ``compute()``."""
        members = [
            (name, m)
            for name, m in self._modules.items()
            if isinstance(m, GuardedMetric) and m.sync_on_compute and m._joins_collection_sync()
        ]
        if not members or not distributed_available() or all(m._computed is not None for _, m in members):
            return []  # nothing to sync, or every value cached (torchmetrics' rule: no sync)
        layout = GroupLayout.of(members[0][1].process_group)
        members = [(n, m) for n, m in members if GroupLayout.of(m.process_group).name == layout.name]
        firsts: dict[tuple[Any, ...], str] = {}
        parts: dict[str, Payload] = {}
        aliases: dict[str, str] = {}
        config: dict[str, Any] = {}
        for name, metric in members:
            parts[name] = metric._sync_payload()
            config.update({f"{name}.{k}": v for k, v in metric._config.items()})
            key = metric._sync_alias_key()
            if key is not None:  # a compute-group member on this rank: the first member's rows are its rows
                first = firsts.setdefault((tuple(id(o) for o in key[0]), key[1]), name)
                if first != name:
                    aliases[name] = first
        request = SyncRequest(
            layout=layout,
            identity=self._sync_identity,
            config=config,
            timeout=self.sync_timeout,
            what=f"VarlenCollection({', '.join(n for n, _ in members)}).compute()",
            fix=(
                "Call compute() of the collection (or log it) on every rank of its process group, not only on rank 0."
                " If the ranks create their collections in different orders, give each the same `sync_key`."
            ),
            epoch=self._sync_epoch,
            version=self._epoch.version,
        )
        first = members[0][0]  # the collection's own counters travel with its first part's
        parts[first].info.update({_LEDGER + k: v for k, v in self._ledger.info(self).items()})
        results = sync_together(request, parts, aliases)
        self._epoch.ledger_info = [
            {k[len(_LEDGER) :]: v for k, v in info.items() if k.startswith(_LEDGER)}
            for info in results[first].checked.info
        ]
        for name, metric in members:
            metric._computed = None
            metric._pending_sync = results[name]
        return [metric for _, metric in members]


# The settings of the package's metrics that decide how ``update`` turns a batch into states (``max_fpr``,
# ``average`` and the like only change what ``compute`` makes of them: metrics differing there still share).
_INTAKE = ("task", "num_classes", "num_labels", "ignore_index", "normalization", "validate_args", "mode")


def _same_intake(metric1: Metric, metric2: Metric) -> bool:
    """Whether two members take a batch by the same rules: the package's metrics by their :data:`_INTAKE` settings,
    their ``update`` and ``dataset_size``; wrapped torchmetrics metrics by the public settings both have (so that
    ``BinaryAccuracy`` and ``BinaryF1Score`` with the same threshold still share their states) and ``dataset_size``.
    """
    if isinstance(metric1, Varlen) != isinstance(metric2, Varlen):
        return False
    sizes = {getattr(getattr(m, "_ledger", None), "dataset_size", None) for m in (metric1, metric2)}
    if len(sizes) > 1:
        return False
    if isinstance(metric1, Varlen) and isinstance(metric2, Varlen):
        first, second = inner_config(metric1.metric), inner_config(metric2.metric)
        return all(first[key] == second[key] for key in first.keys() & second.keys())
    if type(metric1).update is not type(metric2).update:
        return False
    return all(getattr(metric1, key, None) == getattr(metric2, key, None) for key in _INTAKE)


def _with_inner(metric: Metric) -> list[Metric]:
    """A collection's metric and the metrics inside it (``Varlen``'s wrapped metric holds the states, and so do
    those inside a wrapper such as ``ClasswiseWrapper(Varlen(metric))``), outermost first.

    Not ``metric.modules()``: it keeps a set of the modules it met, and torchmetrics' ``Metric.__hash__`` hashes
    every tensor of every state, O(stored pieces) per call.
    """
    found: list[Metric] = []
    pending: list[torch.nn.Module] = [metric]
    while pending:
        module = pending.pop(0)
        if isinstance(module, Metric):
            found.append(module)
        pending.extend(child for child in module._modules.values() if child is not None)
    return found
