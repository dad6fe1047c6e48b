"""Every access to a private name of PyTorch or torchmetrics, in one place.

``tests/test_compat.py`` checks each of them by name, so that an upstream rename fails one clear test instead of
a distributed sync somewhere deep in a user's job.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

# torch.distributed.distributed_c10d: the default group, its store, and the unique name of a group.
TORCH_PRIVATE = ("_get_default_group", "_get_default_store", "_get_process_group_name")


def default_group() -> Any:
    """The default process group (``init_process_group``'s)."""
    return dist.distributed_c10d._get_default_group()


def default_store() -> Any:
    """The store of the default process group (a ``TCPStore``, ``FileStore`` or a ``PrefixStore`` over one)."""
    return dist.distributed_c10d._get_default_store()


def process_group_name(group: Any) -> str:
    """The group's unique name: the same on every member rank, different for every group created."""
    return str(dist.distributed_c10d._get_process_group_name(group))
