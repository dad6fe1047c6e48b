"""Weights and the uncertainty classes on real gloo ranks: padded, shuffled DistributedSampler shards at W = 1-4 give
the single-process value (scikit-learn for the weights); the bootstrap is identical bit for bit at W = 1, 2, 3.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _dist import DistPool
from _sampler import sampler_indices
from sklearn.metrics import average_precision_score, roc_auc_score

from torchmetrics_varlen import (
    VarlenAUROC,
    VarlenAUROCComparison,
    VarlenAUROCInterval,
    VarlenAveragePrecision,
    VarlenBootstrap,
    VarlenCollection,
)
from torchmetrics_varlen.functional import auroc_compare, auroc_interval

pytestmark = pytest.mark.distributed

N = 53


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(12)
    target = torch.randint(0, 2, (N,), generator=gen)
    preds = (torch.rand(N, generator=gen) + 0.4 * target).clamp(max=1)
    other = (torch.rand(N, generator=gen) + 0.6 * target).clamp(max=1)
    weight = torch.rand(N, generator=gen, dtype=torch.float64) * 2
    weight[::9] = 0
    return preds, other, target, weight


def _make(kind: str, mode: str) -> Any:
    size = N if mode != "ids" else None
    extra: dict[str, Any] = {"compute_on_rank": 0} if mode == "on_rank" else {}
    extra.update({"compute_sharded": True} if mode == "sharded" else {})
    return {
        "auroc": lambda: VarlenAUROC(dataset_size=size, sync_timeout=30, **extra),
        "ap": lambda: VarlenAveragePrecision(dataset_size=size, sync_timeout=30, **extra),
        "auroc16": lambda: VarlenAUROC(thresholds=torch.float16, dataset_size=size, sync_timeout=30),
        "interval": lambda: VarlenAUROCInterval(dataset_size=size, sync_timeout=30, **extra),
        "compare": lambda: VarlenAUROCComparison(dataset_size=size, sync_timeout=30, **extra),
        "boot": lambda: VarlenBootstrap(VarlenAUROC(dataset_size=size, sync_timeout=30, **extra), num_bootstraps=50),
        "boot_ap": lambda: VarlenBootstrap(VarlenAveragePrecision(dataset_size=size, **extra), num_bootstraps=50),
    }[kind]()


def case_run(rank: int, world: int, kind: str, mode: str, batch: int, collection: bool) -> Any:
    """Feed this rank's DistributedSampler shard (shuffled, padded) in batches; return the computed value."""
    preds, other, target, weight = _data()
    metric = _make(kind, mode)
    if collection:
        metric = VarlenCollection({"m": metric}, dataset_size=N if mode != "ids" else None, sync_timeout=30)
    index = torch.tensor(sampler_indices(N, world, rank, shuffle=True, drop_last=False, seed=4))
    for at in range(0, index.numel(), batch):
        rows = index[at : at + batch]
        scores = torch.stack([preds[rows], other[rows]], 1) if kind == "compare" else preds[rows]
        named: dict[str, Any] = {"sample_ids": rows} if mode == "ids" else {}
        if kind in ("auroc", "ap", "auroc16"):
            named["sample_weight"] = weight[rows]
        metric.update(scores, target[rows], **named)
    value = metric.compute()
    value = value["m"] if collection else value
    return tuple(float(v) for v in value) if isinstance(value, tuple) else float(value)


def _expected(kind: str) -> Any:
    preds, other, target, weight = _data()
    if kind == "auroc":
        return roc_auc_score(target, preds, sample_weight=weight)
    if kind == "ap":
        return average_precision_score(target, preds, sample_weight=weight)
    if kind == "auroc16":
        return roc_auc_score(target, preds.half().double(), sample_weight=weight)
    if kind == "interval":
        return tuple(float(v) for v in auroc_interval(preds, target))
    return tuple(float(v) for v in auroc_compare(preds, other, target))


CASES = [
    ("auroc", "dataset_size"),
    ("auroc", "ids"),
    ("auroc", "on_rank"),
    ("auroc", "sharded"),
    ("ap", "sharded"),
    ("ap", "ids"),
    ("auroc16", "dataset_size"),
    ("interval", "dataset_size"),
    ("interval", "ids"),
    ("interval", "on_rank"),
    ("compare", "dataset_size"),
    ("compare", "ids"),
    ("compare", "on_rank"),
]


@pytest.mark.parametrize(("kind", "mode"), CASES)
def test_weighted_and_delong_metrics_equal_one_process_at_every_world_size(
    pool: DistPool, kind: str, mode: str
) -> None:
    expected = _expected(kind)
    for world in (1, 2, 3, 4):
        for value in pool.values(case_run, world, kind, mode, 5, False):
            assert value == pytest.approx(expected, abs=1e-6, rel=1e-9), (world, value)


@pytest.mark.parametrize(("kind", "mode"), [("boot", "dataset_size"), ("boot", "ids"), ("boot_ap", "on_rank")])
def test_bootstrap_is_identical_bit_for_bit_at_world_sizes_1_2_3(pool: DistPool, kind: str, mode: str) -> None:
    values = {
        v for world in (1, 2, 3) for batch in (4, 9) for v in pool.values(case_run, world, kind, mode, batch, False)
    }
    assert len(values) == 1
    value, lower, upper, std = values.pop()
    assert lower < upper
    assert std > 0


@pytest.mark.parametrize("kind", ["auroc", "interval", "boot"])
def test_the_new_metrics_sync_inside_a_collection(pool: DistPool, kind: str) -> None:
    alone = pool.values(case_run, 3, kind, "dataset_size", 5, False)
    together = pool.values(case_run, 3, kind, "dataset_size", 5, True)
    assert alone == together
