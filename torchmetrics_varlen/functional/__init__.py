"""Pure tensor-to-tensor metric functions. Nothing here touches ``torch.distributed``."""

from torchmetrics_varlen.functional.auroc import auroc
from torchmetrics_varlen.functional.average_precision import average_precision

__all__ = ["auroc", "average_precision"]
