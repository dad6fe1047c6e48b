"""Spawned ranks for tests/test_teardown.py: a peer dies or sticks in the middle of a data exchange."""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

import torch
import torch.distributed as dist

SYNC_TIMEOUT = 2.0
GROUP_TIMEOUT = 300.0  # the process group's own timeout: far longer than any bound the test checks
STUCK_FOR = 90.0  # how long the stuck peer sleeps in place of the exchange


def rank_data(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7 + rank)
    n = 50 + 9 * rank
    target = torch.randint(0, 2, (n,), generator=gen)
    target[:2] = torch.tensor([0, 1])
    return torch.rand(n, generator=gen), target


def _fault(fault: str) -> None:
    """Make this rank fail in the middle of the data exchange, after it checked in like every other rank."""
    from torchmetrics_varlen._dist import collectives

    def broken(*args: Any, **kwargs: Any) -> Any:
        if fault == "killed":
            os._exit(1)  # as a SIGKILL or an OOM kill would: no cleanup
        time.sleep(STUCK_FOR)  # alive, but never takes part
        os._exit(0)

    collectives.broadcast = broken  # type: ignore[assignment]


def survive(rank: int, world: int, port: int, fault: str, results: Any) -> None:
    """Rank ``world - 1`` dies or sticks in the data exchange; the others get the error, destroy the group, build a
    new one of the survivors on a new store prefix, compute exactly there, and return (the process then exits).
    """
    from torchmetrics_varlen import MetricSyncError, VarlenAUROC

    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
    timeout = datetime.timedelta(seconds=GROUP_TIMEOUT)
    dist.init_process_group(
        "gloo", store=dist.PrefixStore("first/", client), rank=rank, world_size=world, timeout=timeout
    )
    metric = VarlenAUROC(sync_timeout=SYNC_TIMEOUT)
    metric.update(*rank_data(rank))
    if rank == world - 1:
        _fault(fault)
    dist.barrier()
    started = time.monotonic()
    try:
        metric.compute()
        error = ""
    except MetricSyncError as err:
        error = str(err)
    raised = time.monotonic() - started
    tick = time.monotonic()
    dist.destroy_process_group()
    destroyed = time.monotonic() - tick
    tick = time.monotonic()
    survivors = world - 1
    second = dist.PrefixStore("second/", client)
    dist.init_process_group("gloo", store=second, rank=rank, world_size=survivors, timeout=timeout)
    again = VarlenAUROC(sync_timeout=SYNC_TIMEOUT)
    again.update(*rank_data(rank))
    value = float(again.compute())
    rebuilt = time.monotonic() - tick
    results.put(
        {
            "rank": rank,
            "error": error,
            "raised": raised,
            "destroyed": destroyed,
            "rebuilt": rebuilt,
            "value": value,
            "returned_at": time.time(),
        }
    )
