"""Count the host synchronisations a block of torch code would make on a GPU, on CPU tensors.

Run the code under ``force_device_path()`` (CPU tensors take the device path) inside :class:`HostSyncCounter`: every
call that reads a tensor's values back to the host, or whose output size depends on the values (so a GPU must
finish first), counts once.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_READS = {
    torch.Tensor.item: "item",
    torch.Tensor.tolist: "tolist",
    torch.Tensor.__bool__: "__bool__",
    torch.Tensor.__int__: "__int__",
    torch.Tensor.__float__: "__float__",
    torch.Tensor.__index__: "__index__",
    torch.Tensor.nonzero: "nonzero",
    torch.nonzero: "nonzero",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.cpu: "cpu",
    # output sizes that depend on the values
    torch.unique: "unique",
    torch.unique_consecutive: "unique_consecutive",
    torch.masked_select: "masked_select",
}


def _has_mask(index: Any) -> bool:
    items = index if isinstance(index, tuple | list) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


class HostSyncCounter(TorchFunctionMode):
    """``with HostSyncCounter() as syncs: ...``; then ``syncs.counts`` (per kind) and ``syncs.total``."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = _READS.get(func)
        if name is None and func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and _has_mask(args[1]):
            name = "mask_index"
        if name is not None:
            self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))
