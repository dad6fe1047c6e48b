"""ROC and precision-recall curve classes: ``VarlenROC`` / ``VarlenPrecisionRecallCurve`` (drop-ins for torchmetrics'
binary curves, with ``task=``) and the multiclass / multilabel ones.
"""

from __future__ import annotations

from typing import Any

from torchmetrics import Metric

from torchmetrics_varlen.classification._base import _VarlenMetric
from torchmetrics_varlen.classification._constructors import _CurveBinary, _CurveMulticlass, _CurveMultilabel
from torchmetrics_varlen.functional._validation import CURVE_AVERAGES
from torchmetrics_varlen.functional.curves import Curve, _compute


class _CurveMetric(_VarlenMetric):
    """The state, compute and plot every curve class shares."""

    _averages = CURVE_AVERAGES
    _kind = "roc"
    _axes = ("False positive rate", "True positive rate")
    _takes_weights = True

    def compute(self) -> Curve:
        """The exact (or binned) curve over everything seen by every rank of the process group."""
        weighted = self._weighted_problems()
        if weighted is not None:
            return _compute(self._kind, list(weighted), self._split)
        return _compute(self._kind, self._problems(with_scores=True), self._split)

    def _xy(self, curve: Curve) -> Curve:
        """``(x, y, thresholds)`` to draw: PR curves are drawn as precision over recall."""
        return curve if self._kind == "roc" else (curve[1], curve[0], curve[2])  # type: ignore[return-value]

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


class VarlenROC(_CurveBinary, _CurveMetric):
    r"""The ROC curve ``(fpr, tpr, thresholds)``, exact across ranks, as torchmetrics' ``BinaryROC`` returns it.

    Same constructor, inputs and values as :class:`torchmetrics.classification.BinaryROC`: one point per distinct
    score, highest first, after ``(0, 0)`` at threshold ``1.0``; binned thresholds give torchmetrics' binned curve.
    Rates are float32, thresholds in the dtype of the scores (a batch with any score outside [0, 1] gets a sigmoid
    first, as torchmetrics does). ``update(preds, target)`` takes:

    - ``preds``: floating scores of any shape (flattened);
    - ``target``: labels in {0, 1} of the same shape (integer, bool, or floating ``0.0`` / ``1.0``).

    Synchronisation, dedup and ``sync_report`` as for :class:`~torchmetrics_varlen.VarlenAUROC`.
    ``task="multiclass"`` / ``"multilabel"`` return a :class:`VarlenMulticlassROC` /
    :class:`VarlenMultilabelROC`.

    Args:
        thresholds: ``None`` (exact), an int / list / 1-D tensor for torchmetrics' binned curve, or a 16-bit dtype.
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate every batch.
        normalization: As torchmetrics' argument: ``"sigmoid"`` (default) or ``None`` (raw scores: thresholds are
            then logits); ``"softmax"`` only accepts batches of probabilities.
        task: ``"binary"``; ``"multiclass"`` / ``"multilabel"`` build the task class.
        num_classes: For ``task="multiclass"``.
        num_labels: For ``task="multilabel"``.
        average: For ``task="multiclass"``: ``None``, ``"micro"`` or ``"macro"``.
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: Only ``False``: the sharded compute is AUROC's and average precision's.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument, or, in ``update()``, on mismatched shapes, scores that are not finite
            floats or labels outside {0, 1}; at ``compute()``, if ``compute_on_rank`` is not a rank of the group.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenROC()
        >>> metric.update(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        >>> fpr, tpr, thresholds = metric.compute()
        >>> tpr
        tensor([0.0000, 0.5000, 0.5000, 1.0000, 1.0000])
    """

    @classmethod
    def _task_classes(cls) -> dict[str, type[Metric]]:
        return {"multiclass": VarlenMulticlassROC, "multilabel": VarlenMultilabelROC}


class VarlenMulticlassROC(_CurveMulticlass, _CurveMetric):
    r"""One-vs-rest ROC curves per class, as torchmetrics' ``MulticlassROC`` returns them, exact under DDP.

    Same constructor, inputs and values as :class:`torchmetrics.classification.MulticlassROC`: lists with one
    curve per class (exact; ``(C, T)`` tensors when binned), or one curve with ``average="micro"`` (every
    one-vs-rest entry as one problem) or ``"macro"`` (the class curves interpolated at all their points and
    averaged). ``update(preds, target)`` takes:

    - ``preds``: ``(N, C, ...)`` floating class scores (a batch not in [0, 1] gets a softmax over the classes);
    - ``target``: ``(N, ...)`` class indices in ``[0, C)``.

    Synchronisation, dedup and ``sync_report`` as for :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        num_classes: Number of classes (at least 2).
        thresholds: ``None`` (exact), binned thresholds, or a 16-bit dtype.
        average: ``None`` (a curve per class), ``"micro"`` or ``"macro"``.
        ignore_index: Target value whose samples are ignored.
        validate_args: Validate every batch.
        normalization: ``"sigmoid"`` (default: torchmetrics' softmax of batches that are not probabilities) or
            ``None`` (raw scores).
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: Only ``False``: the sharded compute is AUROC's and average precision's.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument, or, in ``update()``, on shapes that do not match ``num_classes``,
            scores that are not finite floats, or class indices out of range.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenMulticlassROC(3, average="micro")
        >>> metric.update(tensor([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.3, 0.6]]), tensor([0, 1, 2]))
        >>> metric.compute()[2]
        tensor([1.0000, 0.7000, 0.6000, 0.5000, 0.3000, 0.2000, 0.1000])
    """


class VarlenMultilabelROC(_CurveMultilabel, _CurveMetric):
    r"""ROC curves per label, as torchmetrics' ``MultilabelROC`` returns them, exact under DDP.

    Same constructor, inputs and values as :class:`torchmetrics.classification.MultilabelROC`: lists with one
    curve per label (exact; ``(L, T)`` tensors when binned). ``update(preds, target)`` takes:

    - ``preds``: ``(N, L, ...)`` floating scores (a batch not in [0, 1] gets a sigmoid);
    - ``target``: the same shape, labels in {0, 1}.

    Synchronisation, dedup and ``sync_report`` as for :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        num_labels: Number of labels (at least 1).
        thresholds: ``None`` (exact), binned thresholds, or a 16-bit dtype.
        ignore_index: Target value whose entries are ignored.
        validate_args: Validate every batch.
        normalization: ``"sigmoid"`` (default) or ``None`` (raw scores).
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: Only ``False``: the sharded compute is AUROC's and average precision's.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument, or, in ``update()``, on shapes that do not match ``num_labels``,
            scores that are not finite floats, or labels outside {0, 1}.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenMultilabelROC(2)
        >>> metric.update(tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.3]]), tensor([[1, 0], [0, 1], [0, 0]]))
        >>> len(metric.compute()[0])
        2
    """


class VarlenPrecisionRecallCurve(_CurveBinary, _CurveMetric):
    r"""The precision-recall curve, exact across ranks, as torchmetrics' ``BinaryPrecisionRecallCurve`` returns it.

    Same constructor, inputs and values as :class:`torchmetrics.classification.BinaryPrecisionRecallCurve`: one
    point per distinct score, thresholds increasing, then a final ``(1, 0)`` point; binned thresholds give
    torchmetrics' binned curve. Rates are float32, thresholds in the dtype of the scores (a batch with any score
    outside [0, 1] gets a sigmoid first, as torchmetrics does). ``update(preds, target)`` takes:

    - ``preds``: floating scores of any shape (flattened);
    - ``target``: labels in {0, 1} of the same shape (integer, bool, or floating ``0.0`` / ``1.0``).

    Synchronisation, dedup and ``sync_report`` as for :class:`~torchmetrics_varlen.VarlenAUROC`.
    ``task="multiclass"`` / ``"multilabel"`` return a :class:`VarlenMulticlassPrecisionRecallCurve` /
    :class:`VarlenMultilabelPrecisionRecallCurve`.

    Args:
        thresholds: ``None`` (exact), an int / list / 1-D tensor for torchmetrics' binned curve, or a 16-bit dtype.
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate every batch.
        normalization: As torchmetrics' argument: ``"sigmoid"`` (default) or ``None`` (raw scores: thresholds are
            then logits); ``"softmax"`` only accepts batches of probabilities.
        task: ``"binary"``; ``"multiclass"`` / ``"multilabel"`` build the task class.
        num_classes: For ``task="multiclass"``.
        num_labels: For ``task="multilabel"``.
        average: For ``task="multiclass"``: ``None``, ``"micro"`` or ``"macro"``.
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: Only ``False``: the sharded compute is AUROC's and average precision's.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument, or, in ``update()``, on mismatched shapes, scores that are not finite
            floats or labels outside {0, 1}; at ``compute()``, if ``compute_on_rank`` is not a rank of the group.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

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

    @classmethod
    def _task_classes(cls) -> dict[str, type[Metric]]:
        return {"multiclass": VarlenMulticlassPrecisionRecallCurve, "multilabel": VarlenMultilabelPrecisionRecallCurve}


class VarlenMulticlassPrecisionRecallCurve(_CurveMulticlass, _CurveMetric):
    r"""One-vs-rest precision-recall curves per class, as torchmetrics' ``MulticlassPrecisionRecallCurve`` returns
    them, exact under DDP.

    Same constructor, inputs and values as :class:`torchmetrics.classification.MulticlassPrecisionRecallCurve`: lists
    with one curve per class (exact; ``(C, T)`` tensors when binned), or one curve with ``average="micro"`` (every
    one-vs-rest entry as one problem) or ``"macro"`` (the class curves interpolated at all their points and
    averaged). ``update(preds, target)`` takes:

    - ``preds``: ``(N, C, ...)`` floating class scores (a batch not in [0, 1] gets a softmax over the classes);
    - ``target``: ``(N, ...)`` class indices in ``[0, C)``.

    Synchronisation, dedup and ``sync_report`` as for :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        num_classes: Number of classes (at least 2).
        thresholds: ``None`` (exact), binned thresholds, or a 16-bit dtype.
        average: ``None`` (a curve per class), ``"micro"`` or ``"macro"``.
        ignore_index: Target value whose samples are ignored.
        validate_args: Validate every batch.
        normalization: ``"sigmoid"`` (default: torchmetrics' softmax of batches that are not probabilities) or
            ``None`` (raw scores).
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: Only ``False``: the sharded compute is AUROC's and average precision's.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument, or, in ``update()``, on shapes that do not match ``num_classes``,
            scores that are not finite floats, or class indices out of range.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenMulticlassPrecisionRecallCurve(3, average="micro")
        >>> metric.update(tensor([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.3, 0.6]]), tensor([0, 1, 2]))
        >>> metric.compute()[2]
        tensor([0.1000, 0.2000, 0.3000, 0.5000, 0.6000, 0.7000])
    """

    _kind = "pr"
    _axes = ("Recall", "Precision")


class VarlenMultilabelPrecisionRecallCurve(_CurveMultilabel, _CurveMetric):
    r"""Precision-recall curves per label, as torchmetrics' ``MultilabelPrecisionRecallCurve`` returns them, exact
    under DDP.

    Same constructor, inputs and values as :class:`torchmetrics.classification.MultilabelPrecisionRecallCurve`: lists
    with one curve per label (exact; ``(L, T)`` tensors when binned). ``update(preds, target)`` takes:

    - ``preds``: ``(N, L, ...)`` floating scores (a batch not in [0, 1] gets a sigmoid);
    - ``target``: the same shape, labels in {0, 1}.

    Synchronisation, dedup and ``sync_report`` as for :class:`~torchmetrics_varlen.VarlenAUROC`.

    Args:
        num_labels: Number of labels (at least 1).
        thresholds: ``None`` (exact), binned thresholds, or a 16-bit dtype.
        ignore_index: Target value whose entries are ignored.
        validate_args: Validate every batch.
        normalization: ``"sigmoid"`` (default) or ``None`` (raw scores).
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: Only ``False``: the sharded compute is AUROC's and average precision's.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument, or, in ``update()``, on shapes that do not match ``num_labels``,
            scores that are not finite floats, or labels outside {0, 1}.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenMultilabelPrecisionRecallCurve(2)
        >>> metric.update(tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.3]]), tensor([[1, 0], [0, 1], [0, 0]]))
        >>> len(metric.compute()[0])
        2
    """

    _kind = "pr"
    _axes = ("Recall", "Precision")
