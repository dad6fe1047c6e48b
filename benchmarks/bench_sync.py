"""Sync on W CPU ranks (gloo): this package vs a bare all-gather of the same bytes and vs torchmetrics.

Each rank holds N / W samples (float32 scores, int64 labels as users pass them). Measured on every rank, medians:

- ``bare``: ``all_gather_into_tensor`` of the payload this package moves (scores + packed labels), the floor;
- ``varlen sync``: ``metric.sync(); metric.unsync()`` (check-in on the store, one packed exchange, unpack);
- ``varlen compute``: the whole ``compute()`` (sync, then the exact AUROC);
- ``torchmetrics sync`` / ``torchmetrics compute``: the same for ``BinaryAUROC``;
- peak RSS above the level before ``compute()``, per rank, against the gathered payload.

    python benchmarks/bench_sync.py --world-sizes 2,4 --num-samples 4000000
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _rank(rank: int, world: int, store: str, n: int, repeats: int, out: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _measure import PeakRSS, median_time
    from torchmetrics.classification import BinaryAUROC

    from torchmetrics_varlen import VarlenAUROC

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600)
    )
    gen = torch.Generator().manual_seed(rank)
    local = n // world
    target = torch.randint(0, 2, (local,), generator=gen)
    preds = torch.rand(local, generator=gen) * 0.8 + 0.2 * target
    ours, theirs = VarlenAUROC(validate_args=False, sync_timeout=600), BinaryAUROC(validate_args=False)
    ours.update(preds, target)
    theirs.update(preds, target)
    payload = local * (4 + 1)  # float32 score + bool label per sample
    buf = torch.zeros(payload, dtype=torch.uint8)
    out_buf = torch.empty(world * payload, dtype=torch.uint8)

    def bare() -> None:
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out_buf, buf)

    def ours_sync() -> None:
        ours.sync()
        ours.unsync()

    def theirs_sync() -> None:
        theirs.sync()
        theirs.unsync()

    def fresh(metric: Any) -> Any:
        def run() -> Any:
            metric._computed = None
            return metric.compute()

        return run

    row: dict[str, Any] = {"rank": rank, "world": world, "n": n, "gathered_payload_bytes": world * payload}
    for name, fn in [
        ("bare", bare),
        ("varlen sync", ours_sync),
        ("torchmetrics sync", theirs_sync),
        ("varlen compute", fresh(ours)),
        ("torchmetrics compute", fresh(theirs)),
    ]:
        dist.barrier()
        row[name] = median_time(fn, repeats)
    for name, metric in [("varlen", ours), ("torchmetrics", theirs)]:
        dist.barrier()
        metric._computed = None
        with PeakRSS() as mem:
            metric.compute()
        row[f"{name} peak extra bytes"] = mem.extra
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(row, fh)
    dist.destroy_process_group()


def main() -> None:
    """Spawn each world size, print per-rank rows and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--num-samples", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"{'W':>2} {'rank':>4} {'bare s':>8} {'sync s':>8} {'/bare':>6} {'tm sync':>8} {'compute':>8} "
        f"{'tm comp':>8} {'/tm':>5} {'peak/payload':>12} {'tm peak/payload':>15}"
    )
    for world in [int(w) for w in args.world_sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(
                _rank,
                args=(world, os.path.join(tmp, "store"), args.num_samples, args.repeats, tmp),
                nprocs=world,
                join=True,
            )
            rows = []
            for r in range(world):
                with open(os.path.join(tmp, f"rank{r}.json")) as fh:
                    rows.append(json.load(fh))
        for r in rows:
            payload = r["gathered_payload_bytes"]
            print(
                f"{world:>2} {r['rank']:>4} {r['bare']:8.4f} {r['varlen sync']:8.4f}"
                f" {r['varlen sync'] / r['bare']:6.2f}"
                f" {r['torchmetrics sync']:8.4f} {r['varlen compute']:8.4f} {r['torchmetrics compute']:8.4f}"
                f" {r['varlen compute'] / r['torchmetrics compute']:5.2f}"
                f" {r['varlen peak extra bytes'] / payload:12.2f} {r['torchmetrics peak extra bytes'] / payload:15.2f}"
            )


if __name__ == "__main__":
    main()
