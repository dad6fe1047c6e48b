"""A MetricCollection of AUROC, AP, curves and best F1: one compute group, one exchange per compute().

Run: ``torchrun --nproc-per-node 2 examples/metric_collection.py`` (or plain ``python`` for one process).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torchmetrics import MetricCollection

from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision, VarlenBestF1, VarlenPrecisionRecallCurve


def make_data(n: int, seed: int = 0) -> TensorDataset:
    """Scores and labels."""
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    return TensorDataset(torch.rand(n, generator=gen) * 0.8 + 0.2 * target, target)


def main() -> None:
    """Evaluate a collection; print its values, its compute groups and the exchanges of one compute()."""
    parser = argparse.ArgumentParser(description="A MetricCollection sharing one sync.")
    parser.add_argument("--num-samples", type=int, default=1001)
    parser.add_argument("--out-dir", default=None, help="write rank<r>.json here instead of printing")
    args = parser.parse_args()
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    data = make_data(args.num_samples)
    n = len(data)
    metrics = MetricCollection(
        {
            "auroc": VarlenAUROC(dataset_size=n),
            "ap": VarlenAveragePrecision(dataset_size=n),
            "pr_curve": VarlenPrecisionRecallCurve(dataset_size=n),
            "best_f1": VarlenBestF1(dataset_size=n),
        },
        compute_groups=True,
    )
    sampler = DistributedSampler(data) if distributed else None
    for scores, target in DataLoader(data, batch_size=64, sampler=sampler):
        metrics.update(scores, target)
    values = metrics.compute()  # the group's data moves once; each member checks in (a few store operations)
    record = {
        "rank": dist.get_rank() if distributed else 0,
        "compute_groups": [list(group) for group in metrics.compute_groups.values()],
        "auroc": float(values["auroc"]),
        "ap": float(values["ap"]),
        "best_f1": float(values["best_f1"][0]),
        "best_threshold": float(values["best_f1"][1]),
    }
    if args.out_dir:
        with open(os.path.join(args.out_dir, f"rank{record['rank']}.json"), "w") as fh:
            json.dump(record, fh)
    else:
        print(json.dumps(record))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
