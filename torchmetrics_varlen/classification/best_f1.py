"""``VarlenBestF1``: the best F1 over all thresholds and its threshold, exact under DDP."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen.classification._base import _VarlenMetric
from torchmetrics_varlen.functional._validation import Normalization
from torchmetrics_varlen.functional.best_f1 import TASKS, _compute


class VarlenBestF1(_VarlenMetric):
    r"""The maximum F1 over every threshold, and the threshold that attains it, exact across ranks.

    What people hand-roll from gathered predictions to pick a decision threshold on the validation set:
    ``compute()`` returns ``(f1, threshold)``, predicting positive when ``score >= threshold``; among thresholds
    with the same best F1 the highest wins (F1 as float32, the threshold in the dtype of the scores; logits are
    normalised per batch as in the other metrics, so the threshold is a probability unless ``normalization=None``).
    ``update(preds, target)`` takes:

    - ``preds``: floating scores of any shape (binary, flattened) or ``(N, L, ...)`` (``task="multilabel"``: one
      pair per label);
    - ``target``: labels in {0, 1} of the same shape.

    It keeps the same
    state as the precision-recall curve, so it shares a compute group with :class:`VarlenPrecisionRecallCurve`,
    :class:`~torchmetrics_varlen.VarlenAUROC` and :class:`~torchmetrics_varlen.VarlenAveragePrecision` in a
    ``MetricCollection``.

    Args:
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate arguments and every batch.
        normalization: ``"sigmoid"`` (default: a batch with a score outside [0, 1] is taken for logits), or
            ``None`` (raw scores; the threshold is then a logit).
        thresholds: ``None`` (exact), or ``torch.float16`` / ``torch.bfloat16``: every value of that dtype is a
            candidate threshold (exact for the rounded scores, from constant-size histograms).
        task: ``"binary"`` or ``"multilabel"``.
        num_labels: Number of labels (multilabel).
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: Only ``False``: the sharded compute is AUROC's and average precision's.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument (binned ``thresholds`` included), or, in ``update()``, on mismatched
            shapes, scores that are not finite floats or labels outside {0, 1}.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenBestF1()
        >>> metric.update(tensor([0.1, 0.4, 0.35, 0.8]), tensor([0, 0, 1, 1]))
        >>> metric.compute()
        (tensor(0.8000), tensor(0.3500))
    """

    _tasks = TASKS
    _binned = False
    _averages: dict[str, tuple[str | None, ...]] = {}

    def __init__(
        self,
        ignore_index: int | None = None,
        validate_args: bool = True,
        *,
        normalization: Normalization = "sigmoid",
        thresholds: torch.dtype | None = None,
        task: str = "binary",
        num_labels: int | None = None,
        dataset_size: int | None = None,
        sync_timeout: float | None = 60.0,
        compute_on_rank: int | None = None,
        compute_sharded: bool = False,
        sync_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            ignore_index=ignore_index,
            validate_args=validate_args,
            normalization=normalization,
            thresholds=thresholds,
            task=task,
            num_labels=num_labels,
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            compute_on_rank=compute_on_rank,
            compute_sharded=compute_sharded,
            sync_key=sync_key,
            **kwargs,
        )

    def compute(self) -> tuple[Tensor, Tensor]:
        """``(best F1, its threshold)`` over everything seen by every rank of the process group."""
        return _compute(self._problems(with_scores=True), self._split)
