"""``VarlenAveragePrecision``: a drop-in for ``BinaryAveragePrecision`` (and the task APs), exact under DDP."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from torchmetrics_varlen._checks import Normalization, Thresholds
from torchmetrics_varlen.classification._base import _RankingMetric
from torchmetrics_varlen.functional._ranking import RankSums
from torchmetrics_varlen.functional._tasks import Average
from torchmetrics_varlen.functional.average_precision import _compute_binned, _from_columns, _from_sums, _validate_args


class VarlenAveragePrecision(_RankingMetric):
    r"""Average precision, exact across ranks, uneven shards, empty ranks and sampler padding.

    Single process it is :class:`torchmetrics.classification.BinaryAveragePrecision` with the same constructor and
    inputs (logits normalised per batch, float 0/1 labels accepted, float32 values); ``task="multiclass"`` /
    ``"multilabel"`` follow torchmetrics' task classes. Exact values equal scikit-learn's
    ``average_precision_score``: ``sum_k (R_k - R_{k-1}) P_k`` over distinct scores, ties as one step, no
    interpolation.

    Synchronisation, dedup (``dataset_size`` / ``sample_ids``) and ``sync_report`` work as for
    :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        thresholds: ``None`` (exact), or an int / list / 1-D tensor for torchmetrics' binned approximation.
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate arguments and every batch.
        normalization: As torchmetrics' argument: ``"sigmoid"`` (default) normalises a batch with a score outside
            [0, 1]; ``None`` keeps raw scores; ``"softmax"`` only accepts binary batches of probabilities
            (multiclass batches always get the softmax, multilabel the sigmoid, unless ``None``).
        task: ``"binary"``, ``"multiclass"`` or ``"multilabel"``.
        num_classes: Number of classes (multiclass).
        num_labels: Number of labels (multilabel).
        average: ``"macro"``, ``"weighted"``, ``"none"``, or ``"micro"`` (multilabel). Ignored for binary.
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value: the other
            ranks never hold more than their own share. Every rank still calls ``compute()``. (Exact mode.)
        compute_sharded: Spread the exact computation over the ranks (a distributed sample sort): each rank ends
            up with one range of the scores, about ``1 / W`` of them, and no rank ever holds every prediction. Same
            value (AUROC bit for bit, AP to ~1e-16 relative) with less memory per rank. Exact mode.
        kwargs: Any :class:`torchmetrics.Metric` keyword.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenAveragePrecision()
        >>> metric.update(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        >>> metric.compute()
        tensor(0.8333)
    """

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
        **kwargs: Any,
    ) -> None:
        _validate_args(task, num_classes, num_labels, average, thresholds, ignore_index)
        super().__init__(
            task=task,
            num_classes=num_classes,
            num_labels=num_labels,
            average=average,
            thresholds=thresholds,
            ignore_index=ignore_index,
            validate_args=validate_args,
            normalization=normalization,
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            compute_on_rank=compute_on_rank,
            compute_sharded=compute_sharded,
            **kwargs,
        )

    _wanted_sums = (False, True)

    def _value_from_sums(self, sums: list[RankSums]) -> Tensor:
        return _from_sums(sums, self.task, self.average, self.num_samples.device)

    def compute(self) -> Tensor:
        """Exact (or binned) average precision over everything seen by every rank of the process group."""
        if self.thresholds is not None:
            return _compute_binned(self._evaluated_summed(), self.task, self.average)
        return _from_columns(self._columns(False), self.task, self.average)
