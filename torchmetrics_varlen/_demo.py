"""The demo: W CPU ranks (gloo on 127.0.0.1) evaluate one data set split unevenly; every rank prints its value."""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import tempfile
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HELP = "spawn CPU ranks and compare the distributed value with the single-process truth"
DESCRIPTION = (
    "Spawns --world-size CPU processes (gloo on 127.0.0.1), gives each an uneven share of one synthetic data set "
    "(the first rank gets nothing), and prints VarlenAUROC / VarlenAveragePrecision on every rank next to the "
    "single-process value. Exits 0 only if every rank matches."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the demo's options."""
    parser.add_argument("--world-size", type=int, default=3, help="number of CPU ranks to spawn (default 3)")
    parser.add_argument("-n", "--num-samples", type=int, default=1001, help="size of the data set (default 1001)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic data (default 0)")


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = (torch.rand(n, generator=gen) + 0.3 * target).clamp(max=1.0)
    return preds, target


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _rank_main(rank: int, world: int, port: int, n: int, seed: int, out_dir: str) -> None:
    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        preds, target = _data(n, seed)
        weights = [0] + list(range(1, world))  # rank 0 is empty, the others uneven
        cuts = [n * sum(weights[: r + 1]) // max(sum(weights), 1) for r in range(world)]
        start, stop = (cuts[rank - 1] if rank else 0), cuts[rank]
        auroc, ap = VarlenAUROC(sync_timeout=30), VarlenAveragePrecision(sync_timeout=30)
        for i in range(start, stop, 64):
            auroc.update(preds[i : min(i + 64, stop)], target[i : min(i + 64, stop)])
            ap.update(preds[i : min(i + 64, stop)], target[i : min(i + 64, stop)])
        values = (float(auroc.compute()), float(ap.compute()))
        with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as fh:
            fh.write(f"{stop - start} {values[0]!r} {values[1]!r}\n")
    finally:
        dist.destroy_process_group()


def run(args: Any) -> int:
    """Spawn the ranks, print the table, return 0 if every rank matched the single-process value."""
    from torchmetrics_varlen.functional import auroc, average_precision

    preds, target = _data(args.num_samples, args.seed)
    truth = (float(auroc(preds, target)), float(average_precision(preds, target)))
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(  # type: ignore[attr-defined,no-untyped-call]
            _rank_main,
            args=(args.world_size, _free_port(), args.num_samples, args.seed, out_dir),
            nprocs=args.world_size,
            join=True,
        )
        rows = []
        for rank in range(args.world_size):
            with open(os.path.join(out_dir, f"rank{rank}.txt")) as fh:
                fields = fh.read().split()
                rows.append((rank, int(fields[0]), float(fields[1]), float(fields[2])))
    print(f"single process: AUROC {truth[0]:.10f}  AP {truth[1]:.10f}  ({args.num_samples} samples)")
    ok = True
    for rank, count, a, p in rows:
        match = abs(a - truth[0]) <= 1e-12 and abs(p - truth[1]) <= 1e-12
        ok &= match
        print(f"rank {rank}: {count:5d} samples  AUROC {a:.10f}  AP {p:.10f}  {'match' if match else 'MISMATCH'}")
    return 0 if ok else 1
