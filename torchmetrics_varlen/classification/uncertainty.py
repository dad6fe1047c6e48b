"""Uncertainty classes: DeLong's interval (``VarlenAUROCInterval``), DeLong's paired test
(``VarlenAUROCComparison``) and a bootstrap that does not depend on the world size (``VarlenBootstrap``).

All three are thin metrics over :mod:`torchmetrics_varlen.functional`: they keep rows like ``VarlenAUROC`` (the same
guarded one-exchange sync, dedup, padding cut and ``sync_report``) and hand the evaluated rows to the functional core.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from torch import Tensor

from torchmetrics_varlen._core.guarded_sync import group_position
from torchmetrics_varlen.classification._base import _VarlenMetric
from torchmetrics_varlen.functional._count import counted_problems
from torchmetrics_varlen.functional._ranking import reduce_problems
from torchmetrics_varlen.functional._validation import Normalization
from torchmetrics_varlen.functional.bootstrap import _resampled
from torchmetrics_varlen.functional.delong import AUROCComparison, AUROCInterval, _check_level, auroc_compare
from torchmetrics_varlen.functional.delong import auroc_interval as _auroc_interval


def _no_sharding(name: str, compute_sharded: bool) -> None:
    if compute_sharded:
        msg = (
            f"{name} does not support `compute_sharded=True`: its variance needs every sample's place among all the"
            " scores, which the sharded sums do not keep. Use the default gather, or `compute_on_rank=0` to hold"
            " the samples on one rank only."
        )
        raise ValueError(msg)


def _cat(pieces: list[Tensor]) -> Tensor:
    return torch.cat(pieces) if len(pieces) > 1 else pieces[0]


class _DeLongMetric(_VarlenMetric):
    """The constructor of the DeLong metrics: a confidence ``level``, the binary exact metric's arguments, and no
    sharded compute (the variance needs every sample's midrank in one place).
    """

    _weight_column = False

    def __init__(
        self,
        level: float = 0.95,
        ignore_index: int | None = None,
        validate_args: bool = True,
        *,
        normalization: Normalization = "sigmoid",
        dataset_size: int | None = None,
        sync_timeout: float | None = 60.0,
        compute_on_rank: int | None = None,
        compute_sharded: bool = False,
        sync_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        _no_sharding(type(self).__name__, compute_sharded)
        self.level = _check_level(level)
        super().__init__(
            ignore_index=ignore_index,
            validate_args=validate_args,
            normalization=normalization,
            config={"level": self.level},
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            compute_on_rank=compute_on_rank,
            compute_sharded=compute_sharded,
            sync_key=sync_key,
            **kwargs,
        )


class VarlenAUROCInterval(_DeLongMetric):
    r"""Binary AUROC with DeLong's standard error and normal interval, exact across ranks.

    ``compute()`` returns :func:`~torchmetrics_varlen.functional.auroc_interval`'s
    :class:`~torchmetrics_varlen.functional.AUROCInterval` ``(value, lower, upper, std)`` of every sample evaluated
    by every rank: ``value`` is :class:`~torchmetrics_varlen.VarlenAUROC`'s value bit for bit, the others float64.
    ``update(preds, target, sample_ids=None)`` takes :class:`~torchmetrics_varlen.VarlenAUROC`'s binary inputs;
    synchronisation, dedup (``dataset_size`` / ``sample_ids``), the guard and ``compute_on_rank`` as there.

    Args:
        level: Confidence level in (0, 1).
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate every batch.
        normalization: As :class:`~torchmetrics_varlen.VarlenAUROC`'s (a batch with a score outside [0, 1] gets a
            sigmoid; ``None`` keeps raw scores).
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: Only ``False`` (refused): the variance needs every sample's place among all the scores.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument (``compute_sharded=True`` included), or bad input in ``update()``.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenAUROCInterval(level=0.9)
        >>> metric.update(tensor([0.9, 0.5]), tensor([1, 1]))
        >>> metric.update(tensor([0.5, 0.1]), tensor([0, 0]))
        >>> value, lower, upper, std = metric.compute()
        >>> value, round(float(std), 4)
        (tensor(0.8750), 0.1768)
    """

    _tasks = ("binary",)
    _binned = False
    _weight_column = True  # the ranking metrics' row states (a MetricCollection groups it with VarlenAUROC)

    def _value_from_wire(self, value: Any) -> Any:
        return AUROCInterval(*value)

    def compute(self) -> AUROCInterval:
        """DeLong's interval of the AUROC over everything seen by every rank of the process group."""
        rows = self._evaluated()
        preds, target = _cat(rows["preds"]), _cat(rows["target"])
        return _auroc_interval(preds, target, self.level, validate_args=False, normalization=None)


class VarlenAUROCComparison(_DeLongMetric):
    r"""DeLong's paired test of two models' binary AUROC on the same samples, exact across ranks.

    ``update(preds, target, sample_ids=None)`` takes ``preds`` of shape ``(N, 2)`` (column 0: model a's score of
    the sample, column 1: model b's) and ``target`` of shape ``(N,)``; ``compute()`` returns
    :func:`~torchmetrics_varlen.functional.auroc_compare`'s :class:`~torchmetrics_varlen.functional.AUROCComparison`
    ``(auroc_a, auroc_b, difference, lower, upper, z, p_value)`` over every sample evaluated by every rank. A batch
    with any score outside [0, 1] gets a sigmoid (both columns; a monotone map: it changes no AUROC except through
    float32 saturation); ``normalization=None`` keeps raw scores. Synchronisation, dedup (``dataset_size`` /
    ``sample_ids``: one id per row), the guard and ``compute_on_rank`` as for :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        level: Confidence level of the interval of the difference, in (0, 1).
        ignore_index: Target value whose samples are ignored.
        validate_args: Validate every batch.
        normalization: ``"sigmoid"`` (default) or ``None``.
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: Only ``False`` (refused): the variance needs every sample's place among all the scores.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument (``compute_sharded=True`` included), or, in ``update()``, ``preds`` not
            of shape ``(N, 2)`` with ``target`` of shape ``(N,)``, or bad scores / labels.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenAUROCComparison()
        >>> metric.update(tensor([[0.9, 0.9], [0.5, 0.6]]), tensor([1, 1]))
        >>> metric.update(tensor([[0.5, 0.5], [0.1, 0.1]]), tensor([0, 0]))
        >>> result = metric.compute()
        >>> result.auroc_a, result.auroc_b, result.difference
        (tensor(0.8750), tensor(1.), tensor(-0.1250, dtype=torch.float64))
    """

    _tasks = ("binary",)
    _binned = False

    def update(  # type: ignore[override]  # two score columns, no weights: not the ranking update
        self, preds: Tensor, target: Tensor, sample_ids: Tensor | None = None
    ) -> None:
        """Validate one batch of paired scores and add it to the state; a batch that fails changes nothing.

        Args:
            preds: ``(N, 2)`` floating scores: model a, model b.
            target: ``(N,)`` labels in {0, 1}.
            sample_ids: Optional global integer ids, one per sample (``(N,)``).
        """
        paired = (
            isinstance(preds, Tensor)
            and isinstance(target, Tensor)
            and preds.ndim == 2
            and preds.shape[1] == 2
            and tuple(target.shape) == (preds.shape[0],)
        )
        if not paired:
            shapes = [tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__ for x in (preds, target)]
            msg = (
                f"{type(self).__name__}: expected `preds` of shape (N, 2) (model a, model b) and `target` of shape"
                f" (N,), but got {shapes[0]} and {shapes[1]}. The batch was not added."
            )
            raise self._refused(preds, msg)
        self._update(preds, target.unsqueeze(1).expand(-1, 2), sample_ids, {}, self._forward_start)

    def _value_from_wire(self, value: Any) -> Any:
        return AUROCComparison(*value)

    def compute(self) -> AUROCComparison:
        """DeLong's paired test over everything seen by every rank of the process group."""
        rows = self._evaluated()
        # Stored row by row, (a, b) interleaved: every piece (and the rows ordered by id) keeps whole pairs.
        preds, target = _cat(rows["preds"]).reshape(-1, 2), _cat(rows["target"]).reshape(-1, 2)
        return auroc_compare(
            preds[:, 0], preds[:, 1], target[:, 0], self.level, validate_args=False, normalization=None
        )


class BootstrapInterval(NamedTuple):
    """A statistic with its bootstrap percentile interval.

    Attributes:
        value: The statistic on the evaluated samples (the wrapped metric's ``compute()``, same bits).
        lower: The ``(1 - level) / 2`` quantile of the resampled statistics (float64, linear interpolation).
        upper: The ``(1 + level) / 2`` quantile (float64).
        std: The standard deviation of the resampled statistics (float64, ``n - 1``).

    Example:
        >>> from torch import tensor
        >>> from torchmetrics_varlen import VarlenAUROC
        >>> boot = VarlenBootstrap(VarlenAUROC(), num_bootstraps=50)
        >>> boot.update(tensor([0.9, 0.6, 0.4, 0.1]), tensor([1, 1, 0, 0]), sample_ids=tensor([0, 1, 2, 3]))
        >>> isinstance(boot.compute(), BootstrapInterval)
        True
    """

    value: Tensor
    lower: Tensor
    upper: Tensor
    std: Tensor


def _supported(metric: Any) -> str:
    """``"auroc"`` or ``"ap"`` for a metric the bootstrap can resample; raises otherwise."""
    from torchmetrics_varlen.classification.auroc import VarlenAUROC
    from torchmetrics_varlen.classification.average_precision import VarlenAveragePrecision

    if not isinstance(metric, VarlenAUROC | VarlenAveragePrecision):
        msg = (
            f"VarlenBootstrap resamples VarlenAUROC and VarlenAveragePrecision (binary, exact mode), but got"
            f" {type(metric).__name__}. For the AUROC's interval without resampling use VarlenAUROCInterval."
        )
        raise TypeError(msg)
    name = type(metric).__name__
    if metric.thresholds is not None or metric.mode.kind != "exact" or getattr(metric, "max_fpr", None) is not None:
        msg = f"VarlenBootstrap needs {name} in the exact mode (thresholds=None) without max_fpr."
        raise ValueError(msg)
    if metric.compute_sharded:
        msg = f"VarlenBootstrap does not support compute_sharded=True (of the wrapped {name}): use the default gather."
        raise ValueError(msg)
    return "auroc" if isinstance(metric, VarlenAUROC) else "ap"


class VarlenBootstrap(_VarlenMetric):
    r"""A bootstrap percentile interval of ``VarlenAUROC`` or ``VarlenAveragePrecision`` that is the same bit for
    bit at every world size, batch size and order.

    Resample ``b`` gives every sample a multiplicity drawn from Poisson(1) (the "Poisson bootstrap") by a
    counter-based hash of ``(seed, b, key)``, where ``key`` is the sample's id (``update(..., sample_ids=ids)``) or
    its global ``DistributedSampler`` position ``j * W + r`` (sample ``j`` of rank ``r``; needs ``dataset_size`` in
    the wrapped metric, which also drops the sampler's padding). So the resamples are a function of the samples, never
    of the ranks that held them. The statistic of each resample is the weighted AUROC / AP with the multiplicities as
    weights, computed over the one sort of the scores (no copy of the data per resample): memory O(N), time
    O(N log N + B N). A row of a multi-dimensional binary input is one sample (all its scores share a multiplicity).

    ``compute()`` returns :class:`BootstrapInterval` ``(value, lower, upper, std)``: the wrapped metric's value on
    the evaluated samples, and the percentile interval (quantiles ``(1 -/+ level) / 2``, linear interpolation) and
    standard deviation of the resampled values; resamples without positives (AUROC: or without negatives) are left
    out (NaN if all are). The bootstrap takes the wrapped metric's arguments (``dataset_size``, ``sync_timeout``,
    ``compute_on_rank``, ``ignore_index``, ``normalization``, ``process_group``, ...) and syncs like it: one guarded
    exchange (the keys travel as one more column); the wrapped metric itself is a template and is not updated.

    Args:
        metric: A binary :class:`~torchmetrics_varlen.VarlenAUROC` or
            :class:`~torchmetrics_varlen.VarlenAveragePrecision` in the exact mode (no ``thresholds``, no ``max_fpr``,
            no ``compute_sharded``).
        num_bootstraps: Number of resamples ``B`` (at least 2).
        level: Confidence level in (0, 1).
        seed: Integer seed of the resampling.

    Raises:
        TypeError: If ``metric`` is not one of the supported metrics.
        ValueError: On an invalid argument; in ``update()``, on bad input, or without ``sample_ids`` when the
            wrapped metric has no ``dataset_size`` (no key to seed a sample's multiplicities with).
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> import torch
        >>> from torchmetrics_varlen import VarlenAUROC
        >>> gen = torch.Generator().manual_seed(0)
        >>> target = torch.randint(0, 2, (200,), generator=gen)
        >>> preds = torch.rand(200, generator=gen) + 0.5 * target
        >>> boot = VarlenBootstrap(VarlenAUROC(dataset_size=200), num_bootstraps=200, seed=1)
        >>> boot.update(preds.clamp(max=1), target)
        >>> value, lower, upper, std = boot.compute()
        >>> bool(lower < value < upper)
        True
    """

    _tasks = ("binary",)
    _binned = False
    _weight_column = False

    def __init__(self, metric: Any, num_bootstraps: int = 1000, level: float = 0.95, seed: int = 0) -> None:
        statistic = _supported(metric)
        if isinstance(num_bootstraps, bool) or not isinstance(num_bootstraps, int) or num_bootstraps < 2:
            msg = f"Expected `num_bootstraps` to be an integer >= 2, but got {num_bootstraps!r}."
            raise ValueError(msg)
        if isinstance(seed, bool) or not isinstance(seed, int):
            msg = f"Expected `seed` to be an integer, but got {seed!r}."
            raise ValueError(msg)
        level = _check_level(level)
        if metric.task != "binary":
            msg = f"VarlenBootstrap needs a binary {type(metric).__name__}, but got task={metric.task!r}."
            raise ValueError(msg)
        keywords = {
            k: getattr(metric, k) for k in ("compute_on_cpu", "sync_on_compute", "compute_with_cache", "process_group")
        }
        super().__init__(
            ignore_index=metric.ignore_index,
            validate_args=metric.validate_args,
            normalization=metric.normalization,
            row_extras=("keys",),
            config={"wrapped": type(metric).__name__, "num_bootstraps": num_bootstraps, "level": level, "seed": seed},
            dataset_size=metric.dataset_size,
            sync_timeout=metric.sync_timeout,
            compute_on_rank=metric.compute_on_rank,
            **keywords,
        )
        self.metric_name = type(metric).__name__
        self._statistic = metric._statistic
        self._resampled_statistic = statistic
        self.num_bootstraps = num_bootstraps
        self.level = level
        self.seed = seed

    def update(  # type: ignore[override]  # no weights (the resamples are the weights)
        self, preds: Tensor, target: Tensor, sample_ids: Tensor | None = None
    ) -> None:
        """Validate one batch and add it to the state; a batch that fails validation changes nothing.

        Args:
            preds: Scores, as for the wrapped metric.
            target: Labels in {0, 1}.
            sample_ids: Global integer ids (one per row, or per element): the keys of the resampling. Without
                them the key is the sample's ``DistributedSampler`` position, which needs ``dataset_size``.
        """
        start = self._ledger.position(self) if self._forward_start is None else self._forward_start
        if sample_ids is None and self.dataset_size is None:
            msg = (
                f"VarlenBootstrap({self.metric_name}): a sample's multiplicities are seeded by its id or its sampler"
                " position, so pass `sample_ids=` to update(), or give the wrapped metric `dataset_size=len(dataset)`"
                f" (e.g. VarlenBootstrap({self.metric_name}(dataset_size=N)))."
            )
            raise self._refused(preds, msg)
        if sample_ids is not None:
            keys = sample_ids
        else:
            rank, world = group_position(self.process_group)
            rows = (preds.shape[0] if preds.ndim else 1) if isinstance(preds, Tensor) else 0
            positions = torch.arange(start, start + rows, dtype=torch.int64, device=preds.device)
            keys = self._ledger.base + positions * world + rank
            keys = keys if preds.ndim else keys.reshape(())
        self._update(preds, target, sample_ids, {"keys": keys}, start)

    def _value_from_wire(self, value: Any) -> Any:
        return BootstrapInterval(*value)

    def compute(self) -> BootstrapInterval:
        """The value and its bootstrap interval over everything seen by every rank of the process group."""
        rows = self._evaluated()
        assert self._statistic is not None
        problems = counted_problems(self.mode, (rows["preds"], rows["target"]), self._split, None, False)
        value = reduce_problems(problems, self._split, self._statistic)
        scores, positives, keys = (_cat(rows[n]) for n in ("preds", "target", "keys"))
        replicates = _resampled(scores, positives, keys, self._resampled_statistic, self.seed, self.num_bootstraps)
        defined = replicates[~torch.isnan(replicates)]
        nan = torch.tensor(math.nan, dtype=torch.float64, device=value.device)
        if defined.numel() == 0:
            return BootstrapInterval(value, nan, nan.clone(), nan.clone())
        q = torch.tensor([(1 - self.level) / 2, (1 + self.level) / 2], dtype=torch.float64, device=defined.device)
        lower, upper = torch.quantile(defined, q).unbind()
        std = defined.std() if defined.numel() > 1 else nan
        return BootstrapInterval(value, lower, upper, std)
