"""Pure tensor-to-tensor metric functions. Nothing here touches ``torch.distributed``."""

from torchmetrics_varlen.functional.auroc import auroc
from torchmetrics_varlen.functional.average_precision import average_precision
from torchmetrics_varlen.functional.best_f1 import best_f1
from torchmetrics_varlen.functional.curves import precision_recall_curve, roc
from torchmetrics_varlen.functional.delong import AUROCComparison, AUROCInterval, auroc_compare, auroc_interval
from torchmetrics_varlen.functional.group_auroc import GroupAUROC, group_auroc

__all__ = [
    "AUROCComparison",
    "AUROCInterval",
    "GroupAUROC",
    "auroc",
    "auroc_compare",
    "auroc_interval",
    "average_precision",
    "best_f1",
    "group_auroc",
    "precision_recall_curve",
    "roc",
]
