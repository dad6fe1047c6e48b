"""Average-precision classes: ``VarlenAveragePrecision`` (drop-in for ``BinaryAveragePrecision``, with ``task=``) and
the multiclass / multilabel ones.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torchmetrics import Metric

from torchmetrics_varlen.classification._base import _VarlenMetric
from torchmetrics_varlen.classification._constructors import _Multiclass, _Multilabel
from torchmetrics_varlen.classification._task_wrapper import _TaskWrapper
from torchmetrics_varlen.functional._ranking import reduce_problems
from torchmetrics_varlen.functional._validation import Average, Normalization, Thresholds
from torchmetrics_varlen.functional._weighted import reduce_weighted
from torchmetrics_varlen.functional.average_precision import AVERAGE_PRECISION


class _AveragePrecisionMetric(_VarlenMetric):
    """The state and compute every average-precision class shares."""

    _statistic = AVERAGE_PRECISION
    _takes_weights = True

    def compute(self) -> Tensor:
        """Exact (or binned) average precision over everything seen by every rank of the process group."""
        weighted = self._weighted_problems()
        if weighted is not None:
            return reduce_weighted(weighted, self._split, AVERAGE_PRECISION)
        return reduce_problems(self._problems(with_scores=False), self._split, AVERAGE_PRECISION)


class VarlenAveragePrecision(_TaskWrapper, _AveragePrecisionMetric):
    r"""Average precision, exact across ranks, uneven shards, empty ranks and sampler padding.

    Single process it is :class:`torchmetrics.classification.BinaryAveragePrecision`: the same constructor, inputs
    and values (scikit-learn's ``average_precision_score``: ``sum_k (R_k - R_{k-1}) P_k`` over distinct scores, ties
    as one step, no interpolation), as float32. ``update(preds, target)`` takes:

    - ``preds``: floating scores of any shape (flattened); a batch with any score outside [0, 1] gets a sigmoid;
    - ``target``: labels in {0, 1} of the same shape (integer, bool, or floating ``0.0`` / ``1.0``).

    Exactness, synchronisation, dedup (``dataset_size`` / ``sample_ids``) and ``sync_report`` as for
    :class:`~torchmetrics_varlen.VarlenAUROC`. ``task="multiclass"`` / ``"multilabel"`` return a
    :class:`VarlenMulticlassAveragePrecision` / :class:`VarlenMultilabelAveragePrecision`.

    Args:
        thresholds: ``None`` (exact), an int / list / 1-D tensor for torchmetrics' binned approximation, or a
            16-bit dtype (exact for the rounded scores, constant memory).
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate every batch.
        normalization: As torchmetrics' argument: ``"sigmoid"`` (default) normalises a batch with a score outside
            [0, 1]; ``None`` keeps raw scores; ``"softmax"`` only accepts batches of probabilities.
        task: ``"binary"``; ``"multiclass"`` / ``"multilabel"`` build the task class.
        num_classes: For ``task="multiclass"``.
        num_labels: For ``task="multilabel"``.
        average: For the other tasks; ignored for binary.
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: The distributed sample sort (exact mode): each rank keeps about ``1 / W`` of the scores.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument, or, in ``update()``, on mismatched shapes, scores that are not finite
            floats or labels outside {0, 1}; at ``compute()``, if ``compute_on_rank`` is not a rank of the group.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenAveragePrecision()
        >>> metric.update(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        >>> metric.compute()
        tensor(0.8333)
    """

    @classmethod
    def _task_classes(cls) -> dict[str, type[Metric]]:
        return {"multiclass": VarlenMulticlassAveragePrecision, "multilabel": VarlenMultilabelAveragePrecision}

    def __init__(
        self,
        thresholds: Thresholds = None,
        ignore_index: int | None = None,
        validate_args: bool = True,
        normalization: Normalization = "sigmoid",
        *,
        task: str = "binary",
        num_classes: int | None = None,
        num_labels: int | None = None,
        average: Average = "macro",
        dataset_size: int | None = None,
        sync_timeout: float | None = 60.0,
        compute_on_rank: int | None = None,
        compute_sharded: bool = False,
        sync_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        # num_classes and num_labels are the other tasks' (``_TaskWrapper.__new__``): unused here.
        super().__init__(
            thresholds=thresholds,
            ignore_index=ignore_index,
            validate_args=validate_args,
            normalization=normalization,
            task=task,
            average=average,
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            compute_on_rank=compute_on_rank,
            compute_sharded=compute_sharded,
            sync_key=sync_key,
            **kwargs,
        )


class VarlenMulticlassAveragePrecision(_Multiclass, _AveragePrecisionMetric):
    r"""One-vs-rest average precision per class, averaged: torchmetrics' ``MulticlassAveragePrecision``, exact under
    DDP.

    Same constructor, inputs and values as :class:`torchmetrics.classification.MulticlassAveragePrecision`
    (scikit-learn's ``average_precision_score`` per class), as float32. ``update(preds, target)`` takes:

    - ``preds``: ``(N, C, ...)`` floating class scores; a batch with any score outside [0, 1] gets a softmax over
      the classes, as torchmetrics does;
    - ``target``: ``(N, ...)`` class indices in ``[0, C)`` (integer, or floating point holding whole numbers).

    A class without positive samples has no average precision: NaN with ``average="none"``, left out of
    the other averages with a warning. Exactness, synchronisation, dedup and ``sync_report`` as for
    :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        num_classes: Number of classes (at least 2).
        average: ``"macro"``, ``"weighted"`` (by positives), or ``"none"`` / ``None`` (one value per class).
        thresholds: ``None`` (exact), binned thresholds, or a 16-bit dtype, as for
            :class:`~torchmetrics_varlen.VarlenAveragePrecision`.
        ignore_index: Target value whose samples are ignored.
        validate_args: Validate every batch.
        normalization: ``"sigmoid"`` (default: torchmetrics' softmax of batches that are not probabilities) or
            ``None`` (raw scores).
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: The distributed sample sort (exact mode): each rank keeps about ``1 / W`` of the scores.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument, or, in ``update()``, on shapes that do not match ``num_classes``,
            scores that are not finite floats, or class indices out of range.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenMulticlassAveragePrecision(3, average="none")
        >>> metric.update(tensor([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.3, 0.6], [0.5, 0.3, 0.2]]),
        ...               tensor([0, 1, 2, 1]))
        >>> metric.compute()
        tensor([1.0000, 0.8333, 1.0000])
    """


class VarlenMultilabelAveragePrecision(_Multilabel, _AveragePrecisionMetric):
    r"""Average precision per label, averaged: torchmetrics' ``MultilabelAveragePrecision``, exact under DDP.

    Same constructor, inputs and values as :class:`torchmetrics.classification.MultilabelAveragePrecision`, as
    float32. ``update(preds, target)`` takes:

    - ``preds``: ``(N, L, ...)`` floating scores; a batch with any score outside [0, 1] gets a sigmoid;
    - ``target``: the same shape, labels in {0, 1} (integer, bool or floating point).

    ``average="micro"`` takes every (sample, label) entry as one binary problem. A label without positive samples has
    no average precision: NaN with ``average="none"``, left out of the other averages with a warning.
    Exactness, synchronisation, dedup and ``sync_report`` as for :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        num_labels: Number of labels (at least 1).
        average: ``"micro"``, ``"macro"``, ``"weighted"`` (by positives), or ``"none"`` / ``None`` (per label).
        thresholds: ``None`` (exact), binned thresholds, or a 16-bit dtype.
        ignore_index: Target value whose entries are ignored.
        validate_args: Validate every batch.
        normalization: ``"sigmoid"`` (default) or ``None`` (raw scores).
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: The distributed sample sort (exact mode): each rank keeps about ``1 / W`` of the scores.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument, or, in ``update()``, on shapes that do not match ``num_labels``,
            scores that are not finite floats, or labels outside {0, 1}.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenMultilabelAveragePrecision(2, average="micro")
        >>> metric.update(tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.3]]), tensor([[1, 0], [0, 1], [0, 0]]))
        >>> metric.compute()
        tensor(1.)
    """
