"""Exact distributed evaluation metrics for PyTorch: the same value on W ranks as on one device."""

from torchmetrics_varlen.classification import VarlenAUROC, VarlenAveragePrecision
from torchmetrics_varlen.distributed import MetricSyncError, gather_varlen

__version__ = "0.1.0"

__all__ = ["MetricSyncError", "VarlenAUROC", "VarlenAveragePrecision", "__version__", "gather_varlen"]
