"""``DropSamplerPadding``: the sampler-padding rule for any torchmetrics metric."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.wrappers.abstract import WrapperMetric

from torchmetrics_varlen._dedup import sampler_kept_rows
from torchmetrics_varlen._dist.group import group_position


class DropSamplerPadding(WrapperMetric):
    r"""Drop the samples ``DistributedSampler(drop_last=False)`` repeats, before they reach any metric.

    The sampler pads its index list to a multiple of the world size ``W`` by repeating its head, and deals
    position ``j * W + r`` to rank ``r`` as its ``j``-th sample. Every metric then counts the repeated samples
    twice: accuracy, F1 and confusion matrices (sum states) move with ``W`` just like AUROC. This wrapper numbers
    the rows its rank passes to ``update`` / ``forward`` and drops those at positions ``>= dataset_size`` from
    every tensor argument whose first dimension is the batch, then calls the wrapped metric, which syncs as usual.

    Rows are counted along dim 0 of the first tensor argument; feed the batches in the sampler's order
    (``shuffle=True`` is fine). The rank and world size are those of the wrapped metric's ``process_group``.

    Args:
        metric: Any :class:`torchmetrics.Metric` whose ``update`` takes per-sample rows.
        dataset_size: ``len(dataset)`` of the sampler.

    Example:
        >>> from torch import tensor
        >>> from torchmetrics.classification import BinaryAccuracy
        >>> acc = DropSamplerPadding(BinaryAccuracy(), dataset_size=3)
        >>> acc.update(tensor([1, 0, 1, 1]), tensor([1, 0, 1, 0]))  # the 4th row is padding
        >>> acc.compute()
        tensor(1.)
    """

    rows_seen: Tensor

    def __init__(self, metric: Metric, dataset_size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(metric, Metric):
            msg = f"Expected `metric` to be a torchmetrics.Metric, but got {type(metric).__name__}."
            raise TypeError(msg)
        if isinstance(dataset_size, bool) or not isinstance(dataset_size, int) or dataset_size < 0:
            msg = f"Expected argument `dataset_size` to be a non-negative int, but got {dataset_size!r}."
            raise ValueError(msg)
        self.metric = metric
        self.dataset_size = dataset_size
        self.add_state("rows_seen", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self._position = 0  # host copy of rows_seen

    def _drop_padding(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The arguments without their padding rows; ``None`` if the whole batch is padding."""
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)), None)
        if first is None:
            msg = "DropSamplerPadding needs at least one tensor argument whose first dimension is the batch."
            raise ValueError(msg)
        rows = first.shape[0] if first.ndim else 1
        rank, world = group_position(self.metric.process_group)
        kept = sampler_kept_rows(self._position, rows, rank, world, self.dataset_size)
        self._position += rows
        self.rows_seen = self.rows_seen + rows  # out of place: see _VarlenMetric._update
        if kept == rows:
            return args, kwargs
        if kept == 0:
            return None

        def cut(value: Any) -> Any:
            if isinstance(value, Tensor) and value.ndim and value.shape[0] == rows:
                return value[:kept]
            return value

        return tuple(cut(a) for a in args), {k: cut(v) for k, v in kwargs.items()}

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Drop this batch's padding rows, then update the wrapped metric with the rest (if any)."""
        real = self._drop_padding(args, kwargs)
        if real is not None:
            self.metric.update(*real[0], **real[1])

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Drop this batch's padding rows, then call the wrapped metric's ``forward`` (batch value, accumulates).

        A batch made only of padding leaves the wrapped metric untouched and returns ``None``.
        """
        real = self._drop_padding(args, kwargs)
        return None if real is None else self.metric(*real[0], **real[1])

    def compute(self) -> Any:
        """The wrapped metric's value (it syncs across ranks itself)."""
        return self.metric.compute()

    def reset(self) -> None:
        """Reset the row counter and the wrapped metric."""
        super().reset()
        self._position = 0
        self.metric.reset()

    def persistent(self, mode: bool = False) -> None:
        """Make this wrapper's and the wrapped metric's states part of ``state_dict()`` (or not)."""
        super().persistent(mode)
        self.metric.persistent(mode)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._position = int(self.rows_seen)
        if self._position and not self.metric._update_count:
            self.metric._update_count = 1  # its loaded states are updates: compute() must not warn
