"""Exact distributed evaluation metrics for PyTorch: the same value on W ranks as on one device."""

from torchmetrics_varlen import classification
from torchmetrics_varlen._core.checkpoint import load_rank_states
from torchmetrics_varlen._core.report import SyncReport
from torchmetrics_varlen.classification import *  # noqa: F403  (the metric classes: `classification.__all__`)
from torchmetrics_varlen.collection import VarlenCollection
from torchmetrics_varlen.distributed import MetricSyncError, gather_varlen
from torchmetrics_varlen.wrappers import Varlen

__version__ = "0.1.0"

__all__ = [
    "MetricSyncError",
    "SyncReport",
    "Varlen",
    "VarlenCollection",
    "__version__",
    "gather_varlen",
    "load_rank_states",
]
__all__ += classification.__all__
__all__.sort()
