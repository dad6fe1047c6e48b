"""The per-sample integer columns of a batch (``ids`` with ``ids_sub``, extras such as groups), one value per element
of the sample shape: what the package's metrics store beside the scores when a batch gives ids or extras.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def zeros(n: int, device: torch.device) -> Tensor:
    """``n`` int32 zeros: the ``ids_sub`` of one-element samples."""
    return torch.zeros(n, dtype=torch.int32, device=device)


def columns_shape(task: str, preds: Tensor, target: Tensor) -> torch.Size:
    """Shape of the samples of one batch (what one id or one group label can be given for)."""
    if task == "multiclass":
        return target.shape
    if task == "multilabel":
        return target.shape[:1] + target.shape[2:]
    return preds.shape


def _per_element(values: Tensor, shape: torch.Size) -> tuple[Tensor, Tensor]:
    """Expand per-row ``values`` over a sample shape: ``(flat values, position within the row)``."""
    if values.shape == shape:
        flat = values if values.ndim == 1 else values.reshape(-1)
        return flat, zeros(flat.shape[0], flat.device)
    width = math.prod(shape[1:])
    flat = values.repeat_interleave(width)
    sub = torch.arange(width, dtype=torch.int32, device=values.device).repeat(shape[0])
    return flat, sub


def expand_per_sample(
    extras: dict[str, Tensor], sample_ids: Tensor | None, shape: torch.Size, device: torch.device
) -> dict[str, Tensor]:
    """Per-sample integer states (``ids`` with ``ids_sub``, extras such as groups), one value per element."""
    if sample_ids is not None and not extras:  # the common case (int64 ids, one per sample), without the loop
        ids = sample_ids
        if ids.dtype != torch.int64 or ids.device != device:
            ids = ids.to(device=device, dtype=torch.int64)
        if ids.ndim == 1 and ids.shape == shape:
            return {"ids": ids, "ids_sub": zeros(ids.shape[0], device)}
        flat, sub = _per_element(ids, shape)
        return {"ids": flat, "ids_sub": sub}
    per_row = dict(extras)
    if sample_ids is not None:
        per_row["ids"] = sample_ids
    expanded: dict[str, Tensor] = {}
    for name, values in per_row.items():
        values = values.long() if values.device == device else values.to(device=device, dtype=torch.int64)
        flat, sub = _per_element(values, shape)
        expanded[name] = flat
        if name == "ids":
            expanded["ids_sub"] = sub
    return expanded


_CPU = torch.device("cpu")


def columns(
    task: str, preds: Tensor, target: Tensor, ids: Tensor | None, extras: dict[str, Tensor]
) -> dict[str, Tensor]:
    """The per-sample integer columns of a batch (:func:`expand_per_sample`); the common batch (binary scores, int64
    ids on the CPU, one per score) without its steps.
    """
    if ids is None and not extras:
        return {}
    if (
        ids is not None
        and not extras
        and task == "binary"
        and ids.dtype == torch.int64
        and ids.is_cpu
        and preds.is_cpu
        and preds.ndim == 1
        and ids.shape == preds.shape
    ):
        return {"ids": ids, "ids_sub": zeros(ids.shape[0], _CPU)}
    return expand_per_sample(extras, ids, columns_shape(task, preds, target), preds.device)
