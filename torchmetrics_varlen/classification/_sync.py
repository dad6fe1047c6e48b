"""The sync half of the package's metrics: one guarded exchange, three ways to compute after it, one cache.

``_SyncedMetric`` replaces torchmetrics' per-state gathers (``_sync_dist``) and wraps ``compute``. It knows the
states only through the few hooks its subclass (``_VarlenMetric``) implements: ``_pieces``, ``_local_info``,
``_dedup_mode`` and ``_compute_sharded``.

The three compute strategies share one seam and torchmetrics' own compute wrapper (its result cache included):
``_sync_dist`` checks in and moves the data the strategy needs, then the wrapped ``compute`` finishes:

- **gather to all** (default): every rank receives every state and computes;
- **gather to one rank** (``compute_on_rank``): that rank receives and computes, and sends the value to the others;
- **sharded** (``compute_sharded``): no state moves at the sync; the computation itself is distributed.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from torchmetrics_varlen._dedup import SyncReport
from torchmetrics_varlen._dist.exchange import CheckedIn, Gathered, Mode, SyncRequest, broadcast_value, sync_states
from torchmetrics_varlen._dist.exchange import check_in_states as _check_in_states
from torchmetrics_varlen._dist.group import GroupLayout, distributed_available
from torchmetrics_varlen._dist.guard import Ticket, new_identity

_COUNTERS = ("num_samples", "rows_seen", "padding_dropped", "rejected")
_DEDUP = ("none", "ids")


class _SharedSyncs:
    """Syncs that the metrics of one torchmetrics compute group share (AUROC, AP, curves in one collection).

    Metrics of a compute group hold the very same state lists, so the first of them to compute syncs and the
    others reuse its result, as long as no batch was added in between. Lifetime of an entry: from its sync until
    the next ``update()`` or ``reset()`` of any metric of the package in this process, or until a newer sync of
    states of the same kind replaces it, whichever comes first. So after an evaluation at most one gathered copy
    per compute group stays alive, until the next evaluation's first ``update()`` frees it.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], tuple[list[Any], list[int], Gathered]] = {}

    @staticmethod
    def _lengths(objs: list[Any]) -> list[int]:
        return [len(o) if isinstance(o, list) else int(o.sum()) for o in objs]

    def find(self, key: tuple[Any, ...], objs: list[Any]) -> Gathered | None:
        """The sync of exactly these state objects, if they have not changed since."""
        entry = self._entries.get(key)
        if entry is None or any(a is not b for a, b in zip(entry[0], objs, strict=True)):
            return None
        return entry[2] if entry[1] == self._lengths(objs) else None

    def drop_superseded(self, key: tuple[Any, ...]) -> None:
        """Forget older syncs of the same kind, so that their buffers are freed before a new one is allocated."""
        for stale in [k for k in self._entries if k[1:] == key[1:]]:
            del self._entries[stale]

    def keep(self, key: tuple[Any, ...], objs: list[Any], result: Gathered) -> None:
        """Remember a sync for the other metrics of the compute group."""
        self._entries[key] = (objs, self._lengths(objs), result)

    def clear(self) -> None:
        """Forget every sync (any update or reset of a metric of the package)."""
        self._entries.clear()


SHARED_SYNCS = _SharedSyncs()


class _SyncedMetric(Metric):
    """Sync machinery; see the module docstring."""

    num_samples: Tensor
    sync_timeout: float | None
    compute_on_rank: int | None
    compute_sharded: bool
    sync_report: SyncReport | None
    _summed: str | None
    _row_extras: tuple[str, ...]
    _config: dict[str, Any]
    _synced_info: list[dict[str, int]] | None
    _sync_base: str
    _sync_identity: str
    _checked: CheckedIn | None

    def _init_sync(self, sync_key: str | None) -> None:
        """Give the metric its sync identity: ``sync_key``, or its class and creation order (see ``guard.py``)."""
        if sync_key is not None and (not isinstance(sync_key, str) or not sync_key or "/" in sync_key):
            msg = f"Expected argument `sync_key` to be a non-empty string without '/', or None, but got {sync_key!r}."
            raise ValueError(msg)
        self._sync_base = sync_key or type(self).__name__
        self._sync_identity = new_identity(self._sync_base)
        self._checked = None
        self._synced_info = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy (``deepcopy``, ``clone``, unpickling in a spawned process) is a new metric: a new identity."""
        super().__setstate__(state)
        self._sync_identity = new_identity(self._sync_base)

    # ------------------------------------------------------------------ hooks of the subclass

    def _pieces(self, name: str) -> list[Tensor]:
        raise NotImplementedError

    def _local_info(self) -> dict[str, int]:
        raise NotImplementedError

    def _dedup_mode(self) -> str | None:
        raise NotImplementedError

    def _compute_sharded(self, checked: CheckedIn) -> Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ sync

    def _sync_fix(self) -> str:
        name = type(self).__name__
        return (
            f"Call {name}.compute() (or log the metric) on every rank of its process group, not only on rank 0;"
            " use sync_on_compute=False for a rank-local value. If the ranks create their metrics in different"
            " orders, give each metric the same `sync_key` on every rank."
        )

    def _request(self, process_group: Any | None) -> SyncRequest:
        return SyncRequest(
            layout=GroupLayout.of(process_group or self.process_group),
            identity=self._sync_identity,
            config=self._config,
            timeout=self.sync_timeout,
            what=f"{type(self).__name__}.compute()",
            fix=self._sync_fix(),
        )

    def _copy_state_dict(self) -> dict[str, list[Tensor] | Tensor]:
        """Shallow copies of the list states instead of torchmetrics' clone of every stored batch.

        Stored batches are never modified in place (``reset()`` empties the list, not the tensors), so a new list
        holding the same tensors is a faithful snapshot for ``unsync()`` and ``forward()``, without a second copy of
        every prediction. Tensor states (counters, binned counts) are small: they are cloned.
        """
        return {
            attr: list(value) if isinstance(value, list) else value.detach().clone()
            for attr in self._defaults
            for value in (getattr(self, attr),)
        }

    def _sync_dist(self, dist_sync_fn: Callable[..., Any] | None = None, process_group: Any | None = None) -> None:
        """One guarded check-in, then the data movement of the compute strategy (replaces torchmetrics' gathers).

        ``dist_sync_fn`` is not used.
        """
        request = self._request(process_group)
        if self.compute_on_rank is not None and self.compute_on_rank >= request.layout.world:
            msg = (
                f"{type(self).__name__}: compute_on_rank={self.compute_on_rank} but the process group has"
                f" {request.layout.world} ranks; use a rank between 0 and {request.layout.world - 1}."
            )
            raise ValueError(msg)
        names = ("preds", "target", "ids", "ids_sub", *self._row_extras) if self._summed is None else ()
        cat = {name: self._pieces(name) for name in names}
        # Counters travel with the metadata; only the binned / 16-bit counts need an all-reduce.
        summed = {} if self._summed is None else {self._summed: getattr(self, self._summed)}
        device = cat["preds"][0].device if cat else next(iter(summed.values())).device
        info = {**self._local_info(), "num_samples": int(self.num_samples)}
        modes = {"dedup": Mode(self._dedup_mode(), _DEDUP)}
        if self.compute_sharded and self._summed is None:
            self._checked = _check_in_states(request, cat, {}, device=device, info=info, modes=modes)
            self._synced_info = self._checked.info
            return
        result = self._shared_sync(request, cat, summed, device, info, modes)
        for key, value in {**result.cat, **result.summed}.items():
            setattr(self, key, value)
        for key in _COUNTERS:
            setattr(self, key, self.num_samples.new_tensor(sum(i[key] for i in result.checked.info)))
        self._checked = result.checked
        self._synced_info = result.checked.info

    def _shared_sync(
        self,
        request: SyncRequest,
        cat: dict[str, list[Tensor]],
        summed: dict[str, Tensor],
        device: torch.device,
        info: dict[str, int],
        modes: dict[str, Mode],
    ) -> Gathered:
        """Sync, or reuse the sync another metric of the same compute group just did on these very state lists."""
        names = ("preds", "target", "ids", "ids_sub", *self._row_extras) if self._summed is None else (self._summed,)
        objs = [getattr(self, n) for n in names]
        state_config = {
            k: v
            for k, v in self._config.items()
            if k
            in ("task", "num_classes", "num_labels", "thresholds", "ignore_index", "dataset_size", "compute_on_rank")
        }
        key = (tuple(id(o) for o in objs), repr(sorted(state_config.items())), request.layout.name)
        found = SHARED_SYNCS.find(key, objs)
        if found is not None:
            return found
        SHARED_SYNCS.drop_superseded(key)
        result = sync_states(
            request,
            cat,
            summed,
            device=device,
            info=info,
            modes=modes,
            dst=self.compute_on_rank if self._summed is None else None,
            concat=False,
        )
        SHARED_SYNCS.keep(key, objs, result)
        return result

    # ------------------------------------------------------------------ compute

    def _wrap_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        """Torchmetrics' compute wrapper (sync context, result cache) around the strategy's compute.

        Plus: no "compute before update" warning on a rank that legitimately saw no data, and if the computation
        fails after the sync, the states are put back (torchmetrics' sync context would leave them synced, and
        the next ``compute()`` would fail with "already synced").
        """

        @functools.wraps(compute)
        def strategy_compute(*args: Any, **kwargs: Any) -> Any:
            checked = self._checked
            if not self._is_synced or checked is None:
                return compute(*args, **kwargs)
            if self.compute_sharded and self._summed is None:
                return self._compute_sharded(checked)
            if self.compute_on_rank is not None and self._summed is None:
                return self._compute_on_one_rank(checked.ticket, compute, *args, **kwargs)
            return compute(*args, **kwargs)

        wrapped = super()._wrap_compute(strategy_compute)

        @functools.wraps(compute)
        def wrapped_compute(*args: Any, **kwargs: Any) -> Any:
            try:
                if self._update_count or not (self._to_sync and distributed_available()):
                    return wrapped(*args, **kwargs)
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=r"The ``compute`` method of metric", category=UserWarning)
                    return wrapped(*args, **kwargs)
            except BaseException:
                if self._is_synced:
                    self.unsync()
                raise
            finally:
                self._checked = None

        return wrapped_compute

    def _compute_on_one_rank(self, ticket: Ticket, compute: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Rank ``compute_on_rank`` computes on every sample; the value and the report travel to the others."""
        dst = int(self.compute_on_rank or 0)

        def on_dst() -> tuple[Any, dict[str, Any]]:
            value = compute(*args, **kwargs)
            report = dataclasses.asdict(self.sync_report) if self.sync_report is not None else {}
            return value, report

        value, report = broadcast_value(ticket, dst, on_dst, self.num_samples.device, key=self._sync_identity)
        if report:
            report["seen_per_rank"] = tuple(report["seen_per_rank"])
            self.sync_report = SyncReport(**report)
        return value
