"""The demo: "why does my distributed AUC move with world size and drop_last?", reproduced on CPU ranks.

For every world size it spawns that many CPU processes (gloo on 127.0.0.1, a file store in a temporary folder),
feeds one synthetic validation set through a real ``DistributedSampler`` for every (batch size, drop_last, shuffle)
combination, and computes AUROC three ways on every rank: a naive ``all_gather`` of everything (what most hand-rolled
code does), torchmetrics' ``BinaryAUROC``, and ``VarlenAUROC(dataset_size=N)``. Rank 0 writes the results; the
parent prints them next to the single-process value on the samples that configuration evaluated.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import tempfile
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HELP = "show AUROC moving with world size / drop_last, and this package's exact value"
DESCRIPTION = (
    "Spawns CPU ranks (gloo on 127.0.0.1) and evaluates one synthetic data set through a real DistributedSampler "
    "for every combination of world size, batch size, drop_last and shuffle. For each it prints AUROC from a naive "
    "all_gather, from torchmetrics' BinaryAUROC, from VarlenAUROC(dataset_size=N), and the single-process truth on "
    "the samples that were evaluated, with the sample counts (seen by the ranks, kept, never seen). Exits 0 only if "
    "VarlenAUROC matched the truth in every configuration."
)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        msg = f"expected comma-separated integers, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not values or min(values) < 1:
        msg = f"expected positive integers, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the demo's options."""
    parser.add_argument(
        "-w",
        "--world-sizes",
        type=_int_list,
        default=[1, 2, 3, 4],
        metavar="W,...",
        help="world sizes to try, one set of spawned CPU processes each (default 1,2,3,4)",
    )
    parser.add_argument(
        "-n",
        "--num-samples",
        type=int,
        default=101,
        help="size of the validation set; sizes that are not a multiple of W show the padding effect (default 101)",
    )
    parser.add_argument(
        "-b",
        "--batch-sizes",
        type=_int_list,
        default=[8, 64],
        metavar="B,...",
        help="per-rank batch sizes to try (default 8,64)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and of the sampler shuffle (default 0)")
    parser.add_argument(
        "--plot",
        metavar="FILE",
        default=None,
        help="also save a figure of AUROC against world size to FILE (PNG; needs matplotlib)",
    )


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = (torch.rand(n, generator=gen) * 0.7 + 0.3 * target).float()
    return preds, target


def _grid(batch_sizes: list[int]) -> list[tuple[int, bool, bool]]:
    return list(itertools.product(batch_sizes, [False, True], [False, True]))


def _rank_main(rank: int, world: int, store_path: str, n: int, seed: int, batch_sizes: list[int], out: str) -> None:
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    from torchmetrics.classification import BinaryAUROC

    from torchmetrics_varlen import VarlenAUROC
    from torchmetrics_varlen.functional import auroc

    warnings.simplefilter("ignore")  # the drop_last warning is reported in the table instead
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        preds, target = _data(n, seed)
        data = TensorDataset(preds, target)
        rows = []
        for batch, drop_last, shuffle in _grid(batch_sizes):
            sampler: DistributedSampler[Any] = DistributedSampler(
                data, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
            )
            ours, theirs = VarlenAUROC(dataset_size=n, sync_timeout=30), BinaryAUROC()
            mine_p, mine_t = [], []
            for p, t in DataLoader(data, batch_size=batch, sampler=sampler):
                ours.update(p, t)
                theirs.update(p, t)
                mine_p.append(p)
                mine_t.append(t)
            local = len(sampler)
            # Naive: every rank all_gathers its (equal-length, sampler-padded) predictions and evaluates them all.
            gathered = [torch.zeros(local), torch.zeros(local, dtype=torch.long)]
            naive_p = [torch.zeros(local) for _ in range(world)]
            naive_t = [torch.zeros(local, dtype=torch.long) for _ in range(world)]
            if local:
                gathered = [torch.cat(mine_p), torch.cat(mine_t)]
            dist.all_gather(naive_p, gathered[0])
            dist.all_gather(naive_t, gathered[1])
            naive = float(auroc(torch.cat(naive_p), torch.cat(naive_t)))
            # torchmetrics aborts the process (a gloo size mismatch) when a rank has no samples: skip it then.
            tm = float(theirs.compute()) if local else None
            value = float(ours.compute())
            report = ours.sync_report
            assert report is not None
            rows.append(
                {
                    "world": world,
                    "batch": batch,
                    "drop_last": drop_last,
                    "shuffle": shuffle,
                    "naive": naive,
                    "torchmetrics": tm,
                    "varlen": value,
                    "seen": sum(report.seen_per_rank),
                    "kept": report.kept,
                    "missing": report.missing,
                }
            )
        if rank == 0:
            with open(out, "w") as fh:
                json.dump(rows, fh)
    finally:
        dist.destroy_process_group()


def _evaluated(n: int, world: int, drop_last: bool, shuffle: bool, seed: int) -> list[int]:
    from torch.utils.data import DistributedSampler

    seen: set[int] = set()
    indices: Any = range(n)  # any sized sequence works as the sampler's data set
    for rank in range(world):
        seen.update(DistributedSampler(indices, world, rank, shuffle=shuffle, seed=seed, drop_last=drop_last))
    return sorted(seen)


def _fmt(value: float | None) -> str:
    return "   (crash)  " if value is None else f"{value:.10f}"


def collect(args: Any) -> list[dict[str, Any]]:
    """Run every world size; return one row per configuration, with the single-process truth added."""
    from torchmetrics_varlen.functional import auroc

    preds, target = _data(args.num_samples, args.seed)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in args.world_sizes:
            out = os.path.join(tmp, f"w{world}.json")
            mp.spawn(  # type: ignore[attr-defined,no-untyped-call]
                _rank_main,
                args=(world, os.path.join(tmp, f"store{world}"), args.num_samples, args.seed, args.batch_sizes, out),
                nprocs=world,
                join=True,
            )
            with open(out) as fh:
                rows.extend(json.load(fh))
    for row in rows:
        idx = _evaluated(args.num_samples, row["world"], row["drop_last"], row["shuffle"], args.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            row["truth"] = float(auroc(preds[idx], target[idx]))
        row["ok"] = abs(row["varlen"] - row["truth"]) <= 1e-12 and row["kept"] == len(idx)
    return rows


def run(args: Any) -> int:
    """Print the table; return 0 if VarlenAUROC matched the truth everywhere."""
    from torchmetrics_varlen.functional import auroc

    if args.num_samples < 1:
        print("error: --num-samples must be at least 1")
        return 2
    preds, target = _data(args.num_samples, args.seed)
    full = float(auroc(preds, target))
    rows = collect(args)
    print(f"AUROC of {args.num_samples} samples; single-process value on all of them: {full:.10f}")
    print("truth = single-process AUROC of the samples the configuration evaluated (drop_last=True loses the tail)\n")
    head = (
        f"{'W':>2} {'batch':>5} {'drop_last':>9} {'shuffle':>7} | {'seen':>5} {'kept':>5} {'lost':>4} | "
        f"{'naive gather':>12} {'torchmetrics':>12} {'varlen':>12} {'truth':>12} | match"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['world']:>2} {r['batch']:>5} {r['drop_last']!s:>9} {r['shuffle']!s:>7} | {r['seen']:>5} "
            f"{r['kept']:>5} {r['missing']:>4} | {_fmt(r['naive']):>12} {_fmt(r['torchmetrics']):>12} "
            f"{_fmt(r['varlen']):>12} {r['truth']:.10f} | {'yes' if r['ok'] else 'NO'}"
        )
    worst = {
        key: max((abs(r[key] - full) for r in rows if r[key] is not None), default=0.0)
        for key in ("naive", "torchmetrics", "varlen")
    }
    print(
        f"\nlargest distance from the all-samples value: naive gather {worst['naive']:.2e}, torchmetrics "
        f"{worst['torchmetrics']:.2e}, varlen {worst['varlen']:.2e} (varlen differs only where drop_last=True "
        "really dropped samples, and then equals the truth on what was evaluated)"
    )
    failed = [r for r in rows if not r["ok"]]
    print(f"varlen matched the truth in {len(rows) - len(failed)} of {len(rows)} configurations")
    if args.plot:
        plot(rows, full, args.num_samples, args.plot)
        print(f"figure saved to {args.plot}")
    return 1 if failed else 0


def plot(rows: list[dict[str, Any]], full: float, n: int, path: str) -> None:
    """AUROC against world size, one panel per drop_last, for the shuffled sampler and the first batch size."""
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    batch = rows[0]["batch"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, drop_last in zip(axes, (False, True), strict=True):
        chosen = sorted(
            (r for r in rows if r["drop_last"] == drop_last and r["shuffle"] and r["batch"] == batch),
            key=lambda r: r["world"],
        )
        worlds = [r["world"] for r in chosen]
        styles = {
            "naive": ("naive all_gather", "o-"),
            "torchmetrics": ("torchmetrics BinaryAUROC", "s--"),
            "varlen": ("VarlenAUROC(dataset_size=N)", "D-"),
        }
        for key, (label, style) in styles.items():
            ax.plot(worlds, [r[key] if r[key] is not None else float("nan") for r in chosen], style, label=label)
        ax.axhline(full, color="black", linestyle=":", label=f"single process, all {n} samples")
        ax.set_title(f"DistributedSampler(shuffle=True, drop_last={drop_last})")
        ax.set_xlabel("world size")
        ax.set_xticks(worlds)
    axes[0].set_ylabel("validation AUROC")
    axes[1].legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
