"""Which implementation a tensor takes: the one switch between the CPU path and the device path.

The CPU path uses what is fastest on a CPU (NumPy sorts, per-element loops that cost nothing there); the device path
uses torch operations only, a fixed number of kernels and host reads whatever the size, so that it runs on CUDA (or
any other accelerator) without waiting for the device per chunk or per batch. Every function that has both asks
:func:`on_device`; :func:`force_device_path` makes CPU tensors take the device path, so that the test suite runs it on
a machine without an accelerator.

Example:
    >>> import torch
    >>> on_device(torch.zeros(3))
    False
    >>> with force_device_path():
    ...     on_device(torch.zeros(3))
    True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import Tensor

_forced = [0]  # force_device_path() blocks open, in this process (every thread: the CPU path's pool too)


def on_device(tensor: Tensor) -> bool:
    """Whether ``tensor`` takes the device path: it is not on the CPU, or :func:`force_device_path` is active."""
    return not tensor.is_cpu or _forced[0] > 0


@contextlib.contextmanager
def force_device_path() -> Iterator[None]:
    """Within the block, CPU tensors take the device path (for tests and benchmarks on a machine without a GPU)."""
    _forced[0] += 1
    try:
        yield
    finally:
        _forced[0] -= 1
