"""How a metric of the package syncs and computes: one strategy object, chosen once in the constructor.

Architecture: a metric (``_base.py``) holds its states and validates batches; its strategy owns everything after
``update``: the states it keeps (rows or one summed state), its payload (what this rank sends), its exchange (what
moves at the sync) and its compute (what runs inside torchmetrics' compute wrapper, after the sync). The metric's sync
hooks (``_VarlenMetric`` in ``classification/_base.py``, on
:class:`~torchmetrics_varlen._core.guarded_sync.GuardedMetric`) hand each step to the strategy (``self._strategy``) or
to the functions below, which hold what every strategy shares: installing what the sync returns (:func:`receive`), the
compute-group key (:func:`share_key`), the compute after the sync (:func:`strategy_compute`), the rows to evaluate
(:func:`evaluated`) and the report (:func:`report`).

- :class:`GatherToAll` (default): every rank receives every row and computes;
- :class:`GatherToOne` (``compute_on_rank``): that rank receives the rows and computes, the others get the value;
- :class:`~torchmetrics_varlen._core.sharded.Sharded` (``compute_sharded``): no row moves at the sync (a
  check-in only); the computation itself is spread over the ranks;
- :class:`Summed` (binned thresholds, 16-bit scores): one summed state, all-reduced; every rank computes.

Strategies know the metric only through :class:`Host`, so this module imports no metric class.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Protocol, cast

import torch
from torch import Tensor

from torchmetrics_varlen._core.dedup import copy_scores, dedup_order
from torchmetrics_varlen._core.guarded_sync import Payload
from torchmetrics_varlen._core.ledger import Ledger
from torchmetrics_varlen._core.report import SyncReport
from torchmetrics_varlen._dist.exchange import (
    INFO_NUM_SAMPLES,
    Agreed,
    CheckedIn,
    Gathered,
    Info,
    SyncRequest,
    broadcast_value,
)
from torchmetrics_varlen._dist.group import distributed_available as group_initialised
from torchmetrics_varlen._dist.group import group_position
from torchmetrics_varlen.functional._count import CountMode, Problem, counted_problems, empty_state
from torchmetrics_varlen.functional._ranking import RankStatistic
from torchmetrics_varlen.functional._validation import Split, validate_compute_on_rank
from torchmetrics_varlen.functional._weighted import WeightedProblem, weighted_problems

_DEDUP = ("none", "ids")
_WEIGHTS = ("none", "weights")
_ROW_STATES = ("preds", "target", "ids", "ids_sub")
Compute = Callable[..., Any]


class Host(Protocol):
    """What a strategy uses of its metric (the package's ``_VarlenMetric``): its states and settings, read as plain
    attributes; the strategies never call back into the metric, except to declare its states and to turn a value
    that travelled between ranks back into the metric's type (``_value_from_wire``).
    """

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
    _strategy: ComputeStrategy
    _config: dict[str, Any]
    _ledger: Ledger
    _in_forward: int
    _synced: bool
    compute_on_rank: int | None
    process_group: Any

    def add_state(self, name: str, default: Any, dist_reduce_fx: Any = None) -> None: ...  # noqa: D102
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
        return {**host._ledger.info(host), INFO_NUM_SAMPLES: int(host.num_samples)}

    def payload(self, host: Host) -> Payload:
        """What this rank sends: its stored batches of every row state."""
        cat = {name: pieces(host, name) for name in self.state_names(host)}
        return Payload(cat=cat, device=cat["preds"][0].device, info=self.info(host), modes=modes(host), dst=self.dst)

    def exchange(
        self, host: Host, request: SyncRequest, guarded: Callable[[SyncRequest], Gathered | None]
    ) -> Gathered | None:
        """The data movement at the sync: by default the guarded exchange of the payload (``_core/guarded_sync.py``)."""
        return guarded(request)

    def compute(self, host: Host, checked: CheckedIn, compute: Compute, *args: Any, **kwargs: Any) -> Any:
        """The computation after the sync (inside torchmetrics' compute wrapper): by default ``compute`` itself."""
        return compute(*args, **kwargs)

    def problems(self, host: Host, with_scores: bool) -> list[Problem]:
        """Every binary problem of what every rank evaluated, ordered and counted in the metric's mode."""
        rows = evaluated(host)
        return counted_problems(host.mode, (rows["preds"], rows["target"]), host._split, None, with_scores)

    def weighted_problems(self, host: Host) -> list[WeightedProblem]:
        """Every binary problem with float64 sums of weights (the epoch is weighted)."""
        rows = {name: torch.cat(pieces) for name, pieces in evaluated(host).items()}
        return weighted_problems(host.mode, rows["preds"], rows["target"], rows["weight"], host._split, None)


def modes(host: Host) -> dict[str, Agreed]:
    """The settings every rank must agree on once decided: dedup by ids or not, weighted or not."""
    return {"dedup": Agreed(stored_dedup_mode(host), _DEDUP), "weights": Agreed(stored_weight_mode(host), _WEIGHTS)}


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
        state = cast(Tensor, getattr(host, self.state))
        summed = {self.state: state.double()}
        device = summed[self.state].device
        return Payload(cat={}, device=device, summed=summed, info=self.info(host), modes=modes(host))

    def problems(self, host: Host, with_scores: bool) -> list[Problem]:
        """The problems of the summed state (ordered and counted already)."""
        report(host, None)
        state = getattr(host, self.state)
        return counted_problems(host.mode, state, host._split, host.thresholds, with_scores)

    def weighted_problems(self, host: Host) -> list[WeightedProblem]:
        """The problems of the float64 summed state, with their scores."""
        report(host, None)
        return cast(list[WeightedProblem], self.problems(host, with_scores=True))


_COUNTERS = ("num_samples", "rows_seen", "padding_dropped", "rejected")
# The configuration that decides what a sync moves: metrics holding the same states and agreeing on these share one.
_STATE_CONFIG = ("task", "num_classes", "num_labels", "thresholds", "ignore_index", "dataset_size", "compute_on_rank")


def receive(host: Host, result: Gathered) -> None:
    """Install what the sync returns on the metric: the gathered rows or the summed state, every rank's counters
    summed, and the check-in the compute reads.
    """
    weighted = any(r.modes.get("weights") == "weights" for r in result.checked.ranks)
    summed = {k: v if weighted else v.to(torch.int64) for k, v in result.summed.items()}
    for key, value in {**result.cat, **summed}.items():
        setattr(host, key, value)
    for key in _COUNTERS:
        setattr(host, key, host.num_samples.new_tensor(sum(i[key] for i in result.checked.info)))
    host._checked = result.checked
    host._synced_info = result.checked.info


def share_key(host: Host) -> tuple[list[Any], str]:
    """The compute-group key: the metric's data states and the configuration that decides what a sync moves."""
    names = host._strategy.state_names(host)
    state_config = {k: v for k, v in host._config.items() if k in _STATE_CONFIG}
    return [getattr(host, n) for n in names], repr(sorted(state_config.items()))


def strategy_compute(host: Host, compute: Compute) -> Compute:
    """``compute`` as the metric's strategy runs it after a sync (inside torchmetrics' compute wrapper, its result
    cache included); unsynced, ``compute`` itself.
    """

    @functools.wraps(compute)
    def run(*args: Any, **kwargs: Any) -> Any:
        checked = host._checked
        if not host._synced or checked is None:
            return compute(*args, **kwargs)
        return host._strategy.compute(host, checked, compute, *args, **kwargs)

    return run


def check_compute_on_rank(host: Host, process_group: Any | None) -> None:
    """``compute_on_rank`` against the process group of the sync (every ``compute()`` checks it)."""
    _, world = group_position(process_group or host.process_group)
    validate_compute_on_rank(host.compute_on_rank, world, group_initialised(), type(host).__name__)


def pieces(host: Host, name: str) -> list[Tensor]:
    """The stored batches of state ``name`` (one empty piece if none), for packing without a concatenation."""
    state = getattr(host, name)
    found = [state] if isinstance(state, Tensor) else list(state)
    if not found and name == "weight":
        return [torch.zeros(0, dtype=torch.float64, device=host.num_samples.device)]
    return found or [empty_rows(name, host.task, host._width, host.num_samples.device)]


def evaluated(host: Host) -> dict[str, list[Tensor]]:
    """The rows to evaluate, per state: the stored pieces, or in id mode the deduplicated rows ordered by id (one
    piece); fills ``sync_report``.
    """
    weighted = stored_weight_mode(host) == "weights"
    names = ("preds", "target", *(n for n in host._row_extras if n != "weight" or weighted))
    if stored_dedup_mode(host) != "ids":
        report(host, None)
        return {name: pieces(host, name) for name in names}
    rows = {name: torch.cat(pieces(host, name)) for name in (*names, "ids", "ids_sub")}
    keep = dedup_order(rows["ids"], rows["ids_sub"], rows["target"], copy_scores(rows))
    kept_ids = rows["ids"] if keep is None else rows["ids"][keep]  # None: every row, already in id order
    report(host, int(kept_ids.numel() and 1 + torch.count_nonzero(kept_ids[1:] != kept_ids[:-1])))
    return {name: [rows[name] if keep is None else rows[name][keep]] for name in names}


def report(host: Host, kept_samples: int | None, info: list[Info] | None = None) -> None:
    """Fill ``sync_report`` (not inside ``forward``); ``info`` (every rank's counters) when the caller synced them."""
    if host._in_forward:
        return
    synced = host._synced or info is not None
    if info is None and host._synced and host._synced_info:
        info = host._synced_info
    host.sync_report = host._ledger.report(host, info, kept_samples, synced=synced)


def _has_rows(state: list[Tensor] | Tensor, synced: bool) -> bool:
    if isinstance(state, Tensor):
        return state.numel() > 0
    # Before a sync a stored batch counts even when it is empty; synced states are per-rank pieces.
    return any(p.numel() for p in state) if synced else bool(state)


def stored_dedup_mode(metric: Any) -> str | None:
    """A package metric's dedup mode: ``"ids"`` or ``"none"`` once its first batch decided it, ``None`` before."""
    ledger: Ledger = metric._ledger
    if metric._summed is not None:
        return ledger.stored_mode(metric, "ids", False, bool(metric._update_count))
    synced = metric._synced
    return ledger.stored_mode(metric, "ids", _has_rows(metric.ids, synced), _has_rows(metric.preds, synced))


def stored_weight_mode(metric: Any) -> str | None:
    """``"weights"`` or ``"none"`` once the first batch decided it (with or without ``sample_weight``); ``None``
    before any batch. Exact mode: whether the ``weight`` column holds batches; binned / 16-bit: the summed state's
    dtype (float64 sums of weights, int64 counts).
    """
    ledger: Ledger = metric._ledger
    if not metric._takes_weights:
        return ledger.stored_mode(metric, "weights", False, bool(metric._update_count))
    if metric._summed is not None:
        return ledger.stored_mode(metric, "weights", getattr(metric, metric._summed).dtype == torch.float64)
    synced = metric._synced
    return ledger.stored_mode(metric, "weights", _has_rows(metric.weight, synced), _has_rows(metric.preds, synced))


def empty_rows(name: str, task: str, width: int, device: torch.device) -> Tensor:
    """A zero-row tensor of the stored form of a metric's row state ``name``."""
    if name == "preds":
        shape: tuple[int, ...] = (0,) if task == "binary" else (0, width)
        return torch.zeros(shape, dtype=torch.float32, device=device)
    if name == "target":
        dtype = {"binary": torch.bool, "multiclass": torch.int64, "multilabel": torch.int8}[task]
        return torch.zeros((0,) if task != "multilabel" else (0, width), dtype=dtype, device=device)
    return torch.zeros(0, dtype=torch.int32 if name == "ids_sub" else torch.int64, device=device)
