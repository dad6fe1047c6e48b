"""The sync half of the package's metrics: one guarded exchange, shared by a compute group, or gathered to one rank.

``_SyncedMetric`` replaces torchmetrics' per-state gathers (``_sync_dist``) and wraps ``compute``. It knows the
states only through the few hooks its subclass (``_VarlenMetric``) implements: ``_pieces``, ``_local_info`` and
``_dedup_mode``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor
from torchmetrics import Metric

from torchmetrics_varlen._dedup import SyncReport
from torchmetrics_varlen._dist.exchange import sync_states
from torchmetrics_varlen._dist.guard import resolve_group
from torchmetrics_varlen.distributed import distributed_available

_COUNTERS = ("num_samples", "rows_seen", "padding_dropped")

# Syncs that metrics sharing their state lists (a torchmetrics compute group: AUROC, AP, curves, best F1 in one
# MetricCollection) can reuse: key -> (the state lists, their lengths, the gathered states). Every rank of a group
# runs the same update/compute sequence, so every rank reuses (or not) alike. Any update or reset of any metric of
# the package empties it, so a gathered copy is never kept past the end of an evaluation.
_SHARED_SYNCS: dict[tuple[Any, ...], tuple[list[Any], list[int], Any]] = {}


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
    _synced_info: list[dict[str, Any]] | None

    def _pieces(self, name: str) -> list[Tensor]:
        raise NotImplementedError

    def _local_info(self) -> dict[str, Any]:
        raise NotImplementedError

    def _dedup_mode(self) -> str | None:
        raise NotImplementedError

    def _compute_sharded(self) -> Any:
        raise NotImplementedError

    def _sync_fix(self) -> str:
        name = type(self).__name__
        return (
            f"Call {name}.compute() (or log the metric) on every rank of its process group, not only on rank 0;"
            " use sync_on_compute=False for a rank-local value."
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

    def _wrap_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        """Torchmetrics' compute wrapper, plus: no "compute before update" warning on a rank that legitimately saw
        no data, and the ``compute_on_rank`` flow (gather to one rank, compute there, broadcast the value).
        """
        wrapped = super()._wrap_compute(compute)

        @functools.wraps(compute)
        def wrapped_compute(*args: Any, **kwargs: Any) -> Any:
            distributed = self._to_sync and distributed_available()
            if distributed and self.compute_sharded and self._summed is None:
                return self._compute_sharded()
            if distributed and self.compute_on_rank is not None and self._summed is None:
                return self._compute_on_one_rank(compute, *args, **kwargs)
            if self._update_count or not distributed:
                return wrapped(*args, **kwargs)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"The ``compute`` method of metric", category=UserWarning)
                return wrapped(*args, **kwargs)

        return wrapped_compute

    def _compute_on_one_rank(self, compute: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Only rank ``compute_on_rank`` receives every sample and computes; the value is broadcast to the others."""
        if self._computed is not None:
            return self._computed
        group = resolve_group(self.process_group)
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        dst = int(self.compute_on_rank or 0)
        if dst >= world:
            msg = (
                f"{type(self).__name__}: compute_on_rank={dst} but the process group has {world} ranks;"
                f" use a rank between 0 and {world - 1}."
            )
            raise ValueError(msg)
        self.sync()
        try:
            value = compute(*args, **kwargs) if rank == dst else None
        finally:
            if self._is_synced:
                self.unsync()
        # The value is small (a scalar, per-class values or a curve): broadcast it with the report.
        box = [value, self.sync_report]
        dist.broadcast_object_list(box, src=dist.get_global_rank(group, dst), group=group)
        value = apply_to_collection(box[0], Tensor, lambda x: x.to(self.num_samples.device))
        self.sync_report = box[1]
        if self.compute_with_cache:
            self._computed = value
        return value

    def _sync_dist(self, dist_sync_fn: Callable[..., Any] | None = None, process_group: Any | None = None) -> None:
        """One guarded, variable-length exchange of all states (replaces torchmetrics' per-state gathers).

        ``dist_sync_fn`` is not used.
        """
        group = resolve_group(process_group or self.process_group)
        names = ("preds", "target", "ids", "ids_sub", *self._row_extras) if self._summed is None else ()
        cat = {name: self._pieces(name) for name in names}
        # Counters travel with the check-in; only the binned / 16-bit counts need an all-reduce.
        summed = {} if self._summed is None else {self._summed: getattr(self, self._summed)}
        device = cat["preds"][0].device if cat else next(iter(summed.values())).device
        result = self._shared_sync(cat, summed, group, device)
        for key, value in {**result.cat, **result.summed}.items():
            setattr(self, key, value)
        for key in _COUNTERS:
            setattr(self, key, self.num_samples.new_tensor(sum(i[key] for i in result.info)))
        self._synced_info = result.info

    def _shared_sync(
        self, cat: dict[str, list[Tensor]], summed: dict[str, Tensor], group: Any, device: torch.device
    ) -> Any:
        """Sync, or reuse the sync another metric of the same compute group just did on these very state lists."""
        names = ("preds", "target", "ids", "ids_sub", *self._row_extras) if self._summed is None else (self._summed,)
        objs = [getattr(self, n) for n in names]
        state_config = {
            k: v
            for k, v in self._config.items()
            if k in ("task", "num_classes", "num_labels", "thresholds", "ignore_index", "dataset_size")
        }
        key = (tuple(id(o) for o in objs), repr(sorted(state_config.items())), id(group))
        lengths = [len(o) if isinstance(o, list) else int(o.sum()) for o in objs]
        entry = _SHARED_SYNCS.get(key)
        if entry is not None and all(a is b for a, b in zip(entry[0], objs, strict=True)) and entry[1] == lengths:
            return entry[2]
        # A new sync of the same kind supersedes older ones: drop them first, so that their received buffers are
        # freed before this one is allocated (and can be reused by it).
        for stale in [k for k in _SHARED_SYNCS if k[1:] == key[1:]]:
            del _SHARED_SYNCS[stale]
        name = type(self).__name__
        result = sync_states(
            cat,
            summed,
            config=self._config,
            group=group,
            timeout=self.sync_timeout,
            what=f"{name}.compute()",
            fix=self._sync_fix(),
            device=device,
            info={**self._local_info(), "num_samples": int(self.num_samples)},
            unset_ok={"dedup": self._dedup_mode()},
            dst=self.compute_on_rank if self._summed is None else None,
            concat=False,
        )
        _SHARED_SYNCS[key] = (objs, lengths, result)
        return result
