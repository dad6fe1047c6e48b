"""``VarlenGroupAUROC``: group AUC (GAUC) for recommender systems, exact under DDP."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen.classification._base import _VarlenMetric
from torchmetrics_varlen.functional._validation import Normalization, Weighting, validate_weighting
from torchmetrics_varlen.functional.group_auroc import GroupAUROC, _compute


class VarlenGroupAUROC(_VarlenMetric):
    r"""Group AUC: the exact AUROC within every group (user, product, query), averaged over groups.

    ``update(preds, target, groups=..., sample_ids=None)`` takes:

    - ``preds``: floating scores of any shape (flattened);
    - ``target``: labels in {0, 1} of the same shape;
    - ``groups``: an integer group per sample: the shape of ``preds``, or one per row (``(N,)``).

    ``compute()`` returns the mean of
    the per-group AUROCs over groups that contain both classes, weighted by each group's number of samples
    (``weighting="samples"``, the impression-weighted GAUC) or uniformly; with ``return_per_group=True`` it returns
    a :class:`~torchmetrics_varlen.functional.GroupAUROC` with every group's value and the number of groups skipped.
    A group's samples may be spread over any number of ranks: the sync brings them together, and
    ``dataset_size`` / ``sample_ids`` remove sampler padding as for :class:`~torchmetrics_varlen.VarlenAUROC`.
    Values are float32; logits are normalised per batch as in the other metrics.

    Args:
        weighting: ``"samples"`` or ``"uniform"``.
        ignore_index: Target value whose positions are ignored.
        validate_args: Validate arguments and every batch.
        normalization: ``"sigmoid"`` (default: a batch with a score outside [0, 1] is taken for logits), or
            ``None`` (raw scores).
        return_per_group: Make ``compute()`` return the per-group detail.
        dataset_size: ``len(dataset)`` of a ``DistributedSampler``: its padding is dropped in ``update()``.
        sync_timeout: Seconds every rank waits for the others at ``compute()``; ``None`` waits forever.
        compute_on_rank: Gather every sample to this rank only, compute there and broadcast the value.
        compute_sharded: Only ``False``: the sharded compute is AUROC's and average precision's.
        sync_key: The same name on every rank when ranks create their metrics in different orders.
        kwargs: Any :class:`torchmetrics.Metric` keyword (``compute_on_cpu``, ``process_group``, ...); the
            synchronisation keywords are described at :class:`~torchmetrics_varlen.VarlenAUROC`.

    Raises:
        ValueError: On an invalid argument, or, in ``update()``, on mismatched shapes, scores that are not finite
            floats, labels outside {0, 1}, or groups that are not integers of the sample shape.
        MetricSyncError: At ``compute()``, if a rank of the process group does not join within ``sync_timeout``.

    Example:
        >>> from torch import tensor
        >>> metric = VarlenGroupAUROC()
        >>> metric.update(tensor([0.9, 0.2, 0.6]), tensor([1, 0, 1]), groups=tensor([7, 7, 7]))
        >>> metric.update(tensor([0.7, 0.1, 0.4]), tensor([0, 0, 1]), groups=tensor([3, 3, 3]))
        >>> metric.compute()
        tensor(0.7500)
    """

    _weight_column = False

    def __init__(
        self,
        weighting: Weighting = "samples",
        ignore_index: int | None = None,
        validate_args: bool = True,
        *,
        normalization: Normalization = "sigmoid",
        return_per_group: bool = False,
        dataset_size: int | None = None,
        sync_timeout: float | None = 60.0,
        compute_on_rank: int | None = None,
        compute_sharded: bool = False,
        sync_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        validate_weighting(weighting)
        super().__init__(
            ignore_index=ignore_index,
            validate_args=validate_args,
            normalization=normalization,
            row_extras=("groups",),
            config={"weighting": weighting},
            dataset_size=dataset_size,
            sync_timeout=sync_timeout,
            compute_on_rank=compute_on_rank,
            compute_sharded=compute_sharded,
            sync_key=sync_key,
            **kwargs,
        )
        self.weighting: Weighting = weighting
        self.return_per_group = return_per_group

    def update(  # type: ignore[override]  # groups, no weights: not the ranking update
        self,
        preds: Tensor,
        target: Tensor,
        groups: Tensor,
        sample_ids: Tensor | None = None,
    ) -> None:
        """Validate one batch and add it to the state; a batch that fails validation changes nothing.

        Args:
            preds: Scores, any shape, floating point.
            target: Labels in {0, 1}, same shape.
            groups: Integer group of each sample (shape of ``preds``, or one per row).
            sample_ids: Optional global integer ids (dedup): after the sync each id counts once.
        """
        self._update(preds, target, sample_ids, {"groups": groups}, self._forward_start)

    def _value_from_wire(self, value: Any) -> Any:
        """``compute_on_rank``: the per-group detail arrives on the other ranks as a plain tuple."""
        return GroupAUROC(*value) if self.return_per_group and not isinstance(value, GroupAUROC) else value

    def compute(self) -> Tensor | GroupAUROC:
        """Group AUC over everything seen by every rank of the process group."""
        rows = {name: torch.cat(pieces) for name, pieces in self._evaluated().items()}
        result = _compute(rows["preds"], rows["target"], rows["groups"], self.weighting)
        return result if self.return_per_group else result.value
