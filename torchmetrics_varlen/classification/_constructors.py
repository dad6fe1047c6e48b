"""The constructors that several metric families share: torchmetrics' task signatures, declared once.

A public class combines one of these (its signature) with its family's compute, e.g.
``class VarlenMulticlassAUROC(_Multiclass, _AUROCMetric)``; every constructor passes the synchronisation keywords
on to ``_VarlenMetric`` through ``**kwargs``. Each body passes its arguments on by name (:func:`passed_on`).
"""

from __future__ import annotations

from typing import Any

from torchmetrics_varlen.classification._base import _VarlenMetric
from torchmetrics_varlen.functional._tasks import Average, Normalization, Thresholds
from torchmetrics_varlen.functional.curves import CurveAverage


def passed_on(arguments: dict[str, Any], *, ignored: tuple[str, ...] = ()) -> dict[str, Any]:
    """A constructor's ``locals()`` as ``_VarlenMetric``'s keywords, its ``**kwargs`` flattened in.

    Left out: ``self``, the ``__class__`` cell of a zero-argument ``super()``, and ``ignored`` (arguments a binary
    class only takes for its ``task=`` classes).
    """
    skipped = {"self", "__class__", "kwargs", *ignored}
    return {**{name: value for name, value in arguments.items() if name not in skipped}, **arguments["kwargs"]}


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
        **kwargs: Any,
    ) -> None:
        super().__init__(task="multiclass", **passed_on(locals()))


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
        **kwargs: Any,
    ) -> None:
        super().__init__(task="multilabel", **passed_on(locals()))


class _CurveBinary(_VarlenMetric):
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**passed_on(locals(), ignored=("num_classes", "num_labels", "average")))


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
        **kwargs: Any,
    ) -> None:
        super().__init__(task="multiclass", **passed_on(locals()))


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
        **kwargs: Any,
    ) -> None:
        super().__init__(task="multilabel", **passed_on(locals()))
