"""Regenerate the documentation's figures from code (run by ``nox -s docs`` before the build).

- ``figures/auroc_vs_world_size.png``: ``python -m torchmetrics_varlen demo --plot ...``.
- ``figures/roc_curve.png``: ``VarlenROC().plot()`` on rank 0 after a sync over 3 CPU ranks with uneven shards
  (rank 0 has no data).
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

FIGURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pages", "figures")


def _roc_rank(rank: int, world: int, store: str, path: str) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    from torchmetrics_varlen import VarlenROC

    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    gen = torch.Generator().manual_seed(0)
    target = torch.randint(0, 2, (300,), generator=gen)
    preds = torch.rand(300, generator=gen) * 0.7 + 0.3 * target
    start, stop = [(0, 0), (0, 110), (110, 300)][rank]
    metric = VarlenROC(sync_timeout=30)
    if stop > start:
        metric.update(preds[start:stop], target[start:stop])
    curve = metric.compute()  # every rank
    if rank == 0:
        fig, _ = metric.plot(curve)
        fig.set_size_inches(5, 4.2)
        fig.savefig(path, dpi=110)
    dist.destroy_process_group()


def main() -> None:
    """Write both figures."""
    os.makedirs(FIGURES, exist_ok=True)
    demo = [
        sys.executable,
        "-m",
        "torchmetrics_varlen",
        "demo",
        "--plot",
        os.path.join(FIGURES, "auroc_vs_world_size.png"),
    ]
    subprocess.run(demo, check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(
            _roc_rank, args=(3, os.path.join(tmp, "store"), os.path.join(FIGURES, "roc_curve.png")), nprocs=3, join=True
        )
    print(f"figures written to {FIGURES}")


if __name__ == "__main__":
    main()
