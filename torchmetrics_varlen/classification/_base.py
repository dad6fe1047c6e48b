"""The state handling shared by every metric of the package; how it syncs and computes is its compute strategy.

A metric keeps one row per sample in list states (exact mode) or a summed state (binned, 16-bit): its ``CountMode``.
``update`` validates, drops sampler padding (the ledger, ``_core/ledger.py``), formats and appends (or adds);
``compute`` runs after one guarded sync, through the strategy chosen in the constructor (``_core/strategies.py``,
``_core/sharded.py``): the sync hooks below hand every step to it or to the functions it shares there. A subclass
whose ``update`` takes other inputs (groups, two score columns) overrides ``update`` and ``_weight_column``.

The constructor keywords of the synchronisation (``dataset_size``, ``sync_timeout``, ``compute_on_rank``,
``compute_sharded``, ``sync_key``) are validated here; every public class names them, keyword-only, with these
defaults (``tests/test_signatures.py``), and passes on by name; its ``**kwargs`` are torchmetrics' ``Metric`` keywords.

No ``from __future__ import annotations`` here: ``torch.jit.script(metric)`` reads the class annotations of
``_VarlenMetric`` to type the module's attributes, and TorchScript cannot resolve annotations kept as strings.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen._core.guarded_sync import CheckedIn, Gathered, GuardedMetric, Payload, SyncRequest
from torchmetrics_varlen._core.intake import (
    PieceCount,
    count_piece,
    rows_of,
    take_batch,
)
from torchmetrics_varlen._core.ledger import Ledger, warning_compute
from torchmetrics_varlen._core.report import SyncReport
from torchmetrics_varlen._core.sharded import Sharded
from torchmetrics_varlen._core.strategies import (
    _COUNTERS,
    ComputeStrategy,
    GatherToAll,
    GatherToOne,
    Summed,
    check_compute_on_rank,
    evaluated,
    receive,
    share_key,
    stored_dedup_mode,
    stored_weight_mode,
    strategy_compute,
)
from torchmetrics_varlen.functional._count import CountMode, Problem, threshold_tensor
from torchmetrics_varlen.functional._ranking import RankStatistic
from torchmetrics_varlen.functional._validation import (
    SCALAR_AVERAGES,
    TASKS,
    Average,
    Normalization,
    Split,
    Thresholds,
    validate_metric_args,
)
from torchmetrics_varlen.functional._weighted import WeightedProblem

# torchmetrics' own ``Metric`` keywords, the only ones a metric's ``**kwargs`` take: any other name is a typo, refused
# as Python refuses one (``TypeError``) rather than by torchmetrics' ``ValueError``. ``tests/test_signatures.py`` reads
# the names ``Metric.__init__`` pops from its source, so a torchmetrics release that adds one fails there.
METRIC_KEYWORDS = frozenset(
    (
        "compute_on_cpu",
        "dist_sync_on_step",
        "process_group",
        "dist_sync_fn",
        "distributed_available_fn",
        "sync_on_compute",
        "compute_with_cache",
    )
)


class _VarlenMetric(GuardedMetric):
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
    _weight_column = True  # whether the exact mode keeps the ``weight`` column (every ranking metric: compute groups)

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
    compute_on_rank: int | None
    compute_sharded: bool
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
        unknown = sorted(set(kwargs) - METRIC_KEYWORDS)
        if unknown:
            names = ", ".join(repr(name) for name in unknown)
            msg = f"{type(self).__name__}() got an unexpected keyword argument {names}"
            raise TypeError(msg)
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
        self.mode = CountMode.of(thresholds)  # exact, binned or 16-bit: decided here, once
        self._split = Split(task, average)
        self._summed = self.mode.state_name  # the summed state's name (None: rows), for the sync
        if (self._takes_weights or self._weight_column) and self.mode.kind == "exact":
            row_extras = (*row_extras, "weight")  # float64, one per stored row; empty unless the epoch is weighted
        self._row_extras = row_extras
        self._width: int = (num_classes if task == "multiclass" else num_labels) or 1
        thr = threshold_tensor(thresholds)
        self.register_buffer("thresholds", thr, persistent=False)
        self._strategy = choose_strategy(self.mode, compute_on_rank, compute_sharded)  # how it syncs and computes
        self._strategy.add_states(self, row_extras, 0 if thr is None else thr.numel())
        for name in _COUNTERS:
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        thr_config = thr.tolist() if thr is not None else (str(self.mode.dtype) if self.mode.dtype else None)
        self._config: dict[str, Any] = {"metric": type(self).__name__, **settings, "thresholds": thr_config}
        self._config.update(config or {})
        self._ledger = Ledger(type(self).__name__, dataset_size, ("rows_seen", "padding_dropped", "rejected"))
        self._ledger.zeroed(self)
        self._piece_count = PieceCount()  # stored pieces, merged as they arrive (``_core/intake.py``)
        self._init_sync(sync_key)
        self._checked: CheckedIn | None = None  # the sync's check-in, for the compute after it
        self._synced_info: list[dict[str, int]] | None = None  # every rank's counters, from the last sync

    # ------------------------------------------------------------------ update

    def update(
        self,
        preds: Tensor,
        target: Tensor,
        sample_ids: Tensor | None = None,
        *,
        sample_weight: Tensor | None = None,
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
        self._update(preds, target, sample_ids, {}, self._forward_start, sample_weight)

    def _value_from_wire(self, value: Any) -> Any:
        """The computed value as the metric returns it, from the tensors, tuples and lists it travels as."""
        return value

    # ------------------------------------------------------------------ sync (``_core/strategies.py``)

    def _sync_payload(self) -> Payload:
        return self._strategy.payload(self)

    def _sync_receive(self, result: Gathered) -> None:
        receive(self, result)

    def _sync_share_key(self) -> tuple[list[Any], str]:
        return share_key(self)

    def _joins_collection_sync(self) -> bool:
        return self._strategy.joins_collection_sync

    def _exchange(self, request: SyncRequest) -> Gathered | None:
        """The data movement of the compute strategy (``compute_on_rank`` was checked in :meth:`sync`)."""
        return self._strategy.exchange(self, request, super()._exchange)

    def _synced_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        return strategy_compute(self, compute)

    def _after_compute(self) -> None:
        self._checked = None

    def _wrap_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        """The guarded compute wrapper, inside the ledger's (report, warnings): ``_ledger.warning_compute``."""
        return warning_compute(self, super()._wrap_compute(compute))

    def sync(
        self,
        dist_sync_fn: Any = None,
        process_group: Any | None = None,
        should_sync: bool = True,
        distributed_available: Any = None,
    ) -> None:
        """Torchmetrics' ``sync`` (every ``compute()`` comes here), after checking ``compute_on_rank``."""
        check_compute_on_rank(self, process_group)
        super().sync(dist_sync_fn, process_group, should_sync, distributed_available)

    # ------------------------------------------------------------------ what the strategies compute from

    def _evaluated(self) -> dict[str, list[Tensor]]:
        return evaluated(self)

    def _weighted_problems(self) -> list[WeightedProblem] | None:
        """Every binary problem with float64 sums of weights if the epoch is weighted (``None`` otherwise)."""
        return self._strategy.weighted_problems(self) if self._weight_mode() == "weights" else None

    def _problems(self, with_scores: bool) -> list[Problem]:
        """Every binary problem of what every rank evaluated, ordered and counted in the metric's mode."""
        return self._strategy.problems(self, with_scores)

    # ------------------------------------------------------------------ batches

    def _dedup_mode(self) -> str | None:
        """``"ids"`` or ``"none"`` once the first batch decided it; ``None`` before any batch."""
        epoch = self._forward_modes
        return epoch[0] if epoch is not None and epoch[0] is not None else stored_dedup_mode(self)

    def _weight_mode(self) -> str | None:
        """``"weights"`` or ``"none"`` once the first batch decided it; ``None`` before any batch."""
        epoch = self._forward_modes
        return epoch[1] if epoch is not None and epoch[1] is not None else stored_weight_mode(self)

    def _update(
        self,
        preds: Tensor,
        target: Tensor,
        sample_ids: Tensor | None,
        extras: dict[str, Tensor],
        start: int | None,
        sample_weight: Tensor | None = None,
    ) -> None:
        """Validate, drop sampler padding, format and append (or count) one batch, all or nothing (``_core/intake``)."""
        take_batch(self, preds, target, sample_ids, extras, start, sample_weight)

    # Set by :meth:`forward` around torchmetrics' forward, whose ``reset()`` empties the states the update inside would
    # read them from: the sampler position of the batch (``None``: the ledger's next one), and the epoch's dedup and
    # weight modes, so that the batch is checked against the epoch (a switch of mode is refused there too).
    _forward_start: int | None = None
    _forward_modes: tuple[str | None, str | None] | None = None

    def _refused(self, preds: Any, msg: str) -> ValueError:
        """The error for a batch that ``update`` refuses before ``_update`` checks it; the call counts as refused
        first, as in ``take_batch`` (torchmetrics' update wrapper counted it: the refusal takes it back).
        """
        self._ledger.refuse(self, rows_of(preds), counted_call=True)
        return ValueError(msg)

    def _forward_rows(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        return rows_of(args[0] if args else kwargs.get("preds"), args[1] if len(args) > 1 else kwargs.get("target"))

    @torch.jit.unused
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Update with the batch and return its own value; sampler positions continue from the global state."""
        # read now, before torchmetrics' forward resets the states (a refused batch: put back by GuardedMetric.forward)
        self._forward_start = self._ledger.position(self)
        self._forward_modes = (self._dedup_mode(), self._weight_mode())
        try:
            value = super().forward(*args, **kwargs)  # (``_in_forward`` inside: no report, no warning, no new epoch)
        finally:
            self._forward_start = self._forward_modes = None
        if self._summed is None:  # the batch's piece is in the row states now: count it (``_core/intake.py``)
            count_piece(self, self._strategy.state_names(self))
        return value

    def reset(self) -> None:
        """Forget every sample (``forward`` resets internally too: it keeps the position, ``_forward_start``)."""
        super().reset()
        if not self._in_forward:  # forward keeps the epoch's sampler positions (``_forward_start``)
            self._ledger.reset(self)  # (the counters are zero now: no read of them from the device)

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        self._ledger.save(self, destination, prefix, self._persistent["rows_seen"])

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        self._ledger.load(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if any(self._ledger.counts(self)) and not self._update_count:
            self._update_count = 1  # loaded states are updates: compute() must not warn that none happened


def choose_strategy(mode: CountMode, compute_on_rank: int | None, compute_sharded: bool) -> ComputeStrategy:
    """The metric's compute strategy (``_core/strategies.py``), from its mode and its synchronisation keywords."""
    if mode.state_name is not None:
        return Summed(mode.state_name, joins_collection_sync=compute_on_rank is None)
    if compute_sharded:
        return Sharded()
    return GatherToAll() if compute_on_rank is None else GatherToOne(compute_on_rank)
