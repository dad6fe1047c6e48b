"""``VarlenAveragePrecision``: a drop-in for ``BinaryAveragePrecision`` that stays exact under DDP."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from torchmetrics_varlen._checks import Thresholds
from torchmetrics_varlen.classification._base import _BinaryRankingMetric
from torchmetrics_varlen.functional._ranking import _binary_counts, _binned_average_precision, _exact_average_precision


class VarlenAveragePrecision(_BinaryRankingMetric):
    r"""Average precision for binary tasks, exact across ranks, uneven shards and empty ranks.

    Same constructor and inputs as :class:`torchmetrics.classification.BinaryAveragePrecision`:
    ``update(preds, target)`` with floating scores and integer labels in {0, 1} of the same, any, shape.
    Single-process values equal torchmetrics' (and scikit-learn's ``average_precision_score`` in exact mode:
    ``sum_k (R_k - R_{k-1}) P_k`` over distinct scores, ties as one step, no interpolation).

    Synchronisation works as for :class:`~torchmetrics_varlen.VarlenAUROC`: one guarded exchange for all states,
    any number of rows per rank.

    Args:
        thresholds: ``None`` (exact), or an int / list / 1-D tensor for torchmetrics' binned approximation.
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate arguments and every batch.
        dataset_size: Size of the data set behind a ``DistributedSampler``: the padding the sampler adds (positions
            ``>= dataset_size`` in its rank-interleaved order) is dropped in ``update()``, so every sample counts once.
            With ``sample_ids`` it is only used to report missing samples.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        kwargs: Any :class:`torchmetrics.Metric` keyword.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenAveragePrecision()
        >>> metric.update(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        >>> metric.compute()
        tensor(0.8333, dtype=torch.float64)
    """

    def __init__(
        self,
        thresholds: Thresholds = None,
        ignore_index: int | None = None,
        validate_args: bool = True,
        *,
        dataset_size: int | None = None,
        sync_timeout: float | None = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            thresholds=thresholds,
            ignore_index=ignore_index,
            validate_args=validate_args,
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            **kwargs,
        )

    def compute(self) -> Tensor:
        """Exact (or binned) average precision over everything seen by every rank of the process group."""
        if self.thresholds is not None:
            return _binned_average_precision(self._evaluated_confmat())
        fps, tps, _ = _binary_counts(*self._evaluated())
        return _exact_average_precision(fps, tps)
