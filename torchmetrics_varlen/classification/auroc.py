"""``VarlenAUROC``: a drop-in for ``torchmetrics.classification.BinaryAUROC`` that stays exact under DDP."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from torchmetrics_varlen._checks import Thresholds, validate_ranking_args
from torchmetrics_varlen.classification._base import _BinaryRankingMetric
from torchmetrics_varlen.functional._ranking import _binary_counts, _binned_auroc, _exact_auroc


class VarlenAUROC(_BinaryRankingMetric):
    r"""Area under the ROC curve for binary tasks, exact across ranks, uneven shards and empty ranks.

    Same constructor and inputs as :class:`torchmetrics.classification.BinaryAUROC`: ``update(preds, target)``
    with floating scores (probabilities or logits) and integer labels in {0, 1} of the same, any, shape (flattened;
    ``ignore_index`` positions dropped). Single-process values equal torchmetrics' (and scikit-learn's
    ``roc_auc_score`` in exact mode).

    Exact mode (``thresholds=None``) keeps every score and computes the area from integer counts per distinct score
    (ties form one step), so the value depends only on the multiset of samples, never on how they were split over
    ranks or batches. ``compute()`` on several ranks runs one guarded exchange: a check-in on the process group's
    store (a missing rank becomes a :class:`~torchmetrics_varlen.MetricSyncError` after ``sync_timeout`` seconds),
    then one collective for all states, with ranks of any length, zero included.

    Args:
        max_fpr: If given, the McClish-standardised partial AUC up to this false positive rate.
        thresholds: ``None`` (exact), or an int / list / 1-D tensor for torchmetrics' binned approximation.
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate arguments and every batch (``ValueError`` in ``update()``, state unchanged).
        dataset_size: Size of the data set behind a ``DistributedSampler``: the padding the sampler adds (positions
            ``>= dataset_size`` in its rank-interleaved order) is dropped in ``update()``, so every sample counts once.
            With ``sample_ids`` it is only used to report missing samples.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``sync_on_compute``,
            ``process_group``, ...). ``dist_sync_fn`` is ignored: the metric syncs itself.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenAUROC()
        >>> metric.update(tensor([0.1, 0.4]), tensor([0, 0]))
        >>> metric.update(tensor([0.35, 0.8]), tensor([1, 1]))
        >>> metric.compute()
        tensor(0.7500, dtype=torch.float64)
    """

    def __init__(
        self,
        max_fpr: float | None = None,
        thresholds: Thresholds = None,
        ignore_index: int | None = None,
        validate_args: bool = True,
        *,
        dataset_size: int | None = None,
        sync_timeout: float | None = 60.0,
        **kwargs: Any,
    ) -> None:
        if validate_args:
            validate_ranking_args(max_fpr=max_fpr)
        super().__init__(
            thresholds=thresholds,
            ignore_index=ignore_index,
            validate_args=validate_args,
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            _extra_config={"max_fpr": max_fpr},
            **kwargs,
        )
        self.max_fpr = max_fpr

    def compute(self) -> Tensor:
        """Exact (or binned) AUROC over everything seen by every rank of the process group."""
        if self.thresholds is not None:
            return _binned_auroc(self._evaluated_confmat(), self.thresholds, self.max_fpr)
        fps, tps, _ = _binary_counts(*self._evaluated())
        return _exact_auroc(fps, tps, self.max_fpr)
