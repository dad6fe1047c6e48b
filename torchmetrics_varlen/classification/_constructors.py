"""The constructors that several metric families share: torchmetrics' task signatures, declared once.

A public class combines one of these (its signature) with its family's compute, e.g.
``class VarlenMulticlassAUROC(_Multiclass, _AUROCMetric)``. Each names torchmetrics' arguments as torchmetrics does
(positional in its order), then ``normalization`` and the synchronisation keywords, keyword-only; ``**kwargs`` are
torchmetrics' own ``Metric`` keywords (``compute_on_cpu``, ``process_group``, ...).
"""

from __future__ import annotations

from typing import Any

from torchmetrics_varlen.classification._base import _VarlenMetric
from torchmetrics_varlen.classification._task_wrapper import _TaskWrapper
from torchmetrics_varlen.functional._validation import Average, Normalization, Thresholds
from torchmetrics_varlen.functional.curves import CurveAverage


class _Multiclass(_VarlenMetric):
    """The multiclass constructor of the scalar statistics (torchmetrics' ``MulticlassAUROC`` arguments)."""

    def __init__(
        self,
        num_classes: int,
        average: Average = "macro",
        thresholds: Thresholds = None,
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
        super().__init__(
            task="multiclass",
            num_classes=num_classes,
            average=average,
            thresholds=thresholds,
            ignore_index=ignore_index,
            validate_args=validate_args,
            normalization=normalization,
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            compute_on_rank=compute_on_rank,
            compute_sharded=compute_sharded,
            sync_key=sync_key,
            **kwargs,
        )


class _Multilabel(_VarlenMetric):
    """The multilabel constructor of the scalar statistics (torchmetrics' ``MultilabelAUROC`` arguments)."""

    def __init__(
        self,
        num_labels: int,
        average: Average = "macro",
        thresholds: Thresholds = None,
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
        super().__init__(
            task="multilabel",
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
            sync_key=sync_key,
            **kwargs,
        )


class _CurveBinary(_TaskWrapper):
    """The binary constructor (torchmetrics' ``Binary*`` arguments, then ``task=`` for the other tasks)."""

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
        average: CurveAverage = None,
        dataset_size: int | None = None,
        sync_timeout: float | None = 60.0,
        compute_on_rank: int | None = None,
        compute_sharded: bool = False,
        sync_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        # num_classes, num_labels and average are the other tasks' (``_TaskWrapper.__new__``): unused here.
        super().__init__(
            task=task,
            thresholds=thresholds,
            ignore_index=ignore_index,
            validate_args=validate_args,
            normalization=normalization,
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            compute_on_rank=compute_on_rank,
            compute_sharded=compute_sharded,
            sync_key=sync_key,
            **kwargs,
        )


class _CurveMulticlass(_VarlenMetric):
    """The multiclass constructor (torchmetrics' ``Multiclass*`` curve arguments)."""

    def __init__(
        self,
        num_classes: int,
        thresholds: Thresholds = None,
        average: CurveAverage = None,
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
        super().__init__(
            task="multiclass",
            num_classes=num_classes,
            thresholds=thresholds,
            average=average,
            ignore_index=ignore_index,
            validate_args=validate_args,
            normalization=normalization,
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            compute_on_rank=compute_on_rank,
            compute_sharded=compute_sharded,
            sync_key=sync_key,
            **kwargs,
        )


class _CurveMultilabel(_VarlenMetric):
    """The multilabel constructor (torchmetrics' ``Multilabel*`` curve arguments)."""

    def __init__(
        self,
        num_labels: int,
        thresholds: Thresholds = None,
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
        super().__init__(
            task="multilabel",
            num_labels=num_labels,
            thresholds=thresholds,
            ignore_index=ignore_index,
            validate_args=validate_args,
            normalization=normalization,
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            compute_on_rank=compute_on_rank,
            compute_sharded=compute_sharded,
            sync_key=sync_key,
            **kwargs,
        )
