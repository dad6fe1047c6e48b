"""Tied logits: AUROC by batch size and world size, torchmetrics against this package, next to scikit-learn.

torch's CPU sigmoid rounds a tensor's vectorised body and its tail differently, so equal logits split into two
scores and a value moves with the batch size and the number of ranks. This prints, for bfloat16 logits upcast to
float32 (autocast's output):

- N = 10,000 fed in batches of B to ``BinaryAUROC`` and ``VarlenAUROC`` in one process;
- N = 4,001 dealt by a padded, shuffled ``DistributedSampler`` to W = 1-3 gloo ranks on 127.0.0.1 (batches of
  100), ``VarlenAUROC(dataset_size=N)`` and, for the rounding alone, torch's per-batch sigmoid with the padding
  dropped as the package drops it;

and scikit-learn on NumPy's float64 sigmoid rounded once to float32. ``--markdown`` prints the table the guide shows
(``docs/make_figures.py`` refreshes it).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from sklearn.metrics import roc_auc_score
from torch.utils.data import DistributedSampler
from torchmetrics.classification import BinaryAUROC

from torchmetrics_varlen import VarlenAUROC


def logits(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """bfloat16 logits upcast to float32, and labels drawn from their sigmoid."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, generator=gen) * 2).bfloat16().float()
    return x, (torch.rand(n, generator=gen) < torch.sigmoid(x.double() * 1.5)).long()


def truth(x: torch.Tensor, y: torch.Tensor) -> float:
    """scikit-learn on the float64 sigmoid rounded once to float32."""
    scores = (1 / (1 + np.exp(-x.double().numpy()))).astype(np.float32)
    return float(roc_auc_score(y.numpy(), scores))


def by_batch(n: int, batches: list[int]) -> list[tuple[str, float, float]]:
    """``(feed, torchmetrics, ours)`` for N scores fed in batches of each B in one process."""
    x, y = logits(n, 0)
    rows = []
    for b in batches:
        theirs, ours = BinaryAUROC(), VarlenAUROC()
        for i in range(0, n, b):
            theirs.update(x[i : i + b], y[i : i + b])
            ours.update(x[i : i + b], y[i : i + b])
        rows.append((f"B = {b:,}", float(theirs.compute()), float(ours.compute())))
    return rows


def _rank(rank: int, world: int, n: int, batch: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        x, y = logits(n, 1)
        mine = list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=0))
        metric = VarlenAUROC(dataset_size=n, sync_timeout=60)
        for i in range(0, len(mine), batch):
            rows = torch.tensor(mine[i : i + batch])
            metric.update(x[rows], y[rows])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = float(metric.compute())
        if rank == 0:
            with open(out, "w") as f:
                f.write(repr(value))
    finally:
        dist.destroy_process_group()


def _torch_rounding(n: int, world: int, batch: int) -> float:
    """What torch's own sigmoid per batch gives on the same deal (padding positions >= n dropped), exactly."""
    x, y = logits(n, 1)
    scores, labels = [], []
    for rank in range(world):
        mine = list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=0))
        for i in range(0, len(mine), batch):
            rows = torch.tensor(mine[i : i + batch])
            position = torch.arange(i, i + rows.numel()) * world + rank
            kept = position < n
            scores.append(x[rows].sigmoid()[kept])
            labels.append(y[rows][kept])
    return float(np.float32(roc_auc_score(torch.cat(labels).numpy(), torch.cat(scores).double().numpy())))


def by_world(n: int, worlds: list[int], batch: int) -> list[tuple[str, float, float]]:
    """``(feed, torch's per-batch sigmoid, ours)`` for N scores on W spawned gloo ranks, for each W."""
    rows = []
    for world in worlds:
        with tempfile.TemporaryDirectory() as tmp:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            out = os.path.join(tmp, "value")
            mp.start_processes(
                _rank, args=(world, n, batch, f"tcp://127.0.0.1:{port}", out), nprocs=world, start_method="spawn"
            )
            with open(out) as f:
                ours = float(f.read())
        rows.append((f"W = {world}", _torch_rounding(n, world, batch), ours))
    return rows


def main() -> None:
    """Print the table (or, with ``--markdown``, the guide's)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="the guide's table")
    args = parser.parse_args()
    x, y = logits(10_000, 0)
    x4, y4 = logits(4001, 1)
    table = [
        ("N = 10,000, one process", by_batch(10_000, [64, 100, 1000]), truth(x, y), "`BinaryAUROC`"),
        ("N = 4,001, padded shuffled sampler", by_world(4001, [1, 2, 3], 100), truth(x4, y4), "torch's sigmoid"),
    ]
    if args.markdown:
        print("| bf16 logits as float32 | feed | torchmetrics' rounding | `VarlenAUROC` | scikit-learn |")
        print("|---|---|---|---|---|")
    for title, rows, reference, theirs in table:
        for feed, their_value, our_value in rows:
            if args.markdown:
                print(f"| {title} | {feed} | {their_value:.8f} ({theirs}) | {our_value:.8f} | {reference:.8f} |")
            else:
                print(
                    f"{title:38} {feed:10} {theirs:16} {their_value:.8f}  ours {our_value:.8f}  sklearn {reference:.8f}"
                )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
