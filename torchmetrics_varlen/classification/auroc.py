"""AUROC classes: ``VarlenAUROC`` (drop-in for ``BinaryAUROC``, with ``task=``) and the multiclass / multilabel ones."""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torchmetrics import Metric

from torchmetrics_varlen.classification._base import _VarlenMetric
from torchmetrics_varlen.classification._constructors import _Multiclass, _Multilabel
from torchmetrics_varlen.classification._task_wrapper import _TaskWrapper
from torchmetrics_varlen.functional._validation import Average, Normalization, Thresholds
from torchmetrics_varlen.functional.auroc import AUROC, _compute, _compute_weighted


class _AUROCMetric(_VarlenMetric):
    """The state and compute every AUROC class shares."""

    _statistic = AUROC
    _takes_weights = True

    def __init__(self, *, max_fpr: float | None = None, **kwargs: Any) -> None:
        super().__init__(max_fpr=max_fpr, config={"max_fpr": max_fpr}, **kwargs)
        self.max_fpr = max_fpr

    def compute(self) -> Tensor:
        """Exact (or binned) AUROC over everything seen by every rank of the process group."""
        weighted = self._weighted_problems()
        if weighted is not None:
            return _compute_weighted(weighted, self._split, self.max_fpr)
        return _compute(self._problems(with_scores=self.max_fpr is not None), self._split, self.max_fpr)


class VarlenAUROC(_TaskWrapper, _AUROCMetric):
    r"""Area under the ROC curve, exact across ranks, uneven shards, empty ranks and sampler padding.

    Single process it is :class:`torchmetrics.classification.BinaryAUROC`: the same constructor, inputs and values
    (scikit-learn's ``roc_auc_score``), as float32. ``update(preds, target)`` takes:

    - ``preds``: floating scores of any shape (flattened), probabilities or logits; as torchmetrics, a batch with
      any score outside [0, 1] is taken for logits and goes through a sigmoid before it is stored;
    - ``target``: labels in {0, 1} of the same shape (integer, bool, or floating ``0.0`` / ``1.0``).

    Exact mode (``thresholds=None``) keeps every score and computes the area from integer counts per distinct
    score (ties form one step) in float64, rounded once to float32 at the end, so the value depends only on the set
    of samples evaluated, never on how they were split over ranks or batches. ``compute()`` on several ranks runs
    one guarded exchange: a check-in on the process group's store (a missing rank becomes a
    :class:`~torchmetrics_varlen.MetricSyncError` after ``sync_timeout`` seconds), then one exchange for all states,
    with ranks of any length, zero included. Padded duplicates of ``DistributedSampler(drop_last=False)`` are removed
    with ``dataset_size=len(dataset)`` or ``update(..., sample_ids=ids)``; ``sync_report`` tells what was evaluated.

    ``task="multiclass"`` / ``"multilabel"`` return a :class:`VarlenMulticlassAUROC` / :class:`VarlenMultilabelAUROC`,
    as torchmetrics' ``AUROC(task=...)`` returns its task classes.

    Args:
        max_fpr: The McClish-standardised partial AUC up to this false positive rate (binary only).
        thresholds: ``None`` (exact), an int / list / 1-D tensor for torchmetrics' binned approximation, or
            ``torch.float16`` / ``torch.bfloat16``: exact for the scores rounded to that dtype, in constant memory.
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate every batch (``ValueError`` in ``update()``, state unchanged).
        normalization: ``"sigmoid"`` (torchmetrics' behaviour) or ``None`` to rank raw scores (no float32 saturation
            of large logits into ties); ``"softmax"`` (torchmetrics' option of the other binary classes) accepts
            only probabilities in the binary task.
        task: ``"binary"``; ``"multiclass"`` / ``"multilabel"`` build the task class (see above).
        num_classes: For ``task="multiclass"``.
        num_labels: For ``task="multilabel"``.
        average: For the other tasks; ignored for binary.
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: positions ``>= dataset_size`` in its
            rank-interleaved order are its padding, dropped in ``update()``; with ``sample_ids`` only used to report
            missing samples.
        sync_timeout: Seconds every rank waits for the others at ``compute()`` (default 60); ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value; every rank
            still calls ``compute()`` (exact mode).
        compute_sharded: AUROC and AP, exact mode, without ``max_fpr``: a distributed sample sort, each rank keeps
            about ``1 / W`` of the scores, same value.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``sync_on_compute``,
            ``process_group``, ...; ``dist_sync_fn`` is ignored: the metric syncs itself). Any other name is a
            ``TypeError``, as for a function.

    Raises:
        TypeError: On a keyword the constructor does not take (a typo of a synchronisation keyword).
        ValueError: On an invalid argument (in the constructor), or, in ``update()``, on mismatched shapes, scores
            that are not finite floats or labels outside {0, 1}; at ``compute()``, if ``compute_on_rank`` is not a
            rank of the process group.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenAUROC()
        >>> metric.update(tensor([0.1, 0.4]), tensor([0, 0]))
        >>> metric.update(tensor([0.35, 0.8]), tensor([1, 1]))
        >>> metric.compute()
        tensor(0.7500)
    """

    @classmethod
    def _task_classes(cls) -> dict[str, type[Metric]]:
        return {"multiclass": VarlenMulticlassAUROC, "multilabel": VarlenMultilabelAUROC}

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
        sync_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        # num_classes and num_labels are the other tasks' (``_TaskWrapper.__new__``): unused here.
        super().__init__(
            max_fpr=max_fpr,
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


class VarlenMulticlassAUROC(_Multiclass, _AUROCMetric):
    r"""One-vs-rest AUROC per class, averaged: :class:`torchmetrics.classification.MulticlassAUROC`, exact under DDP.

    Same constructor, inputs and values as torchmetrics' class (scikit-learn's ``roc_auc_score`` per class), as
    float32. ``update(preds, target)`` takes:

    - ``preds``: ``(N, C, ...)`` floating class scores; a batch with any score outside [0, 1] gets a softmax over
      the classes, as torchmetrics does;
    - ``target``: ``(N, ...)`` class indices in ``[0, C)`` (integer, or floating point holding whole numbers).

    A class without positive or without negative samples has no AUROC: NaN with ``average="none"``, left out of
    the other averages with a warning. Exactness, synchronisation, dedup and ``sync_report`` as for
    :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        num_classes: Number of classes (at least 2).
        average: ``"macro"``, ``"weighted"`` (by positives), or ``"none"`` / ``None`` (one value per class).
        thresholds: ``None`` (exact), binned thresholds, or a 16-bit dtype, as for
            :class:`~torchmetrics_varlen.VarlenAUROC`.
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
        >>> metric = VarlenMulticlassAUROC(3, average="none")
        >>> metric.update(tensor([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.3, 0.6], [0.5, 0.3, 0.2]]),
        ...               tensor([0, 1, 2, 1]))
        >>> metric.compute()
        tensor([1.0000, 0.8750, 1.0000])
    """


class VarlenMultilabelAUROC(_Multilabel, _AUROCMetric):
    r"""AUROC per label, averaged: :class:`torchmetrics.classification.MultilabelAUROC`, exact under DDP.

    Same constructor, inputs and values as torchmetrics' class, as float32. ``update(preds, target)`` takes:

    - ``preds``: ``(N, L, ...)`` floating scores; a batch with any score outside [0, 1] gets a sigmoid;
    - ``target``: the same shape, labels in {0, 1} (integer, bool or floating point).

    ``average="micro"`` takes every (sample, label) entry as one binary problem. A label without positive or without
    negative samples has no AUROC: NaN with ``average="none"``, left out of the other averages with a warning.
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
        >>> metric = VarlenMultilabelAUROC(2, average="micro")
        >>> metric.update(tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.3]]), tensor([[1, 0], [0, 1], [0, 0]]))
        >>> metric.compute()
        tensor(1.)
    """
