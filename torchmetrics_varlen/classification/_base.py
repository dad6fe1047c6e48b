"""The state handling, dedup and synchronisation shared by every metric of the package.

A metric keeps one row per sample in list states (exact mode) or a summed state (binned, 16-bit): its ``Mode``.
``update`` validates, drops sampler padding (the ledger, ``_ledger.py``), formats and appends (or adds); ``compute``
runs after one guarded sync, drops duplicate ids and hands the counted problems to the functional core.

The constructor keywords of the synchronisation (``dataset_size``, ``sync_timeout``, ``compute_on_rank``,
``compute_sharded``, ``sync_key``) are declared here only; the public classes pass them through ``**kwargs``.

No ``from __future__ import annotations`` here: ``torch.jit.script(metric)`` reads the class annotations of
``_VarlenMetric`` to type the module's attributes, and TorchScript cannot resolve annotations kept as strings.
"""

from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor

from torchmetrics_varlen._checks import (
    SCALAR_AVERAGES,
    TASKS,
    Average,
    Normalization,
    Thresholds,
    validate_compute_on_rank,
    validate_metric_args,
)
from torchmetrics_varlen._dedup import SyncReport, dedup_by_id
from torchmetrics_varlen._dist.exchange import CheckedIn
from torchmetrics_varlen._dist.group import distributed_available as group_initialised
from torchmetrics_varlen._dist.group import group_position
from torchmetrics_varlen._intake import add_states, empty_rows, stored_dedup_mode, stored_weight_mode, take_batch
from torchmetrics_varlen._ledger import Ledger, host_counters, warning_compute
from torchmetrics_varlen.classification._sharded import compute_sharded, compute_sharded_weighted
from torchmetrics_varlen.classification._sync import _COUNTERS, SHARED_SYNCS, _SyncedMetric
from torchmetrics_varlen.functional._count import (
    Mode,
    Problem,
    counted_problems,
    threshold_tensor,
)
from torchmetrics_varlen.functional._reduce import RankStatistic, reduce_sums
from torchmetrics_varlen.functional._sort import fits_compact
from torchmetrics_varlen.functional._tasks import Split
from torchmetrics_varlen.functional._weighted import (
    WeightedProblem,
    reduce_weighted_sums,
    weighted_problems,
)

_PLAIN = frozenset(("_computed", "_update_count", "_forward_cache"))  # plain attributes torchmetrics sets per update


class _VarlenMetric(_SyncedMetric):
    """Base of the package's metrics.

    A subclass sets what it accepts (``_tasks``, ``_averages``, ``_binned``; ``_statistic`` for scalar statistics
    that the sharded compute can reduce from per-range sums), implements ``compute`` from :meth:`_problems` (or
    :meth:`_evaluated` for per-row extras such as groups) and may add per-row states (``row_extras``).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    _tasks = TASKS
    _averages = SCALAR_AVERAGES
    _binned = True  # whether int / list / tensor thresholds (torchmetrics' binned mode) are accepted
    _statistic: RankStatistic | None = None
    _takes_weights = False  # whether ``update`` accepts ``sample_weight`` (a per-sample float64 column / float64 sums)
    _weight_column = False  # whether the exact mode keeps the ``weight`` column (every ranking metric: compute groups)

    # TorchScript types the attributes from these (resolvable objects; list states declared as torchmetrics does).
    preds: list[Tensor]
    target: list[Tensor]
    ids: list[Tensor]
    ids_sub: list[Tensor]
    weight: list[Tensor]
    confmat: Tensor
    hist: Tensor
    num_samples: Tensor
    rows_seen: Tensor
    padding_dropped: Tensor
    rejected: Tensor
    thresholds: Tensor | None
    task: str
    num_classes: int | None
    num_labels: int | None
    ignore_index: int | None
    dataset_size: int | None
    validate_args: bool

    def __init__(
        self,
        *,
        task: str = "binary",
        num_classes: int | None = None,
        num_labels: int | None = None,
        average: Average = None,
        max_fpr: float | None = None,
        thresholds: Thresholds = None,
        ignore_index: int | None = None,
        validate_args: bool = True,
        normalization: Normalization = "sigmoid",
        row_extras: tuple[str, ...] = (),
        config: dict[str, Any] | None = None,
        dataset_size: int | None = None,
        sync_timeout: float | None = 60.0,
        compute_on_rank: int | None = None,
        compute_sharded: bool = False,
        sync_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        settings = {
            "task": task,
            "num_classes": num_classes,
            "num_labels": num_labels,
            "average": average,
            "ignore_index": ignore_index,
            "normalization": normalization,
            "dataset_size": dataset_size,
            "compute_on_rank": compute_on_rank,
            "compute_sharded": compute_sharded,
        }
        validate_metric_args(self, settings, max_fpr=max_fpr, thresholds=thresholds, sync_timeout=sync_timeout)
        for key, value in {**settings, "validate_args": validate_args, "sync_timeout": sync_timeout}.items():
            setattr(self, key, value)
        self.sync_report: SyncReport | None = None
        self.mode = Mode.of(thresholds)  # exact, binned or 16-bit: decided here, once
        self._split = Split(task, average)
        self._summed = self.mode.state_name  # the summed state's name (None: rows), for the sync
        if (self._takes_weights or self._weight_column) and self.mode.kind == "exact":
            row_extras = (*row_extras, "weight")  # float64, one per stored row; empty unless the epoch is weighted
        self._row_extras = row_extras
        self._width: int = (num_classes if task == "multiclass" else num_labels) or 1
        thr = threshold_tensor(thresholds)
        self.register_buffer("thresholds", thr, persistent=False)
        add_states(self, _COUNTERS)
        thr_config = thr.tolist() if thr is not None else (str(self.mode.dtype) if self.mode.dtype else None)
        self._config: dict[str, Any] = {"metric": type(self).__name__, **settings, "thresholds": thr_config}
        self._config.update(config or {})
        self._ledger = Ledger(type(self).__name__, dataset_size, ("rows_seen", "padding_dropped", "rejected"))
        self._in_forward = False
        self._init_sync(sync_key)

    # ------------------------------------------------------------------ update

    @torch.jit.unused
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _PLAIN:  # what nn.Module.__setattr__ does for them, without its checks (torchmetrics, per update)
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def _dedup_mode(self) -> str | None:
        """``"ids"`` or ``"none"`` once the first batch decided it; ``None`` before any batch."""
        return stored_dedup_mode(self)

    def _weight_mode(self) -> str | None:
        """``"weights"`` or ``"none"`` once the first batch decided it; ``None`` before any batch."""
        return stored_weight_mode(self)

    def _update(
        self,
        preds: Tensor,
        target: Tensor,
        sample_ids: Tensor | None,
        extras: dict[str, Tensor],
        start: int | None,
        sample_weight: Tensor | None = None,
    ) -> None:
        """Validate, drop sampler padding, format and append (or count) one batch; all or nothing (``_intake.py``)."""
        take_batch(self, preds, target, sample_ids, extras, start, sample_weight)

    @torch.jit.unused
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Update with the batch and return its own value; sampler positions continue from the global state."""
        kwargs.setdefault("_start", self._ledger.position(self))
        self._in_forward = True  # the batch value is not an evaluation of the data set: no report, no warning
        try:
            return super().forward(*args, **kwargs)
        finally:
            self._in_forward = False

    def reset(self) -> None:
        """Forget every sample (``forward`` resets internally too: it passes the position explicitly)."""
        super().reset()
        if not self._in_forward:  # forward keeps the epoch's sampler positions (it passes the start itself)
            self._ledger.reset()
        SHARED_SYNCS.clear()

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        self._ledger.save(self, destination, prefix, self._persistent["rows_seen"])

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        self._ledger.load(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if any(self._ledger.counts(self)) and not self._update_count:
            self._update_count = 1  # loaded states are updates: compute() must not warn that none happened

    def _wrap_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        return warning_compute(self, super()._wrap_compute(compute))

    # ------------------------------------------------------------------ compute

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
        keep = dedup_by_id(rows["ids"], rows["ids_sub"], rows["target"], rows["preds"])
        kept_ids = rows["ids"][keep]
        self._report(int(kept_ids.numel() and 1 + torch.count_nonzero(kept_ids[1:] != kept_ids[:-1])))
        return {name: [rows[name][keep]] for name in names}

    def _weighted_problems(self) -> list[WeightedProblem] | None:
        """Every binary problem with float64 sums of weights if the epoch is weighted (``None`` otherwise)."""
        if self._weight_mode() != "weights":
            return None
        if self._summed is not None:
            self._report(None)
            return cast(list[WeightedProblem], self._problems(with_scores=True))
        rows = {name: torch.cat(pieces) for name, pieces in self._evaluated().items()}
        split = self._split
        return weighted_problems(self.mode, rows["preds"], rows["target"], rows["weight"], split, None)

    def _problems(self, with_scores: bool) -> list[Problem]:
        """Every binary problem of what every rank evaluated, ordered and counted in the metric's mode."""
        if self._summed is None:
            rows = self._evaluated()
            return counted_problems(self.mode, (rows["preds"], rows["target"]), self._split, None, with_scores)
        self._report(None)
        return counted_problems(self.mode, getattr(self, self._summed), self._split, self.thresholds, with_scores)

    def _report(self, kept_samples: int | None, info: list[dict[str, int]] | None = None) -> None:
        """Fill ``sync_report``; ``info`` (every rank's counters) when the caller synced them itself."""
        if self._in_forward:
            return
        synced = self._is_synced or info is not None
        if info is None and self._is_synced and self._synced_info:
            info = self._synced_info
        self.sync_report = self._ledger.report(self, info, kept_samples, synced=synced)

    def _local_info(self) -> dict[str, int]:
        info = self._ledger.info(self)
        if self.compute_sharded:
            # Compact sort keys only if every rank's scores fit: the keys of all ranks meet in one all-to-all.
            info["compact"] = int(fits_compact(self._pieces("preds")))
        return info

    def _compute_sharded(self, checked: CheckedIn) -> Tensor:
        """``compute_sharded=True`` (scalar statistics only): see ``_sharded.py``."""
        assert self._statistic is not None
        if any(r.modes.get("weights") == "weights" for r in checked.ranks):
            weighted = compute_sharded_weighted(self, checked)
            return reduce_weighted_sums(weighted, self._split, self._statistic.name, self.num_samples.device)
        sums = compute_sharded(self, checked, self._statistic.needs)
        return reduce_sums(sums, self._split, self._statistic, self.num_samples.device)


class _RankingMetric(_VarlenMetric):
    """``update(preds, target, sample_ids=None)`` for the ranking metrics (AUROC, AP, curves, best F1)."""

    _weight_column = True  # the same row states in all of them, so that a MetricCollection groups them

    def update(
        self,
        preds: Tensor,
        target: Tensor,
        sample_ids: Tensor | None = None,
        *,
        sample_weight: Tensor | None = None,
        _start: int | None = None,
    ) -> None:
        """Validate one batch and add it to the state; a batch that fails validation changes nothing.

        Args:
            preds: Scores (see the class docstring for the shape of each task), floating point.
            target: Labels: integer, bool, or floating point holding whole numbers (``0.0`` / ``1.0``).
            sample_ids: Optional global integer ids, one per sample (shape ``(N,)``) or one per element of the
                sample shape. After the sync each id counts once.
            sample_weight: Optional finite non-negative weights (AUROC, AP and the curves), one per sample: the
                sample shape, or ``(N,)`` for multi-dimensional samples; scikit-learn's ``sample_weight``. Give
                them with every batch of an epoch or with none. A dropped padded sample drops its weight; with
                ``sample_ids`` the kept copy's weight counts.
        """
        self._update(preds, target, sample_ids, {}, _start, sample_weight)


host_counters(_VarlenMetric, _COUNTERS)  # per-batch counts stay host-side ints until the states are read
