"""MetricCollection: AUROC, AP, curves and best F1 share one compute group and sync once per group."""

from __future__ import annotations

from typing import Any

import pytest
import torch.distributed as dist
from _data import scores_and_labels
from _dist import DistPool
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score
from torchmetrics import MetricCollection

from torchmetrics_varlen import (
    VarlenAUROC,
    VarlenAveragePrecision,
    VarlenBestF1,
    VarlenPrecisionRecallCurve,
    VarlenROC,
)

pytestmark = pytest.mark.distributed

_COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_gather_single", "all_reduce", "broadcast", "barrier")


def _counting(fn: Any) -> tuple[Any, dict[str, int]]:
    """Run ``fn`` counting torch.distributed collectives and guard check-ins (both still run)."""
    from torchmetrics_varlen._dist import exchange

    counts = {"collectives": 0, "check_ins": 0}
    originals = {name: getattr(dist, name) for name in _COLLECTIVES}
    original_check_in = exchange.check_in

    def wrap(original: Any, key: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[key] += 1
            return original(*args, **kwargs)

        return wrapper

    for name, original in originals.items():
        setattr(dist, name, wrap(original, "collectives"))
    exchange.check_in = wrap(original_check_in, "check_ins")
    try:
        value = fn()
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
        exchange.check_in = original_check_in
    return value, counts


def case_collection(rank: int, world: int, compute_groups: bool, binned_too: bool) -> dict[str, Any]:
    preds, target = scores_and_labels(90, 3)
    metrics: dict[str, Any] = {
        "auroc": VarlenAUROC(dataset_size=90),
        "ap": VarlenAveragePrecision(dataset_size=90),
        "roc": VarlenROC(dataset_size=90),
        "pr": VarlenPrecisionRecallCurve(dataset_size=90),
        "f1": VarlenBestF1(dataset_size=90),
    }
    if binned_too:
        metrics["auroc_binned"] = VarlenAUROC(thresholds=21, dataset_size=90)
        metrics["ap_binned"] = VarlenAveragePrecision(thresholds=21, dataset_size=90)
    collection = MetricCollection(metrics, compute_groups=compute_groups)
    # A padded interleaved shard: rank r sees positions r, r + W, ... (31 rows per rank at W=3: 3 padding rows).
    rows = -(-90 // world)
    idx = [(j * world + rank) % 90 for j in range(rows)]
    for start in range(0, rows, 8):
        part = idx[start : start + 8]
        collection.update(preds[part].float(), target[part])
    values, counts = _counting(collection.compute)
    return {
        "counts": counts,
        "groups": len(collection.compute_groups) if compute_groups else len(metrics),
        "auroc": float(values["auroc"]),
        "ap": float(values["ap"]),
        "f1": float(values["f1"][0]),
        "roc_points": int(values["roc"][0].numel()),
        "binned": float(values["auroc_binned"]) if binned_too else None,
    }


@pytest.mark.parametrize("world", [2, 3])
def test_one_exchange_per_compute_group(pool: DistPool, world: int) -> None:
    preds, target = scores_and_labels(90, 3)
    p = preds.float().double()
    for out in pool.values(case_collection, world, True, False):
        assert out["groups"] == 1
        # One exchange: one check-in and its fixed-size metadata all-gather, then one broadcast per rank (gloo),
        # for the whole group's states.
        assert out["counts"] == {"collectives": 1 + world, "check_ins": 1}
        assert out["auroc"] == pytest.approx(f32(roc_auc_score(target, p)), abs=1e-12)
        assert out["ap"] == pytest.approx(f32(average_precision_score(target, p)), abs=1e-12)
    for out in pool.values(case_collection, world, True, True):
        assert out["groups"] == 2  # exact states and binned states cannot be shared
        assert out["counts"] == {"collectives": 2 + world + 1, "check_ins": 2}  # + one all-reduce of binned counts
    for out in pool.values(case_collection, world, False, False):
        assert out["counts"] == {"collectives": 5 * (1 + world), "check_ins": 5}  # without compute groups: per metric
        assert out["auroc"] == pytest.approx(f32(roc_auc_score(target, p)), abs=1e-12)
