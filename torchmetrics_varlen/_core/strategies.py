"""How a metric of the package syncs and computes: one strategy object, chosen once in the constructor.

Architecture: a metric (``_base.py``) holds its states and validates batches; its strategy owns everything after
``update``: the states it keeps (rows or one summed state), its payload (what this rank sends), its exchange (what
moves at the sync) and its compute (what runs inside torchmetrics' compute wrapper, after the sync). The one seam is
``_SyncedMetric`` (``_core/sync.py``), which hands each step to the strategy:

- :class:`GatherToAll` (default): every rank receives every row and computes;
- :class:`GatherToOne` (``compute_on_rank``): that rank receives the rows and computes, the others get the value;
- :class:`~torchmetrics_varlen._core.sharded.Sharded` (``compute_sharded``): no row moves at the sync (a
  check-in only); the computation itself is spread over the ranks;
- :class:`Summed` (binned thresholds, 16-bit scores): one summed state, all-reduced; every rank computes.

Strategies know the metric only through :class:`Host`, so this module imports no metric class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, cast

import torch
from torch import Tensor

from torchmetrics_varlen._core.dedup import SyncReport
from torchmetrics_varlen._core.seam import Payload
from torchmetrics_varlen._dist.exchange import (
    INFO_NUM_SAMPLES,
    CheckedIn,
    Gathered,
    Info,
    Mode,
    SyncRequest,
    broadcast_value,
)
from torchmetrics_varlen.functional._count import Mode as CountMode
from torchmetrics_varlen.functional._count import Problem, counted_problems, empty_state
from torchmetrics_varlen.functional._reduce import RankStatistic
from torchmetrics_varlen.functional._tasks import Split
from torchmetrics_varlen.functional._weighted import WeightedProblem, weighted_problems

_DEDUP = ("none", "ids")
_WEIGHTS = ("none", "weights")
_ROW_STATES = ("preds", "target", "ids", "ids_sub")
Compute = Callable[..., Any]


class Host(Protocol):
    """What a strategy uses of its metric (the package's ``_VarlenMetric``)."""

    task: str
    mode: CountMode
    thresholds: Tensor | None
    num_samples: Tensor
    sync_report: SyncReport | None
    _split: Split
    _width: int
    _statistic: RankStatistic | None
    _row_extras: tuple[str, ...]
    _sync_identity: str
    _checked: CheckedIn | None
    _synced_info: list[Info] | None

    def add_state(self, name: str, default: Any, dist_reduce_fx: Any = None) -> None: ...  # noqa: D102
    def _pieces(self, name: str) -> list[Tensor]: ...
    def _evaluated(self) -> dict[str, list[Tensor]]: ...
    def _report(self, kept_samples: int | None, info: list[Info] | None = None) -> None: ...
    def _local_info(self) -> Info: ...
    def _dedup_mode(self) -> str | None: ...
    def _weight_mode(self) -> str | None: ...
    def _value_from_wire(self, value: Any) -> Any: ...


class ComputeStrategy:
    """One way to sync and compute; the subclasses say what differs (see the module docstring)."""

    joins_collection_sync = True  # whether a collection-level sync may fetch the metric's states
    dst: int | None = None  # the rank that receives the rows (None: every rank)

    def add_states(self, host: Host, row_extras: tuple[str, ...], n_thresholds: int) -> None:
        """Declare the metric's data states (the counters are the metric's own)."""
        for name in (*_ROW_STATES, *row_extras):
            host.add_state(name, default=[], dist_reduce_fx="cat")

    def state_names(self, host: Host) -> tuple[str, ...]:
        """The data states the payload carries (and a compute-group member's sync must hold)."""
        return (*_ROW_STATES, *host._row_extras)

    def info(self, host: Host) -> Info:
        """This rank's counters for the metadata all-gather."""
        return {**host._local_info(), INFO_NUM_SAMPLES: int(host.num_samples)}

    def payload(self, host: Host) -> Payload:
        """What this rank sends: its stored batches of every row state."""
        cat = {name: host._pieces(name) for name in self.state_names(host)}
        return Payload(cat=cat, device=cat["preds"][0].device, info=self.info(host), modes=modes(host), dst=self.dst)

    def exchange(
        self, host: Host, request: SyncRequest, guarded: Callable[[SyncRequest], Gathered | None]
    ) -> Gathered | None:
        """The data movement at the sync: by default the guarded exchange of the payload (``_core/seam.py``)."""
        return guarded(request)

    def compute(self, host: Host, checked: CheckedIn, compute: Compute, *args: Any, **kwargs: Any) -> Any:
        """The computation after the sync (inside torchmetrics' compute wrapper): by default ``compute`` itself."""
        return compute(*args, **kwargs)

    def problems(self, host: Host, with_scores: bool) -> list[Problem]:
        """Every binary problem of what every rank evaluated, ordered and counted in the metric's mode."""
        rows = host._evaluated()
        return counted_problems(host.mode, (rows["preds"], rows["target"]), host._split, None, with_scores)

    def weighted_problems(self, host: Host) -> list[WeightedProblem]:
        """Every binary problem with float64 sums of weights (the epoch is weighted)."""
        rows = {name: torch.cat(pieces) for name, pieces in host._evaluated().items()}
        return weighted_problems(host.mode, rows["preds"], rows["target"], rows["weight"], host._split, None)


def modes(host: Host) -> dict[str, Mode]:
    """The settings every rank must agree on once decided: dedup by ids or not, weighted or not."""
    return {"dedup": Mode(host._dedup_mode(), _DEDUP), "weights": Mode(host._weight_mode(), _WEIGHTS)}


class GatherToAll(ComputeStrategy):
    """Every rank receives every row and computes (the default)."""


class GatherToOne(ComputeStrategy):
    """Rank ``dst`` receives every row and computes; the value and the report travel to the others."""

    joins_collection_sync = False

    def __init__(self, dst: int) -> None:
        self.dst = dst

    def compute(self, host: Host, checked: CheckedIn, compute: Compute, *args: Any, **kwargs: Any) -> Any:
        """Compute on rank ``dst`` and broadcast the value and the sync report (``_dist/value.py``)."""

        def on_dst() -> tuple[Any, dict[str, Any]]:
            value = compute(*args, **kwargs)
            report = dataclasses.asdict(host.sync_report) if host.sync_report is not None else {}
            return value, report

        dst = int(self.dst or 0)
        value, report = broadcast_value(checked.ticket, dst, on_dst, host.num_samples.device, key=host._sync_identity)
        if report:
            report["seen_per_rank"] = tuple(report["seen_per_rank"])
            host.sync_report = SyncReport(**report)
        return host._value_from_wire(value)


class Summed(ComputeStrategy):
    """One summed state (binned confusion matrices, 16-bit histograms), all-reduced; every rank computes.

    ``compute_on_rank`` does not gather here (the state is small), but keeps the metric out of a collection's joint
    sync as it does for the row strategies.
    """

    def __init__(self, state: str, joins_collection_sync: bool) -> None:
        self.state = state
        self.joins_collection_sync = joins_collection_sync

    def add_states(self, host: Host, row_extras: tuple[str, ...], n_thresholds: int) -> None:
        """Declare the summed state, its default the zeros of the mode's layout."""
        default = empty_state(host.mode, host.task, host._width, n_thresholds)
        host.add_state(self.state, default=default, dist_reduce_fx="sum")

    def state_names(self, host: Host) -> tuple[str, ...]:
        """No row states: the summed one."""
        return (self.state,)

    def payload(self, host: Host) -> Payload:
        """The summed state as float64 (counts below 2**53 exactly), so that ranks with weighted float64 sums and
        ranks that saw no batch yet (int64 zeros) agree on the dtype; unweighted counts come back as int64.
        """
        summed = {self.state: cast(Tensor, getattr(host, self.state)).double()}
        device = summed[self.state].device
        return Payload(cat={}, device=device, summed=summed, info=self.info(host), modes=modes(host))

    def problems(self, host: Host, with_scores: bool) -> list[Problem]:
        """The problems of the summed state (ordered and counted already)."""
        host._report(None)
        return counted_problems(host.mode, getattr(host, self.state), host._split, host.thresholds, with_scores)

    def weighted_problems(self, host: Host) -> list[WeightedProblem]:
        """The problems of the float64 summed state, with their scores."""
        host._report(None)
        return cast(list[WeightedProblem], self.problems(host, with_scores=True))
