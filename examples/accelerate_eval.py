"""Accelerate: exact AUROC on a prepared data loader, with ``sample_ids``.

``accelerator.prepare(loader)`` shards *batches* (process ``r`` gets batches ``r, r + W, ...``) and, with its
default ``even_batches=True``, tops up the last round with samples from the start of the data set so every
process runs the same number of full batches. Those repeated samples are counted twice by every metric that
just gathers. Let the data set return each sample's index and pass it as ``sample_ids``: after the sync every
index counts once, whatever the sharding, so the value equals the single-process AUROC.

Run: ``torchrun --nproc-per-node 2 examples/accelerate_eval.py`` (``accelerate launch`` works the same on GPUs).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import BinaryAUROC

from torchmetrics_varlen import VarlenAUROC


def make_data(n: int, seed: int = 0) -> TensorDataset:
    """Scores, labels and the sample index (the id)."""
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    scores = torch.rand(n, generator=gen) * 0.8 + 0.2 * target
    return TensorDataset(scores, target, torch.arange(n))


def main() -> None:
    """Evaluate with a prepared loader; report ours and torchmetrics' value on every process."""
    parser = argparse.ArgumentParser(description="Exact AUROC with Accelerate.")
    parser.add_argument("--num-samples", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument("--out-dir", default=None, help="write rank<r>.json here instead of printing")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(make_data(args.num_samples), batch_size=args.batch_size))
    ours = VarlenAUROC().to(accelerator.device)
    theirs = BinaryAUROC().to(accelerator.device)
    seen = 0
    for scores, target, ids in loader:
        ours.update(scores, target, sample_ids=ids)
        theirs.update(scores, target)
        seen += len(ids)
    record = {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "seen": seen,
        "varlen": float(ours.compute()),
        "torchmetrics": float(theirs.compute()),
        "kept": ours.sync_report.kept if ours.sync_report else None,
    }
    if args.out_dir:
        with open(os.path.join(args.out_dir, f"rank{record['rank']}.json"), "w") as fh:
            json.dump(record, fh)
    else:
        print(json.dumps(record))
    accelerator.end_training()


if __name__ == "__main__":
    main()
