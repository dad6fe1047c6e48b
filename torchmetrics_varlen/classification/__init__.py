"""Metric classes: thin ``torchmetrics.Metric`` subclasses over :mod:`torchmetrics_varlen.functional`."""

from torchmetrics_varlen.classification.auroc import VarlenAUROC, VarlenMulticlassAUROC, VarlenMultilabelAUROC
from torchmetrics_varlen.classification.average_precision import (
    VarlenAveragePrecision,
    VarlenMulticlassAveragePrecision,
    VarlenMultilabelAveragePrecision,
)
from torchmetrics_varlen.classification.best_f1 import VarlenBestF1
from torchmetrics_varlen.classification.curves import (
    VarlenMulticlassPrecisionRecallCurve,
    VarlenMulticlassROC,
    VarlenMultilabelPrecisionRecallCurve,
    VarlenMultilabelROC,
    VarlenPrecisionRecallCurve,
    VarlenROC,
)
from torchmetrics_varlen.classification.group_auroc import VarlenGroupAUROC
from torchmetrics_varlen.classification.uncertainty import (
    BootstrapInterval,
    VarlenAUROCComparison,
    VarlenAUROCInterval,
    VarlenBootstrap,
)

__all__ = [
    "BootstrapInterval",
    "VarlenAUROC",
    "VarlenAUROCComparison",
    "VarlenAUROCInterval",
    "VarlenAveragePrecision",
    "VarlenBestF1",
    "VarlenBootstrap",
    "VarlenGroupAUROC",
    "VarlenMulticlassAUROC",
    "VarlenMulticlassAveragePrecision",
    "VarlenMulticlassPrecisionRecallCurve",
    "VarlenMulticlassROC",
    "VarlenMultilabelAUROC",
    "VarlenMultilabelAveragePrecision",
    "VarlenMultilabelPrecisionRecallCurve",
    "VarlenMultilabelROC",
    "VarlenPrecisionRecallCurve",
    "VarlenROC",
]
