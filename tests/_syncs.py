"""Count host synchronisations: the reads that make the host wait for a device (test helper)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_READS = {
    torch.Tensor.item: "item",
    torch.Tensor.tolist: "tolist",
    torch.Tensor.__bool__: "__bool__",
    torch.Tensor.__int__: "__int__",
    torch.Tensor.__float__: "__float__",
    torch.Tensor.nonzero: "nonzero",
    torch.nonzero: "nonzero",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.cpu: "cpu",
}


class HostSyncCounter(TorchFunctionMode):
    """Within the block, count the calls that read a tensor back to the host (``item``, ``tolist``, ``__bool__``,
    ``__int__``, ``__float__``, ``nonzero``, ``numpy``, ``cpu``, and indexing with a bool mask), by name in
    ``.counts``; ``.total`` is their sum.

    Example:
        >>> with HostSyncCounter() as syncs:
        ...     _ = torch.ones(3).sum().item()
        >>> syncs.counts["item"], syncs.total
        (1, 1)
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = _READS.get(func)
        if name is not None:
            self.counts[name] += 1
        elif func is torch.Tensor.__getitem__ and len(args) > 1 and _has_mask(args[1]):
            self.counts["mask index"] += 1
        return func(*args, **(kwargs or {}))


def _has_mask(index: Any) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)
