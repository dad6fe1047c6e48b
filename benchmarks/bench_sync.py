"""Sync and distributed compute on W CPU ranks (gloo): this package vs a bare all-gather and vs torchmetrics.

Each rank holds N / W samples (float32 scores, int64 labels as users pass them). Times are medians, on every rank:

- ``bare``: ``all_gather_into_tensor`` of the payload this package moves (scores + 1-byte labels) into a fresh
  buffer, the floor;
- ``varlen sync``: ``metric.sync(); metric.unsync()`` (check-in on the store, one packed exchange, unpack);
- ``torchmetrics sync``: the same for ``BinaryAUROC``;
- ``compute`` of ``VarlenAUROC`` three ways: every rank gathers everything (default), ``compute_on_rank=0``, and
  ``compute_sharded=True``; and of ``BinaryAUROC``;
- ``--batch B`` (default 256; 0: skip): the same data fed to ``VarlenAUROC`` in batches of B, as a validation loop
  does, its sync and compute against the same data fed in one piece (``B / piece``).

Peak memory is measured separately, in fresh processes per variant (allocator caches would otherwise hide it), after
a warm-up ``compute()`` on 1,000 samples per rank: the peak RSS during one ``compute()`` above the level just before
it, per rank, against the gathered payload (``N * 5`` bytes).

    python benchmarks/bench_sync.py --world-sizes 2,4 --num-samples 4000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

COMPUTES = ["varlen", "varlen on rank 0", "varlen sharded", "torchmetrics"]


def _metric(name: str) -> Any:
    from torchmetrics.classification import BinaryAUROC

    from torchmetrics_varlen import VarlenAUROC

    if name == "torchmetrics":
        return BinaryAUROC(validate_args=False)
    extra = {"varlen on rank 0": {"compute_on_rank": 0}, "varlen sharded": {"compute_sharded": True}}.get(name, {})
    return VarlenAUROC(validate_args=False, sync_timeout=600, **extra)


def _setup(rank: int, world: int, port: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    torch.set_num_threads(1)
    from _measure import init_gloo

    init_gloo(rank, world, port)
    gen = torch.Generator().manual_seed(rank)
    local = n // world
    target = torch.randint(0, 2, (local,), generator=gen)
    preds = torch.rand(local, generator=gen) * 0.8 + 0.2 * target
    return preds, target


def _timing_rank(rank: int, world: int, port: int, n: int, repeats: int, batch: int, out: str) -> None:
    preds, target = _setup(rank, world, port, n)
    from _measure import median_time

    metrics = {name: _metric(name) for name in COMPUTES}
    for metric in metrics.values():
        metric.update(preds, target)
    if batch:
        metrics["batched"] = _metric("varlen")
        for start in range(0, preds.numel(), batch):
            metrics["batched"].update(preds[start : start + batch], target[start : start + batch])
    payload = preds.numel() * (4 + 1)  # float32 score + bool label per sample
    buf = torch.zeros(payload, dtype=torch.uint8)

    def bare() -> None:
        # A fresh receive buffer per call, as every real gather (this package's, torchmetrics') needs one.
        out_buf = torch.empty(world * payload, dtype=torch.uint8)
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out_buf, buf)

    def sync(metric: Any) -> Any:
        def run() -> None:
            metric.sync()
            metric.unsync()

        return run

    def fresh(metric: Any) -> Any:
        def run() -> Any:
            metric._computed = None
            return metric.compute()

        return run

    row: dict[str, Any] = {"rank": rank, "world": world, "n": n, "gathered_payload_bytes": world * payload}
    values = {}
    timed = [("bare", bare), ("varlen sync", sync(metrics["varlen"]))]
    timed += [("torchmetrics sync", sync(metrics["torchmetrics"]))]
    timed += [(f"{name} compute", fresh(metrics[name])) for name in COMPUTES]
    if batch:
        timed += [("batched sync", sync(metrics["batched"])), ("batched compute", fresh(metrics["batched"]))]
    for name, fn in timed:
        dist.barrier()
        row[name] = median_time(fn, repeats)
        if name.endswith("compute"):
            values[name] = float(fn())
    row["values"] = values
    with open(os.path.join(out, f"time{rank}.json"), "w") as fh:
        json.dump(row, fh)
    dist.destroy_process_group()


def _memory_rank(rank: int, world: int, port: int, n: int, variant: str, out: str) -> None:
    preds, target = _setup(rank, world, port, n)
    from _measure import PeakRSS

    warm = _metric(variant)  # one-time initialisation (imports, kernels, gloo buffers) on 1,000 samples per rank
    warm.update(preds[:1000], target[:1000])
    warm.compute()
    del warm
    metric = _metric(variant)
    metric.update(preds, target)
    del preds, target
    dist.barrier()
    with PeakRSS() as mem:
        metric.compute()
    with open(os.path.join(out, f"mem{rank}.json"), "w") as fh:
        json.dump({"rank": rank, "extra": mem.extra}, fh)
    dist.destroy_process_group()


def _spawn(fn: Any, world: int, *args: Any) -> list[dict[str, Any]]:
    from _measure import free_port

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(fn, args=(world, free_port(), *args, tmp), nprocs=world, join=True)
        prefix = "time" if fn is _timing_rank else "mem"
        rows = []
        for r in range(world):
            with open(os.path.join(tmp, f"{prefix}{r}.json")) as fh:
                rows.append(json.load(fh))
    return rows


def main() -> None:
    """Spawn each world size, print per-rank rows and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--num-samples", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=256, help="also feed the data in batches of this size (0: no)")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args()
    results = []
    for world in [int(w) for w in args.world_sizes.split(",")]:
        rows = _spawn(_timing_rank, world, args.num_samples, args.repeats, args.batch)
        for variant in COMPUTES:
            for row, mem in zip(rows, _spawn(_memory_rank, world, args.num_samples, variant), strict=True):
                row[f"{variant} peak"] = mem["extra"]
        results.extend(rows)
    print("Time (seconds, median per rank) and ratios")
    print(
        f"{'W':>2} {'rank':>4} {'bare':>7} {'sync':>7} {'/bare':>6} {'tm sync':>7} | {'gather':>7} {'on r0':>7}"
        f" {'sharded':>7} {'tm':>7} | {'shard/gather':>12} {'gather/tm':>9}"
    )
    for r in results:
        print(
            f"{r['world']:>2} {r['rank']:>4} {r['bare']:7.4f} {r['varlen sync']:7.4f}"
            f" {r['varlen sync'] / r['bare']:6.2f} {r['torchmetrics sync']:7.4f} |"
            f" {r['varlen compute']:7.4f} {r['varlen on rank 0 compute']:7.4f} {r['varlen sharded compute']:7.4f}"
            f" {r['torchmetrics compute']:7.4f} |"
            f" {r['varlen sharded compute'] / r['varlen compute']:12.2f}"
            f" {r['varlen compute'] / r['torchmetrics compute']:9.2f}"
        )
    if args.batch:
        print(f"\nFed in batches of {args.batch} per rank, against the same data in one piece (seconds, ratios)")
        print(f"{'W':>2} {'rank':>4} {'sync':>7} {'/piece':>6} {'/bare':>6} | {'compute':>7} {'/piece':>6}")
        for r in results:
            print(
                f"{r['world']:>2} {r['rank']:>4} {r['batched sync']:7.4f} {r['batched sync'] / r['varlen sync']:6.2f}"
                f" {r['batched sync'] / r['bare']:6.2f} | {r['batched compute']:7.4f}"
                f" {r['batched compute'] / r['varlen compute']:6.2f}"
            )
    print("\nPeak extra RSS during compute() (fresh processes), as a multiple of the gathered payload (N * 5 bytes)")
    print(f"{'W':>2} {'rank':>4} {'gather':>7} {'on r0':>7} {'sharded':>7} {'tm':>7} | {'shard/gather':>12}")
    for r in results:
        payload = r["gathered_payload_bytes"]
        peaks = [r[f"{v} peak"] / payload for v in COMPUTES]
        print(
            f"{r['world']:>2} {r['rank']:>4} "
            + " ".join(f"{p:7.2f}" for p in peaks)
            + f" | {r['varlen sharded peak'] / max(r['varlen peak'], 1):12.2f}"
        )
    print("\nValues (rank 0):")
    for r in results:
        if r["rank"] == 0:
            print(f"  W={r['world']}: " + ", ".join(f"{k} {v:.15f}" for k, v in r["values"].items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
