"""Exact distributed evaluation metrics for PyTorch: the same value on W ranks as on one device."""

from torchmetrics_varlen._core.checkpoint import load_rank_states
from torchmetrics_varlen._core.dedup import SyncReport
from torchmetrics_varlen.classification import (
    BootstrapInterval,
    VarlenAUROC,
    VarlenAUROCComparison,
    VarlenAUROCInterval,
    VarlenAveragePrecision,
    VarlenBestF1,
    VarlenBootstrap,
    VarlenGroupAUROC,
    VarlenMulticlassAUROC,
    VarlenMulticlassAveragePrecision,
    VarlenMulticlassPrecisionRecallCurve,
    VarlenMulticlassROC,
    VarlenMultilabelAUROC,
    VarlenMultilabelAveragePrecision,
    VarlenMultilabelPrecisionRecallCurve,
    VarlenMultilabelROC,
    VarlenPrecisionRecallCurve,
    VarlenROC,
)
from torchmetrics_varlen.collection import VarlenCollection
from torchmetrics_varlen.distributed import MetricSyncError, gather_varlen
from torchmetrics_varlen.wrappers import Varlen

__version__ = "0.1.0"

__all__ = [
    "BootstrapInterval",
    "MetricSyncError",
    "SyncReport",
    "Varlen",
    "VarlenAUROC",
    "VarlenAUROCComparison",
    "VarlenAUROCInterval",
    "VarlenAveragePrecision",
    "VarlenBestF1",
    "VarlenBootstrap",
    "VarlenCollection",
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
    "__version__",
    "gather_varlen",
    "load_rank_states",
]
