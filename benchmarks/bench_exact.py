"""Exact AUROC / AP on one process: this package vs torchmetrics, scikit-learn and a bare torch.sort.

Every variant runs on the same data in the same session; times are medians, memory is the peak RSS above the
inputs during the first call at that N, measured in a fresh subprocess per (variant, N) (after a warm-up call on
1,000 samples) so allocator caches do not hide or leak allocations. The scores are probabilities in [0, 1], as
after a sigmoid; "varlen auroc (logits)" ranks the same data as logits (negative scores need 8-byte sort keys).
"/floor" divides by one NumPy sort of the packed int32 keys (``np.sort``, the exact metrics' own sort), timed again
in the same subprocess right after the variant.

    python benchmarks/bench_exact.py --sizes 100000,1000000,10000000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

FLOOR = "numpy sort of packed int32 keys"
VARIANTS = [
    "torch.sort",
    FLOOR,
    "varlen auroc",
    "varlen ap",
    "varlen auroc (logits)",
    "VarlenAUROC update+compute",
    "varlen auroc bf16 (histogram)",
    "torchmetrics auroc",
    "BinaryAUROC update+compute",
    "sklearn roc_auc_score",
]


def _data(n: int) -> tuple[Any, Any]:
    import torch

    gen = torch.Generator().manual_seed(0)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = torch.rand(n, generator=gen) * 0.8 + 0.2 * target
    return preds, target


def _variant(name: str, preds: Any, target: Any) -> Any:
    import torch

    if name == "torch.sort":
        return lambda: torch.sort(preds, descending=True)
    if name == FLOOR:  # the floor of the exact metrics: one sort of the keys they sort (a sorted copy, as np.sort)
        import numpy as np

        from torchmetrics_varlen.functional._sort import encode

        keys = encode(preds, target).numpy()
        return lambda: np.sort(keys)
    if name == "varlen auroc":
        from torchmetrics_varlen.functional import auroc

        return lambda: auroc(preds, target, validate_args=False)
    if name == "varlen auroc (logits)":
        from torchmetrics_varlen.functional import auroc

        logits = torch.logit(preds.clamp(1e-6, 1 - 1e-6))  # negative scores, ranked raw: the wide (8-byte) keys
        return lambda: auroc(logits, target, validate_args=False, normalization=None)
    if name == "varlen ap":
        from torchmetrics_varlen.functional import average_precision

        return lambda: average_precision(preds, target, validate_args=False)
    if name == "VarlenAUROC update+compute":
        from torchmetrics_varlen import VarlenAUROC

        def run() -> Any:
            metric = VarlenAUROC(validate_args=False)
            metric.update(preds, target)
            return metric.compute()

        return run
    if name == "varlen auroc bf16 (histogram)":
        from torchmetrics_varlen import VarlenAUROC

        def run16() -> Any:
            metric = VarlenAUROC(thresholds=torch.bfloat16, validate_args=False)
            metric.update(preds, target)
            return metric.compute()

        return run16
    return _competitor(name, preds, target)


def _competitor(name: str, preds: Any, target: Any) -> Any:
    if name == "torchmetrics auroc":
        from torchmetrics.functional.classification import binary_auroc

        return lambda: binary_auroc(preds, target, validate_args=False)
    if name == "BinaryAUROC update+compute":
        from torchmetrics.classification import BinaryAUROC

        def run_tm() -> Any:
            metric = BinaryAUROC(validate_args=False)
            metric.update(preds, target)
            return metric.compute()

        return run_tm
    if name == "sklearn roc_auc_score":
        from sklearn.metrics import roc_auc_score

        p, t = preds.numpy(), target.numpy()
        return lambda: roc_auc_score(t, p)
    raise ValueError(name)


def one(name: str, n: int, repeats: int, threads: int | None = None) -> dict[str, Any]:
    """Measure one variant at one size (run in its own process)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    from _measure import PeakRSS, median_time

    if threads:
        torch.set_num_threads(threads)

    small = _data(1000)
    _variant(name, *small)()  # imports and lazy initialisation, on small data: the allocator has no N-sized blocks yet
    preds, target = _data(n)
    fn = _variant(name, preds, target)
    with PeakRSS() as mem:
        fn()
    seconds = median_time(fn, repeats)
    # The floor measured again in this process, right after: the ratio to it compares two times taken under the same
    # load (the machine is shared), not across processes.
    floor = median_time(_variant(FLOOR, preds, target), repeats) if name != FLOOR else seconds
    input_bytes = preds.numel() * preds.element_size() + target.numel() * target.element_size()
    return {
        "variant": name,
        "n": n,
        "seconds": seconds,
        "floor_seconds": floor,
        "extra_bytes": mem.extra,
        "input_bytes": input_bytes,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    """Run every variant at every size; print a table with ratios to torch.sort and torchmetrics."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--one", nargs=2, metavar=("VARIANT", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's); the package sorts and sums in parts on that many threads,"
        " the floor is one single-threaded NumPy sort",
    )
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.repeats, args.threads)))
        return
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        for name in args.variants.split(","):
            cmd = [sys.executable, __file__, "--one", name, str(n), "--repeats", str(args.repeats)]
            cmd += ["--threads", str(args.threads)] if args.threads else []
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"{'N':>9}  {'variant':32} {'seconds':>9} {'/sort':>6} {'/torchmetrics':>13} {'/floor':>6} {'extra MiB':>9}"
        f" {'/input':>6}"
    )
    for row in rows:
        same = [r for r in rows if r["n"] == row["n"]]
        sort = next((r["seconds"] for r in same if r["variant"] == "torch.sort"), float("nan"))
        tm = next((r["seconds"] for r in same if r["variant"] == "torchmetrics auroc"), float("nan"))
        print(
            f"{row['n']:>9}  {row['variant']:32} {row['seconds']:9.4f} {row['seconds'] / sort:6.2f} "
            f"{row['seconds'] / tm:13.2f} {row['seconds'] / row['floor_seconds']:6.2f}"
            f" {row['extra_bytes'] / 2**20:9.1f} "
            f"{row['extra_bytes'] / row['input_bytes']:6.2f}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
