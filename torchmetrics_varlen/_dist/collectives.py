"""The collectives of a sync, each bounded by the sync's deadline inside the backend too, where the backend allows it.

Waiting for a work object with a timeout (``transport.wait``) bounds the caller, not the backend: on gloo the work
stays queued on the group's worker thread, which waits for a peer that stopped in the middle of an exchange for the
group's own timeout (30 minutes by default), and the interpreter's exit waits for that thread. So on gloo every
collective here carries its own timeout (``sync_timeout`` + :data:`MARGIN`): gloo's thread then gives up on the
silent peer by itself, the work completes with an error, and the surviving process can build a new group and exit
within seconds. (Measured on torch 2.13, a stuck peer: the survivor exits 3 s after the error instead of when the
stuck peer exits.)

On NCCL the group's own timeout stays: a per-collective timeout there arms NCCL's watchdog, which by default tears
the whole process down when it fires. With ``sync_timeout=None`` nothing is bounded (the user asked to wait).
"""

from __future__ import annotations

import datetime
from typing import Any

import torch.distributed as dist
from torch import Tensor
from torch._C._distributed_c10d import AllgatherOptions, AllreduceOptions, AllToAllOptions, BroadcastOptions

from torchmetrics_varlen._dist.group import is_nccl

MARGIN = 1.0  # seconds gloo waits beyond sync_timeout, so that the caller's own wait always times out first


def _deadline(group: Any, timeout: float | None) -> datetime.timedelta | None:
    """The per-collective timeout to give the backend: only on gloo, only with a finite ``sync_timeout``."""
    if timeout is None or is_nccl(group):
        return None
    return datetime.timedelta(seconds=timeout + MARGIN)


def all_gather_into(out: Tensor, local: Tensor, group: Any, timeout: float | None) -> Any:
    """Every rank's ``local`` (same size everywhere) into ``out``, in group rank order; returns the work."""
    bound = _deadline(group, timeout)
    if bound is None:
        gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return gather_single(out, local, group=group, async_op=True)
    opts = AllgatherOptions()
    opts.timeout = bound
    return group._allgather_base(out, local, opts)


def broadcast(tensor: Tensor, src: int, group: Any, global_src: int, timeout: float | None) -> Any:
    """``tensor`` from group rank ``src`` (global rank ``global_src``) to every rank of ``group``; returns the work."""
    bound = _deadline(group, timeout)
    if bound is None:
        return dist.broadcast(tensor, src=global_src, group=group, async_op=True)
    opts = BroadcastOptions()
    opts.rootRank, opts.rootTensor, opts.timeout = src, 0, bound
    return group.broadcast([tensor], opts)


def all_reduce_sum(tensor: Tensor, group: Any, timeout: float | None) -> Any:
    """The sum of every rank's ``tensor``, in place; returns the work."""
    bound = _deadline(group, timeout)
    if bound is None:
        return dist.all_reduce(tensor, group=group, async_op=True)
    opts = AllreduceOptions()
    opts.timeout = bound
    return group.allreduce([tensor], opts)


def all_to_all(
    out: Tensor, send: Tensor, out_splits: list[int], in_splits: list[int], group: Any, timeout: float | None
) -> Any:
    """``in_splits[r]`` elements of ``send`` go to rank ``r``; ``out_splits[r]`` come from it; returns the work."""
    bound = _deadline(group, timeout)
    if bound is None:
        return dist.all_to_all_single(
            out, send, output_split_sizes=out_splits, input_split_sizes=in_splits, group=group, async_op=True
        )
    opts = AllToAllOptions()
    opts.timeout = bound
    return group.alltoall_base(out, send, out_splits, in_splits, opts)
