"""The package's own metrics' side of the sync: the one seam between torchmetrics' sync / compute wrappers and the
metric's compute strategy (``_core/strategies.py``).

``_SyncedMetric`` builds on :class:`~torchmetrics_varlen._core.seam.GuardedMetric` (the guarded exchange inside
torchmetrics' sync and compute wrappers) and hands every step that differs between the ways to compute to its
strategy object (``self._compute``, chosen once in the constructor): the payload, the data movement at the sync
(``_exchange``) and the computation after it (``_strategy``, inside torchmetrics' own compute wrapper, its result
cache included). What every strategy shares stays here: installing what the sync returns and the compute-group key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen._core.batch import empty_rows
from torchmetrics_varlen._core.dedup import SyncReport, copy_scores, dedup_order
from torchmetrics_varlen._core.ledger import Ledger, warning_compute
from torchmetrics_varlen._core.seam import SHARED_SYNCS, GuardedMetric, Payload
from torchmetrics_varlen._core.sharded import Sharded
from torchmetrics_varlen._core.strategies import ComputeStrategy, GatherToAll, GatherToOne, Summed
from torchmetrics_varlen._dist.exchange import CheckedIn, Gathered, Info, SyncRequest
from torchmetrics_varlen._dist.group import distributed_available as group_initialised
from torchmetrics_varlen._dist.group import group_position
from torchmetrics_varlen.functional._count import Mode, Problem
from torchmetrics_varlen.functional._reduce import RankStatistic
from torchmetrics_varlen.functional._tasks import Split, validate_compute_on_rank
from torchmetrics_varlen.functional._weighted import WeightedProblem

__all__ = ["SHARED_SYNCS", "_COUNTERS", "_SyncedMetric"]

_COUNTERS = ("num_samples", "rows_seen", "padding_dropped", "rejected")
# The configuration that decides what a sync moves: metrics holding the same states and agreeing on these share one.
_STATE_CONFIG = ("task", "num_classes", "num_labels", "thresholds", "ignore_index", "dataset_size", "compute_on_rank")


def choose_strategy(mode: Mode, compute_on_rank: int | None, compute_sharded: bool) -> ComputeStrategy:
    """The metric's compute strategy (``_core/strategies.py``), from its mode and its synchronisation keywords."""
    if mode.state_name is not None:
        return Summed(mode.state_name, joins_collection_sync=compute_on_rank is None)
    if compute_sharded:
        return Sharded()
    return GatherToAll() if compute_on_rank is None else GatherToOne(compute_on_rank)


class _SyncedMetric(GuardedMetric):
    """Sync machinery of the package's metrics; see the module docstring."""

    task: str
    mode: Mode
    thresholds: Tensor | None
    num_samples: Tensor
    compute_on_rank: int | None
    compute_sharded: bool
    sync_report: SyncReport | None
    _split: Split
    _width: int
    _statistic: RankStatistic | None
    _row_extras: tuple[str, ...]
    _ledger: Ledger
    _in_forward: bool
    _compute: ComputeStrategy
    _synced_info: list[Info] | None
    _checked: CheckedIn | None

    def _init_sync(self, sync_key: str | None) -> None:
        super()._init_sync(sync_key)
        self._checked = None
        self._synced_info = None

    # ------------------------------------------------------------------ hooks of the subclass

    def _dedup_mode(self) -> str | None:
        raise NotImplementedError

    def _weight_mode(self) -> str | None:
        raise NotImplementedError

    def _value_from_wire(self, value: Any) -> Any:
        """The computed value as the metric returns it, from the tensors, tuples and lists it travels as."""
        return value

    # ------------------------------------------------------------------ sync

    def _sync_payload(self) -> Payload:
        return self._compute.payload(self)

    def _sync_receive(self, result: Gathered) -> None:
        weighted = any(r.modes.get("weights") == "weights" for r in result.checked.ranks)
        summed = {k: v if weighted else v.to(torch.int64) for k, v in result.summed.items()}
        for key, value in {**result.cat, **summed}.items():
            setattr(self, key, value)
        for key in _COUNTERS:
            setattr(self, key, self.num_samples.new_tensor(sum(i[key] for i in result.checked.info)))
        self._checked = result.checked
        self._synced_info = result.checked.info

    def _sync_share_key(self) -> tuple[list[Any], str]:
        names = self._compute.state_names(self)
        state_config = {k: v for k, v in self._config.items() if k in _STATE_CONFIG}
        return [getattr(self, n) for n in names], repr(sorted(state_config.items()))

    def _joins_collection_sync(self) -> bool:
        return self._compute.joins_collection_sync

    def _exchange(self, request: SyncRequest) -> Gathered | None:
        """The data movement of the compute strategy (``compute_on_rank`` was checked against the process group
        before, in ``_VarlenMetric.sync``).
        """
        guarded = super()._exchange
        return self._compute.exchange(self, request, guarded)

    # ------------------------------------------------------------------ compute

    def _strategy(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(compute)
        def strategy_compute(*args: Any, **kwargs: Any) -> Any:
            checked = self._checked
            if not self._is_synced or checked is None:
                return compute(*args, **kwargs)
            return self._compute.compute(self, checked, compute, *args, **kwargs)

        return strategy_compute

    def _after_compute(self) -> None:
        self._checked = None

    def _wrap_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        """The guarded compute wrapper, inside the ledger's (report, warnings): ``_ledger.warning_compute``."""
        return warning_compute(self, super()._wrap_compute(compute))

    # ------------------------------------------------------------------ what the strategies compute from

    def sync(
        self,
        dist_sync_fn: Any = None,
        process_group: Any | None = None,
        should_sync: bool = True,
        distributed_available: Any = None,
    ) -> None:
        """Torchmetrics' ``sync`` (every ``compute()`` comes here), after checking ``compute_on_rank``."""
        _, world = group_position(process_group or self.process_group)
        validate_compute_on_rank(self.compute_on_rank, world, group_initialised(), type(self).__name__)
        super().sync(dist_sync_fn, process_group, should_sync, distributed_available)

    def _pieces(self, name: str) -> list[Tensor]:
        """The stored batches of state ``name`` (one empty piece if none), for packing without a concatenation."""
        state = getattr(self, name)
        pieces = [state] if isinstance(state, Tensor) else list(state)
        if not pieces and name == "weight":
            return [torch.zeros(0, dtype=torch.float64, device=self.num_samples.device)]
        return pieces or [empty_rows(name, self.task, self._width, self.num_samples.device)]

    def _evaluated(self) -> dict[str, list[Tensor]]:
        """The rows to evaluate, per state: the stored pieces, or in id mode the deduplicated rows ordered by id (one
        piece); fills ``sync_report``.
        """
        weighted = self._weight_mode() == "weights"
        names = ("preds", "target", *(n for n in self._row_extras if n != "weight" or weighted))
        if self._dedup_mode() != "ids":
            self._report(None)
            return {name: self._pieces(name) for name in names}
        rows = {name: torch.cat(self._pieces(name)) for name in (*names, "ids", "ids_sub")}
        keep = dedup_order(rows["ids"], rows["ids_sub"], rows["target"], copy_scores(rows))
        kept_ids = rows["ids"] if keep is None else rows["ids"][keep]  # None: every row, already in id order
        self._report(int(kept_ids.numel() and 1 + torch.count_nonzero(kept_ids[1:] != kept_ids[:-1])))
        return {name: [rows[name] if keep is None else rows[name][keep]] for name in names}

    def _weighted_problems(self) -> list[WeightedProblem] | None:
        """Every binary problem with float64 sums of weights if the epoch is weighted (``None`` otherwise)."""
        return self._compute.weighted_problems(self) if self._weight_mode() == "weights" else None

    def _problems(self, with_scores: bool) -> list[Problem]:
        """Every binary problem of what every rank evaluated, ordered and counted in the metric's mode."""
        return self._compute.problems(self, with_scores)

    def _report(self, kept_samples: int | None, info: list[Info] | None = None) -> None:
        """Fill ``sync_report``; ``info`` (every rank's counters) when the caller synced them itself."""
        if self._in_forward:
            return
        synced = self._is_synced or info is not None
        if info is None and self._is_synced and self._synced_info:
            info = self._synced_info
        self.sync_report = self._ledger.report(self, info, kept_samples, synced=synced)

    def _local_info(self) -> Info:
        return self._ledger.info(self)
