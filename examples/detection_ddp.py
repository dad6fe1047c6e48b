"""Exact COCO mAP under torchrun: a detector's outputs evaluated with image ids, on CPU ranks (gloo).

Every rank evaluates its ``DistributedSampler`` shard (shuffled, ``drop_last=False``: the sampler repeats images to
give every rank as many), runs the "detector" on each batch and updates three metrics side by side:

- torchmetrics' ``MeanAveragePrecision``, which syncs itself: every repeated image is counted twice;
- ``Varlen(MeanAveragePrecision(), dataset_size=len(dataset))``: the sampler's padding is dropped by its rule;
- the same with ``update(preds, target, sample_ids=image_ids)``: each image id counts once, in id order, whatever the
  sampler (a repeat-factor or aspect-ratio-grouping sampler too, where only ids can tell the copies).

Every rank calls ``compute()`` and gets the same value; the last two equal the value of one process on the whole data
set (computed here by each rank alone, as a check). The detector is synthetic (boxes near the ground truth, a few false
positives, seeded by the image id, so that a repeated image gets the same detections), the data set too. Needs
torchvision and pycocotools (``pip install torchvision pycocotools``).

Run on one machine:                 ``torchrun --nproc-per-node 2 examples/detection_ddp.py``
The table of docs/pages/wrapper.md: ``python examples/detection_ddp.py --table`` (torchrun at W = 2 and 4)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from torchmetrics.detection import MeanAveragePrecision

from torchmetrics_varlen import Varlen


class SyntheticDetections(Dataset[dict[str, Any]]):
    """``n`` images, each its id and its ground truth: 0 to 5 boxes (``xyxy``) of 3 classes."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n, self.seed = n, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + i)
        k = int(torch.randint(0, 6, (1,), generator=gen))
        corner = torch.randint(0, 500, (k, 2), generator=gen).float()
        size = torch.randint(10, 200, (k, 2), generator=gen).float()
        boxes = torch.cat([corner, corner + size], 1)
        return {"image_id": i, "boxes": boxes, "labels": torch.randint(0, 3, (k,), generator=gen)}


def detector(images: list[dict[str, Any]]) -> list[dict[str, Tensor]]:
    """A stand-in for a model in eval mode: per image, most objects found (jittered, sometimes with the wrong class),
    a few false positives, a score each; a function of the image alone, so a repeated image gets the same outputs.
    """
    out = []
    for image in images:
        gen = torch.Generator().manual_seed(7_919 * image["image_id"] + 1)
        boxes, labels = image["boxes"], image["labels"]
        found = torch.rand(boxes.shape[0], generator=gen) < 0.75
        size = (boxes[:, 2:] - boxes[:, :2]).repeat(1, 2)
        jittered = boxes + (torch.rand(boxes.shape, generator=gen) - 0.5) * size * 0.3
        wrong = torch.rand(labels.shape, generator=gen) < 0.2
        guessed = torch.where(wrong, (labels + 1) % 3, labels)
        extra = int(torch.randint(0, 3, (1,), generator=gen))
        corner = torch.randint(0, 500, (extra, 2), generator=gen).float()
        false_boxes = torch.cat([corner, corner + 30 + 100 * torch.rand(extra, 2, generator=gen)], 1)
        out.append(
            {
                "boxes": torch.cat([jittered[found], false_boxes]),
                "scores": torch.rand(int(found.sum()) + extra, generator=gen),
                "labels": torch.cat([guessed[found], torch.randint(0, 3, (extra,), generator=gen)]),
            }
        )
    return out


def targets(images: list[dict[str, Any]]) -> list[dict[str, Tensor]]:
    """The ground truth of a batch, as ``MeanAveragePrecision`` takes it."""
    return [{"boxes": image["boxes"], "labels": image["labels"]} for image in images]


def evaluate(num_images: int, batch_size: int) -> dict[str, Any]:
    """This rank's evaluation (the default process group must be initialised): every metric's ``map`` and what the
    wrapper's ``sync_report`` says.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    data = SyntheticDetections(num_images)
    sampler = DistributedSampler(data, shuffle=True, seed=1)  # pads to a multiple of the world size
    loader = DataLoader(data, batch_size=batch_size, sampler=sampler, collate_fn=list)
    plain = MeanAveragePrecision()  # torchmetrics' own sync
    by_size = Varlen(MeanAveragePrecision(), dataset_size=len(data))
    by_id = Varlen(MeanAveragePrecision(), dataset_size=len(data))
    for images in loader:
        preds, target = detector(images), targets(images)
        image_ids = torch.tensor([image["image_id"] for image in images])
        plain.update(preds, target)
        by_size.update(preds, target)
        by_id.update(preds, target, sample_ids=image_ids)
    truth = MeanAveragePrecision(sync_on_compute=False)  # one process, every image once: the reference
    everything = [data[i] for i in range(len(data))]
    truth.update(detector(everything), targets(everything))
    record = {
        "rank": rank,
        "world_size": world,
        "torchmetrics": float(plain.compute()["map"]),  # every rank calls compute()
        "varlen_dataset_size": float(by_size.compute()["map"]),
        "varlen_ids": float(by_id.compute()["map"]),
        "truth": float(truth.compute()["map"]),
    }
    report = by_id.sync_report
    record["kept"], record["duplicates_dropped"] = (report.kept, report.duplicates_dropped) if report else (None, None)
    return record


def _cell(record: dict[str, Any], key: str, every: str) -> str:
    value, truth = record[key], record["truth"]
    return f"{value:.6f}: exact{every}" if value == truth else f"map {value:.6f} (truth {truth:.6f})"


def _table(num_images: int, batch_size: int, worlds: list[int]) -> None:
    """Run this example under torchrun at each world size and print the markdown table of rank 0's values."""
    rows = [
        "| W | torchmetrics `MeanAveragePrecision` | `Varlen(MeanAveragePrecision(), dataset_size=N)` |"
        " `Varlen(..., dataset_size=N)` + `sample_ids=image_ids` |",
        "|---|---|---|---|",
    ]
    for world in worlds:
        with tempfile.TemporaryDirectory() as folder:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world)]
            cmd += ["--master-addr", "127.0.0.1", "--master-port", str(29_500 + world), __file__]
            cmd += ["--num-images", str(num_images), "--batch-size", str(batch_size), "--out-dir", folder]
            subprocess.run(cmd, check=True, capture_output=True)
            records = []
            for r in range(world):
                with open(os.path.join(folder, f"rank{r}.json")) as fh:
                    records.append(json.load(fh))
        first = records[0]
        same = all(r == {**first, "rank": r["rank"]} for r in records)
        every = " on every rank" if same else " on rank 0 (the ranks differ!)"
        dropped = first["duplicates_dropped"]
        rows.append(
            f"| {world} | {_cell(first, 'torchmetrics', every)} | {_cell(first, 'varlen_dataset_size', every)} |"
            f" {_cell(first, 'varlen_ids', every)} ({dropped} repeated image{'s' if dropped != 1 else ''} dropped) |"
        )
    print("\n".join(rows))


def main() -> None:
    """Under torchrun: evaluate this rank's shard and print (or write) the result; ``--table``: the docs' table."""
    parser = argparse.ArgumentParser(description="Exact COCO mAP under torchrun, with image ids.")
    parser.add_argument("--num-images", type=int, default=21)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--out-dir", default=None, help="write rank<r>.json here instead of printing")
    parser.add_argument("--table", action="store_true", help="run torchrun at W = 2 and 4, print the table")
    args = parser.parse_args()
    if args.table:
        _table(args.num_images, args.batch_size, [2, 4])
        return
    dist.init_process_group("gloo")  # "nccl" on GPUs: the metrics keep their states on the GPU
    record = evaluate(args.num_images, args.batch_size)
    if args.out_dir:
        with open(os.path.join(args.out_dir, f"rank{record['rank']}.json"), "w") as fh:
            json.dump(record, fh)
    else:
        print(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
