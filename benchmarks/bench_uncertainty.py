"""Cost of DeLong's interval and paired test against the AUROC alone, measured in the same process.

``auroc_interval`` reuses the AUROC's one sort (counts per distinct score, then O(distinct scores) more);
``auroc_compare`` sorts both models and looks every sample's score up in its model's distinct scores (O(N log N)).
The ratios print how much each costs over ``auroc`` (and over two ``auroc`` calls for the comparison), on the
same data; times are medians.

    python benchmarks/bench_uncertainty.py --sizes 1000000,10000000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import median_time  # noqa: E402

from torchmetrics_varlen import VarlenAUROC, VarlenBootstrap  # noqa: E402
from torchmetrics_varlen.functional import auroc, auroc_compare, auroc_interval  # noqa: E402


def _data(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    target = torch.randint(0, 2, (n,), generator=gen)
    a = torch.rand(n, generator=gen) * 0.8 + 0.2 * target
    b = (0.7 * a + 0.3 * torch.rand(n, generator=gen)).clamp(0, 1)
    return a, b, target


def _compute_time(metric: VarlenAUROC | VarlenBootstrap, a: torch.Tensor, target: torch.Tensor, repeats: int) -> float:
    """Median time of ``compute()`` of a metric holding ``a`` (the cache reset before every call)."""
    metric.update(a, target)

    def run() -> None:
        metric._computed = None
        metric.compute()

    return median_time(run, repeats)


def _row(n: int, repeats: int, num_bootstraps: int) -> dict[str, float]:
    """Median times at ``n`` and the ratios."""
    a, b, target = _data(n)
    t_compute = _compute_time(VarlenAUROC(validate_args=False), a, target, repeats)
    boot = VarlenBootstrap(VarlenAUROC(dataset_size=n, validate_args=False), num_bootstraps=num_bootstraps)
    t_boot = _compute_time(boot, a, target, 1)
    t_auroc = median_time(lambda: auroc(a, target, validate_args=False), repeats)
    t_interval = median_time(lambda: auroc_interval(a, target, validate_args=False), repeats)
    t_compare = median_time(lambda: auroc_compare(a, b, target, validate_args=False), repeats)
    return {
        "n": n,
        "auroc_s": t_auroc,
        "interval_s": t_interval,
        "compare_s": t_compare,
        "interval_over_auroc": t_interval / t_auroc,
        "compare_over_two_auroc": t_compare / (2 * t_auroc),
        "compute_s": t_compute,
        "bootstrap_s": t_boot,
        "num_bootstraps": num_bootstraps,
        "bootstrap_over_compute": t_boot / t_compute,
    }


def main() -> None:
    """Print the times and ratios at every ``--sizes`` N."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000", help="comma-separated N")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-bootstraps", type=int, default=100, help="resamples B of the bootstrap")
    parser.add_argument("--json", action="store_true", help="print one JSON line per N")
    args = parser.parse_args()
    for n in (int(s) for s in args.sizes.split(",")):
        row = _row(n, args.repeats, args.num_bootstraps)
        t_auroc, t_interval, t_compare = row["auroc_s"], row["interval_s"], row["compare_s"]
        if args.json:
            print(json.dumps(row))
        else:
            print(
                f"N={n:>10,}  auroc {t_auroc * 1e3:9.1f} ms  interval {t_interval * 1e3:9.1f} ms"
                f" ({row['interval_over_auroc']:.2f}x auroc)  compare {t_compare * 1e3:9.1f} ms"
                f" ({row['compare_over_two_auroc']:.2f}x two auroc calls)  VarlenAUROC.compute()"
                f" {row['compute_s'] * 1e3:9.1f} ms  bootstrap B={args.num_bootstraps}"
                f" {row['bootstrap_s'] * 1e3:9.1f} ms"
                f" ({row['bootstrap_over_compute']:.1f}x compute)"
            )


if __name__ == "__main__":
    main()
