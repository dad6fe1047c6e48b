"""``VarlenAUROC``: a drop-in for torchmetrics' ``BinaryAUROC`` (and the task AUROCs) that stays exact under DDP."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from torchmetrics_varlen._checks import Normalization, Thresholds
from torchmetrics_varlen.classification._base import _RankingMetric
from torchmetrics_varlen.functional._ranking import RankSums
from torchmetrics_varlen.functional._tasks import Average
from torchmetrics_varlen.functional.auroc import _compute_binned, _from_columns, _from_sums, _validate_args


class VarlenAUROC(_RankingMetric):
    r"""Area under the ROC curve, exact across ranks, uneven shards, empty ranks and sampler padding.

    Single process it is :class:`torchmetrics.classification.BinaryAUROC` with the same constructor and inputs
    (``task="binary"``, the default): ``update(preds, target)`` with floating scores (probabilities or logits) and
    labels in {0, 1} (integer, bool or floating point) of the same, any, shape. ``task="multiclass"``
    (``preds (N, C, ...)``, ``target (N, ...)``, one-vs-rest) and ``task="multilabel"`` (``preds``,
    ``target (N, L, ...)``) follow torchmetrics' ``MulticlassAUROC`` / ``MultilabelAUROC``. Values equal
    torchmetrics' and scikit-learn's ``roc_auc_score`` and come back as float32, as torchmetrics returns them. As
    torchmetrics, a batch with any score outside [0, 1] is taken for logits and normalised (sigmoid; softmax over
    the classes for multiclass) before it is stored.

    Exact mode (``thresholds=None``) keeps every score and computes the area from integer counts per distinct
    score (ties form one step) in float64, rounded once to float32 at the end, so the value depends only on the set
    of samples evaluated, never on how they were split over ranks or batches. ``compute()`` on several ranks runs
    one guarded exchange: a check-in on the process group's store (a missing rank becomes a
    :class:`~torchmetrics_varlen.MetricSyncError` after ``sync_timeout`` seconds), then one exchange for all states,
    with ranks of any length, zero included.

    Padded duplicates from ``DistributedSampler(drop_last=False)`` are removed with ``dataset_size=len(dataset)``
    or by passing ``update(..., sample_ids=ids)``; ``sync_report`` tells what was evaluated.

    Args:
        max_fpr: Binary only: the McClish-standardised partial AUC up to this false positive rate.
        thresholds: ``None`` (exact), or an int / list / 1-D tensor for torchmetrics' binned approximation.
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate arguments and every batch (``ValueError`` in ``update()``, state unchanged).
        normalization: How a batch with a score outside [0, 1] is normalised: ``"sigmoid"`` (torchmetrics'
            behaviour; multiclass batches get the softmax), or ``None`` to rank raw scores (no float32 saturation of
            large logits into ties). ``"softmax"`` is torchmetrics' option of the other binary classes: binary
            batches then must hold probabilities.
        task: ``"binary"``, ``"multiclass"`` or ``"multilabel"``.
        num_classes: Number of classes (multiclass).
        num_labels: Number of labels (multilabel).
        average: ``"macro"``, ``"weighted"``, ``"none"``, or ``"micro"`` (multilabel). Ignored for binary.
        dataset_size: Size of the data set behind a ``DistributedSampler``: the padding the sampler adds (positions
            ``>= dataset_size`` in its rank-interleaved order) is dropped in ``update()``, so every sample counts once.
            With ``sample_ids`` it is only used to report missing samples.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value: the other
            ranks never hold more than their own share. Every rank still calls ``compute()``. (Exact mode.)
        compute_sharded: Spread the exact computation over the ranks (a distributed sample sort): each rank ends
            up with one range of the scores, about ``1 / W`` of them, and no rank ever holds every prediction. Same
            value (AUROC bit for bit, AP to ~1e-16 relative) with less memory per rank. Exact mode, without ``max_fpr``.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``sync_on_compute``,
            ``process_group``, ...). ``dist_sync_fn`` is ignored: the metric syncs itself.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenAUROC()
        >>> metric.update(tensor([0.1, 0.4]), tensor([0, 0]))
        >>> metric.update(tensor([0.35, 0.8]), tensor([1, 1]))
        >>> metric.compute()
        tensor(0.7500)
    """

    def __init__(
        self,
        max_fpr: float | None = None,
        thresholds: Thresholds = None,
        ignore_index: int | None = None,
        validate_args: bool = True,
        *,
        normalization: Normalization = "sigmoid",
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
        _validate_args(task, num_classes, num_labels, average, max_fpr, thresholds, ignore_index)
        if compute_sharded and max_fpr is not None:
            msg = "`compute_sharded=True` computes the full AUROC from per-range sums; it does not support `max_fpr`."
            raise ValueError(msg)
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
            config={"max_fpr": max_fpr},
            **kwargs,
        )
        self.max_fpr = max_fpr

    _wanted_sums = (True, False)

    def _value_from_sums(self, sums: list[RankSums]) -> Tensor:
        return _from_sums(sums, self.task, self.average, self.num_samples.device)

    def compute(self) -> Tensor:
        """Exact (or binned) AUROC over everything seen by every rank of the process group."""
        if self.thresholds is not None:
            return _compute_binned(self._evaluated_summed(), self.thresholds, self.task, self.average, self.max_fpr)
        return _from_columns(self._columns(self.max_fpr is not None), self.task, self.average, self.max_fpr)
