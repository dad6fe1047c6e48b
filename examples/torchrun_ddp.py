"""Plain DDP under torchrun (one node or several): every rank computes the same exact AUROC.

Each rank evaluates its ``DistributedSampler`` shard (padded: ``drop_last=False``) and calls ``compute()``; the
padding is dropped by ``dataset_size``, so the value equals the single-process AUROC of the whole data set. The
same AUROC with ``compute_sharded=True`` never gathers the predictions: the ranks sort them together and each keeps
one range of scores (for evaluations too large to copy to every rank).

Run on one machine:      ``torchrun --nproc-per-node 2 examples/torchrun_ddp.py``
Two (simulated) nodes:   start ``torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d
                         --rdzv-endpoint 127.0.0.1:29400 --rdzv-id demo examples/torchrun_ddp.py`` twice.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from torchmetrics_varlen import VarlenAUROC, VarlenGroupAUROC


def make_data(n: int, seed: int = 0) -> TensorDataset:
    """Scores, labels and a user id per sample."""
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    scores = torch.rand(n, generator=gen) * 0.8 + 0.2 * target
    users = torch.randint(0, 7, (n,), generator=gen)
    return TensorDataset(scores, target, users)


def main() -> None:
    """Evaluate this rank's shard, compute on every rank, print (or write) the result."""
    parser = argparse.ArgumentParser(description="Exact AUROC under torchrun.")
    parser.add_argument("--num-samples", type=int, default=1001)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out-dir", default=None, help="write rank<r>.json here instead of printing")
    args = parser.parse_args()
    dist.init_process_group("gloo")  # "nccl" on GPUs: the metric keeps its data on the GPU
    rank, world = dist.get_rank(), dist.get_world_size()
    data = make_data(args.num_samples)
    sampler = DistributedSampler(data, shuffle=True, seed=1)  # pads to a multiple of the world size
    auroc = VarlenAUROC(dataset_size=len(data))
    sharded = VarlenAUROC(dataset_size=len(data), compute_sharded=True)
    gauc = VarlenGroupAUROC(dataset_size=len(data))
    for scores, target, users in DataLoader(data, batch_size=args.batch_size, sampler=sampler):
        auroc.update(scores, target)
        sharded.update(scores, target)
        gauc.update(scores, target, groups=users)
    record = {
        "rank": rank,
        "world_size": world,
        "node": os.environ.get("GROUP_RANK", "0"),
        "auroc": float(auroc.compute()),  # every rank calls compute()
        "auroc_sharded": float(sharded.compute()),
        "gauc": float(gauc.compute()),
        "kept": auroc.sync_report.kept if auroc.sync_report else None,
    }
    if args.out_dir:
        with open(os.path.join(args.out_dir, f"rank{rank}.json"), "w") as fh:
            json.dump(record, fh)
    else:
        print(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
