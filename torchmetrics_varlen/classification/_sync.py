"""The package's own metrics' side of the sync: what they send and receive, and three ways to compute after it.

``_SyncedMetric`` builds on :class:`~torchmetrics_varlen._guarded.GuardedMetric` (the guarded exchange inside
torchmetrics' sync and compute wrappers). It knows the states only through the few hooks its subclass
(``_VarlenMetric``) implements: ``_pieces``, ``_local_info``, ``_dedup_mode`` and ``_compute_sharded``.

The three compute strategies share one seam and torchmetrics' own compute wrapper (its result cache included):
``_sync_dist`` checks in and moves the data the strategy needs, then the wrapped ``compute`` finishes:

- **gather to all** (default): every rank receives every state and computes;
- **gather to one rank** (``compute_on_rank``): that rank receives and computes, and sends the value to the others;
- **sharded** (``compute_sharded``): no state moves at the sync; the computation itself is distributed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen._dedup import SyncReport
from torchmetrics_varlen._dist.exchange import CheckedIn, Gathered, Mode, SyncRequest, broadcast_value
from torchmetrics_varlen._dist.exchange import check_in_states as _check_in_states
from torchmetrics_varlen._dist.guard import Ticket
from torchmetrics_varlen._guarded import SHARED_SYNCS, GuardedMetric, Payload

__all__ = ["SHARED_SYNCS", "_COUNTERS", "_SyncedMetric"]

_COUNTERS = ("num_samples", "rows_seen", "padding_dropped", "rejected")
_DEDUP = ("none", "ids")
_WEIGHTS = ("none", "weights")
# The configuration that decides what a sync moves: metrics holding the same states and agreeing on these share one.
_STATE_CONFIG = ("task", "num_classes", "num_labels", "thresholds", "ignore_index", "dataset_size", "compute_on_rank")


class _SyncedMetric(GuardedMetric):
    """Sync machinery of the package's metrics; see the module docstring."""

    num_samples: Tensor
    compute_on_rank: int | None
    compute_sharded: bool
    sync_report: SyncReport | None
    _summed: str | None
    _row_extras: tuple[str, ...]
    _synced_info: list[dict[str, int]] | None
    _checked: CheckedIn | None

    def _init_sync(self, sync_key: str | None) -> None:
        super()._init_sync(sync_key)
        self._checked = None
        self._synced_info = None

    # ------------------------------------------------------------------ hooks of the subclass

    def _pieces(self, name: str) -> list[Tensor]:
        raise NotImplementedError

    def _local_info(self) -> dict[str, int]:
        raise NotImplementedError

    def _dedup_mode(self) -> str | None:
        raise NotImplementedError

    def _weight_mode(self) -> str | None:
        raise NotImplementedError

    def _compute_sharded(self, checked: CheckedIn) -> Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ sync

    def _row_states(self) -> tuple[str, ...]:
        """The per-sample (cat) states; none in the binned and 16-bit modes."""
        return ("preds", "target", "ids", "ids_sub", *self._row_extras) if self._summed is None else ()

    def _sync_payload(self) -> Payload:
        cat = {name: self._pieces(name) for name in self._row_states()}
        # Counters travel with the metadata; only the binned / 16-bit counts need an all-reduce. They travel as
        # float64 (counts below 2**53 exactly), so that ranks with weighted float64 sums and ranks that saw no batch
        # yet (int64 zeros) agree on the dtype; unweighted counts come back as int64 (``_sync_receive``).
        summed = {} if self._summed is None else {self._summed: getattr(self, self._summed).double()}
        device = cat["preds"][0].device if cat else next(iter(summed.values())).device
        return Payload(
            cat=cat,
            device=device,
            summed=summed,
            info={**self._local_info(), "num_samples": int(self.num_samples)},
            modes={"dedup": Mode(self._dedup_mode(), _DEDUP), "weights": Mode(self._weight_mode(), _WEIGHTS)},
            dst=self.compute_on_rank if self._summed is None else None,
        )

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
        names = self._row_states() or (str(self._summed),)
        state_config = {k: v for k, v in self._config.items() if k in _STATE_CONFIG}
        return [getattr(self, n) for n in names], repr(sorted(state_config.items()))

    def _joins_collection_sync(self) -> bool:
        return self.compute_on_rank is None and not self.compute_sharded

    def _exchange(self, request: SyncRequest) -> Gathered | None:
        """The data movement of the compute strategy: none for the sharded compute (a check-in only).

        ``compute_on_rank`` was checked against the process group before (``_VarlenMetric.sync``).
        """
        if self.compute_sharded and self._summed is None:
            payload = self._sync_payload()
            self._checked = _check_in_states(
                request, payload.cat, {}, device=payload.device, info=payload.info, modes=payload.modes, pack=False
            )
            self._synced_info = self._checked.info
            return None
        return super()._exchange(request)

    # ------------------------------------------------------------------ compute

    def _strategy(self, compute: Callable[..., Any]) -> Callable[..., Any]:
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

        return strategy_compute

    def _after_compute(self) -> None:
        self._checked = None

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
        return self._value_from_wire(value)

    def _value_from_wire(self, value: Any) -> Any:
        """The computed value as the metric returns it, from the tensors, tuples and lists it travels as."""
        return value
