"""``VarlenROC`` and ``VarlenPrecisionRecallCurve``: torchmetrics' curve metrics, exact under DDP."""

from __future__ import annotations

from typing import Any

from torchmetrics_varlen._checks import Normalization, Thresholds, validate_ranking_args
from torchmetrics_varlen.classification._base import _RankingMetric
from torchmetrics_varlen.functional.curves import Curve, _compute_curve_binned, _from_columns


class _CurveMetric(_RankingMetric):
    _kind = "roc"
    _axes = ("False positive rate", "True positive rate")

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
        dataset_size: int | None = None,
        sync_timeout: float | None = 60.0,
        **kwargs: Any,
    ) -> None:
        validate_ranking_args(thresholds=thresholds, ignore_index=ignore_index)
        super().__init__(
            task=task,
            num_classes=num_classes,
            num_labels=num_labels,
            average=None,
            thresholds=thresholds,
            ignore_index=ignore_index,
            validate_args=validate_args,
            normalization=normalization,
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            **kwargs,
        )

    def compute(self) -> Curve:
        """The exact (or binned) curve over everything seen by every rank of the process group."""
        if self.thresholds is not None:
            return _compute_curve_binned(self._kind, self._evaluated_summed(), self.thresholds)
        return _from_columns(self._kind, self._columns(True), self.task)

    def _xy(self, curve: Curve) -> Curve:
        return curve

    def plot(self, curve: Curve | None = None, ax: Any | None = None) -> Any:
        """Draw the curve (needs matplotlib: ``pip install torchmetrics-varlen[plot]``).

        Args:
            curve: The output of ``compute()``; computed (and synced) if not given.
            ax: A matplotlib axis to draw on.

        Returns:
            ``(figure, axis)``.
        """
        from torchmetrics.utilities.plot import plot_curve

        return plot_curve(
            self._xy(curve if curve is not None else self.compute()),
            ax=ax,
            label_names=self._axes,
            name=type(self).__name__,
        )


class VarlenROC(_CurveMetric):
    r"""The ROC curve ``(fpr, tpr, thresholds)``, exact across ranks, as torchmetrics' ``BinaryROC`` returns it.

    Same constructor and inputs as :class:`torchmetrics.classification.BinaryROC` (``task="multiclass"`` /
    ``"multilabel"`` as ``MulticlassROC`` / ``MultilabelROC`` without ``average``): one point per distinct score,
    highest first, after ``(0, 0)`` at threshold ``1.0``; lists per class / label for the other tasks (binned:
    ``(K, T)`` tensors). Rates are float32, thresholds in the dtype of the scores; logits are normalised per batch
    as torchmetrics does, so thresholds are probabilities. Sync, dedup and ``sync_report`` as for
    :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        thresholds: ``None`` (exact), or an int / list / 1-D tensor for torchmetrics' binned curve.
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate arguments and every batch.
        normalization: As torchmetrics' argument: ``"sigmoid"`` (default) normalises a batch with a score outside
            [0, 1]; ``None`` keeps raw scores (thresholds are then logits).
        task: ``"binary"``, ``"multiclass"`` or ``"multilabel"``.
        num_classes: Number of classes (multiclass).
        num_labels: Number of labels (multilabel).
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        kwargs: Any :class:`torchmetrics.Metric` keyword.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenROC()
        >>> metric.update(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        >>> fpr, tpr, thresholds = metric.compute()
        >>> tpr
        tensor([0.0000, 0.5000, 0.5000, 1.0000, 1.0000])
    """


class VarlenPrecisionRecallCurve(_CurveMetric):
    r"""The precision-recall curve, exact across ranks, as torchmetrics' ``BinaryPrecisionRecallCurve`` returns it.

    Same constructor and inputs as :class:`torchmetrics.classification.BinaryPrecisionRecallCurve` (other tasks as
    the ``Multiclass`` / ``Multilabel`` classes): ``(precision, recall, thresholds)`` with thresholds increasing
    and a final ``(1, 0)`` point; precision and recall float32, thresholds in the dtype of the scores, logits
    normalised per batch. Sync, dedup and ``sync_report`` as for :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        thresholds: ``None`` (exact), or an int / list / 1-D tensor for torchmetrics' binned curve.
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate arguments and every batch.
        normalization: As torchmetrics' argument: ``"sigmoid"`` (default) normalises a batch with a score outside
            [0, 1]; ``None`` keeps raw scores (thresholds are then logits).
        task: ``"binary"``, ``"multiclass"`` or ``"multilabel"``.
        num_classes: Number of classes (multiclass).
        num_labels: Number of labels (multilabel).
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        kwargs: Any :class:`torchmetrics.Metric` keyword.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenPrecisionRecallCurve()
        >>> metric.update(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        >>> precision, recall, thresholds = metric.compute()
        >>> recall
        tensor([1.0000, 1.0000, 0.5000, 0.5000, 0.0000])
    """

    _kind = "pr"
    _axes = ("Recall", "Precision")

    def _xy(self, curve: Curve) -> Curve:
        return curve[1], curve[0], curve[2]  # type: ignore[return-value]
