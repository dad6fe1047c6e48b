"""Spawned ranks for tests/test_exit.py: sync one metric, then exit at once without ``destroy_process_group()``."""

from __future__ import annotations

import datetime
import sys

import torch
import torch.distributed as dist


def sync_and_exit(rank: int, world: int, port: int, strategy: str, collectives: str) -> None:
    """Update and compute one metric on ``world`` gloo ranks, then return (the process exits right away)."""
    from torchmetrics_varlen import VarlenAUROC

    # A thread waiting for the GIL gets it after 50 ms (default 5 ms): a backend thread that still has to free a
    # tensor when compute() returns then mostly does so after the interpreter started shutting down. Without the
    # fix in works.py that aborted 2 (compute_on_rank) and 4 (gather) of 10 runs here; the control, 5 of 8.
    sys.setswitchinterval(0.05)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=datetime.timedelta(30)
    )
    gen = torch.Generator().manual_seed(rank)
    if collectives == "torch":  # the control: plain all-gathers, then the same exit
        for _ in range(20):
            parts = [torch.empty(1000) for _ in range(world)]
            dist.all_gather(parts, torch.rand(1000, generator=gen))
        return
    metric = VarlenAUROC(compute_on_rank=0) if strategy == "compute_on_rank" else VarlenAUROC()
    n = 40 + 7 * rank
    metric.update(torch.rand(n, generator=gen), torch.randint(0, 2, (n,), generator=gen))
    metric.compute()
