"""Metric classes: thin ``torchmetrics.Metric`` subclasses over :mod:`torchmetrics_varlen.functional`."""

from torchmetrics_varlen.classification.auroc import VarlenAUROC
from torchmetrics_varlen.classification.average_precision import VarlenAveragePrecision

__all__ = ["VarlenAUROC", "VarlenAveragePrecision"]
