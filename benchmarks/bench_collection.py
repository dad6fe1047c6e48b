"""A collection of AUROC + AP + F1 + Accuracy + RetrievalMAP on W CPU ranks (gloo): exchanges and time per compute().

Three ways to sync the same five metrics, fed the same batches (even shards, so that torchmetrics cannot hang):

- ``torchmetrics``: ``MetricCollection`` of ``BinaryAUROC``, ``BinaryAveragePrecision``, ``BinaryF1Score``,
  ``BinaryAccuracy``, ``RetrievalMAP`` (compute groups on): every metric gathers every state at its own compute();
- ``Varlen each``: the same ``MetricCollection`` with ``VarlenAUROC``, ``VarlenAveragePrecision`` and the other three
  wrapped in ``Varlen``: one guarded exchange per compute group;
- ``VarlenCollection``: the same five metrics in one ``VarlenCollection``: one check-in and one exchange in all.

Counted per ``compute()``: collectives (every call of ``torch.distributed``'s all_gather, all_gather_into_tensor,
all_reduce, broadcast, barrier, ...) and guard check-ins. Timed, median on every rank: ``compute()`` of the whole
collection (caches cleared), and its sync alone (``sync()`` + ``unsync()`` of every metric, after the joint fetch
for ``VarlenCollection``).

    python benchmarks/bench_collection.py --world-sizes 2,4 --num-samples 200000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

VARIANTS = ["torchmetrics", "Varlen each", "VarlenCollection"]
_COLLECTIVES = (
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_gather_single",
    "all_reduce",
    "all_to_all_single",
    "barrier",
    "batch_isend_irecv",
    "broadcast",
    "gather",
)


def _collection(variant: str) -> Any:
    from torchmetrics import MetricCollection
    from torchmetrics.classification import BinaryAccuracy, BinaryAUROC, BinaryAveragePrecision, BinaryF1Score
    from torchmetrics.retrieval import RetrievalMAP

    from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenAveragePrecision, VarlenCollection

    plain = {"f1": BinaryF1Score(), "acc": BinaryAccuracy(), "map": RetrievalMAP()}
    if variant == "torchmetrics":
        return MetricCollection({"auroc": BinaryAUROC(), "ap": BinaryAveragePrecision(), **plain})
    ours = {"auroc": VarlenAUROC(sync_timeout=600), "ap": VarlenAveragePrecision(sync_timeout=600)}
    if variant == "Varlen each":
        return MetricCollection({**ours, **{k: Varlen(m, sync_timeout=600) for k, m in plain.items()}})
    return VarlenCollection({**ours, **plain}, sync_timeout=600)


def _counting() -> tuple[dict[str, int], Any]:
    """Count collectives and check-ins from now on; the returned function undoes the patches."""
    from torchmetrics_varlen._dist import metadata

    counts = {"collectives": 0, "check_ins": 0}
    originals = {name: getattr(dist, name) for name in _COLLECTIVES if hasattr(dist, name)}
    original_check_in = metadata.check_in

    def wrap(original: Any, key: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[key] += 1
            return original(*args, **kwargs)

        return wrapper

    for name, original in originals.items():
        setattr(dist, name, wrap(original, "collectives"))
    metadata.check_in = wrap(original_check_in, "check_ins")

    def undo() -> None:
        for name, original in originals.items():
            setattr(dist, name, original)
        metadata.check_in = original_check_in

    return counts, undo


def _rank(rank: int, world: int, port: int, n: int, batch: int, repeats: int, out: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from _measure import init_gloo

    init_gloo(rank, world, port)
    from _measure import median_time

    gen = torch.Generator().manual_seed(rank)
    local = n // world
    target = torch.randint(0, 2, (local,), generator=gen)
    preds = torch.rand(local, generator=gen) * 0.8 + 0.2 * target
    queries = torch.randint(0, 100, (local,), generator=gen)
    row: dict[str, Any] = {"rank": rank, "world": world, "n": n, "batches": -(-local // batch)}
    for variant in VARIANTS:
        collection = _collection(variant)
        for start in range(0, local, batch):
            part = slice(start, start + batch)
            collection.update(preds[part], target[part], indexes=queries[part])
        metrics = list(collection.values(copy_state=False))

        def compute(collection: Any = collection, metrics: list[Any] = metrics) -> Any:
            for metric in metrics:
                metric._computed = None
            return collection.compute()

        def sync(collection: Any = collection, metrics: list[Any] = metrics) -> None:
            for metric in metrics:
                metric._computed = None
            fetched = collection._sync_members() if hasattr(collection, "_sync_members") else []
            for metric in metrics:
                metric.sync()
                metric.unsync()
            for metric in fetched:
                metric._pending_sync = None

        dist.barrier()
        counts, undo = _counting()
        values = compute()
        undo()
        row[variant] = {
            **counts,
            "values": {k: float(v) for k, v in values.items()},
            "compute_s": median_time(compute, repeats),
            "sync_s": median_time(sync, repeats),
        }
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(row, fh)
    dist.destroy_process_group()


def main() -> None:
    """Spawn each world size; print the exchanges and times per compute(), and the values of rank 0."""
    from _measure import free_port

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--num-samples", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    for world in [int(w) for w in args.world_sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            spawn_args = (world, free_port(), args.num_samples, args.batch_size, args.repeats, tmp)
            mp.spawn(_rank, args=spawn_args, nprocs=world, join=True)
            for r in range(world):
                with open(os.path.join(tmp, f"rank{r}.json")) as fh:
                    rows.append(json.load(fh))
    print(f"N = {args.num_samples}, batch {args.batch_size}; per compute(): collectives, check-ins, seconds (median)")
    print(f"{'W':>2} {'rank':>4} {'variant':<17} {'coll.':>6} {'check-ins':>9} {'compute s':>9} {'sync s':>8} vs tm")
    for row in rows:
        tm = row["torchmetrics"]
        for variant in VARIANTS:
            r = row[variant]
            print(
                f"{row['world']:>2} {row['rank']:>4} {variant:<17} {r['collectives']:>6} {r['check_ins']:>9}"
                f" {r['compute_s']:9.4f} {r['sync_s']:8.4f} {r['sync_s'] / tm['sync_s']:6.2f}"
            )
    print("\nValues of rank 0:")
    for row in rows:
        if row["rank"] == 0:
            for variant in VARIANTS:
                values = ", ".join(f"{k} {v:.6f}" for k, v in sorted(row[variant]["values"].items()))
                print(f"  W={row['world']} {variant}: {values}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
