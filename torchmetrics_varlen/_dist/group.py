"""Process groups: which rank this is, who the members are, which device the data travels on.

With the other modules of ``_dist/`` (the guard, the transports, ``collectives.py``) this is the only code of the
package that calls ``torch.distributed``; metrics ask these helpers instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from torchmetrics_varlen import _compat


def distributed_available() -> bool:
    """``True`` when ``torch.distributed`` is usable and a default process group exists."""
    return dist.is_available() and dist.is_initialized()


def resolve_group(group: Any | None) -> Any:
    """Return the process group object itself (``None`` means the default group)."""
    return _compat.default_group() if group is None else group


@dataclass(frozen=True)
class GroupLayout:
    """This rank's view of a process group: its rank in the group, the group's size and unique name, and the
    global rank of every group rank (for messages).
    """

    group: Any
    rank: int
    world: int
    name: str
    global_ranks: tuple[int, ...]

    @classmethod
    def of(cls, group: Any | None) -> GroupLayout:
        """The layout of ``group`` (``None``: the default group)."""
        pg = resolve_group(group)
        ranks = tuple(dist.get_process_group_ranks(pg))
        return cls(pg, dist.get_rank(pg), dist.get_world_size(pg), _compat.process_group_name(pg), ranks)

    def describe(self, rank: int) -> str:
        """``"rank 1"``, or ``"rank 1 (global rank 3)"`` in a subgroup."""
        glob = self.global_ranks[rank]
        return f"rank {rank}" if glob == rank else f"rank {rank} (global rank {glob})"

    def describe_all(self, ranks: list[int]) -> str:
        """``"rank 1"``, ``"ranks 1 and 2"``, ``"ranks 0, 1 and 3"``."""
        names = [self.describe(r) for r in ranks]
        if len(names) == 1:
            return names[0]
        return "ranks " + ", ".join(n.removeprefix("rank ") for n in names[:-1]) + " and " + names[-1][5:]


def group_position(group: Any | None) -> tuple[int, int]:
    """``(rank, world size)`` in ``group``; ``(0, 1)`` without an initialised process group."""
    if not distributed_available():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)  # torch's public calls: ``None`` is the default group


def is_nccl(group: Any) -> bool:
    """Whether the group's collectives run on NCCL (CUDA tensors only)."""
    return "nccl" in str(dist.get_backend(group)).lower()


def comm_device(group: Any, fallback: torch.device) -> torch.device:
    """Where the group's data travels: the tensors' CUDA device (or the current one) for NCCL, the CPU for gloo
    (whose point-to-point and all-to-all take no CUDA tensors), else the tensors' own device.
    """
    if is_nccl(group):
        return fallback if fallback.type == "cuda" else torch.device("cuda", torch.cuda.current_device())
    if "gloo" in str(dist.get_backend(group)).lower():
        return torch.device("cpu")
    return fallback
