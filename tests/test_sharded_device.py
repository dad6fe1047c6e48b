"""compute_sharded=True on the device path (CPU tensors under ``force_device_path()``): the one-process value, and a
number of host synchronisations per compute that does not grow with the number of samples.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import pytest
import torch
from _data import rank_slice, scores_and_labels
from _dist import DistPool
from _float32 import f32
from _syncs import HostSyncCounter
from sklearn.metrics import average_precision_score, roc_auc_score

from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision
from torchmetrics_varlen.functional._device import force_device_path

pytestmark = pytest.mark.distributed

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _data(n: int, seed: int, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``spread``: logits with few ties (wide keys); ``probs``: probabilities in [0, 1) (compact keys); ``ties``:
    scores on a coarse grid (many ties across ranks).
    """
    if kind == "ties":
        return scores_and_labels(n, seed, ties=True)
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = (torch.randn(n, generator=gen) + target).float().double()
    return (torch.sigmoid(preds) if kind == "probs" else preds), target


def _sharded_values(
    preds: torch.Tensor, target: torch.Tensor, *, device_path: bool, batches: int = 2, weighted: bool = False
) -> dict[str, Any]:
    """Each metric's sharded value on this rank, and the host syncs its compute made."""
    out: dict[str, Any] = {}
    for name, cls in (("auroc", VarlenAUROC), ("ap", VarlenAveragePrecision)):
        metric = cls(compute_sharded=True, sync_timeout=30, normalization=None)
        for x, y in zip(preds.chunk(batches), target.chunk(batches), strict=True):
            if weighted:
                metric.update(x, y, weight=torch.ones(len(x), dtype=torch.float64))
            else:
                metric.update(x, y)
        with warnings.catch_warnings(), contextlib.ExitStack() as stack:
            warnings.simplefilter("ignore")  # one class only on a rank is fine
            if device_path:
                stack.enter_context(force_device_path())
            syncs = stack.enter_context(HostSyncCounter())
            value = metric.compute()
        out[name] = value.item()
        out[name + "_syncs"] = syncs.total
        out[name + "_counts"] = dict(syncs.counts)
    return out


def case_device(rank: int, world: int, n: int, seed: int, pattern: str, dtype: str, kind: str) -> dict[str, Any]:
    preds, target = _data(n, seed, kind)
    part = rank_slice(n, world, rank, pattern)
    x, y = preds[part].to(DTYPES[dtype]), target[part]
    return {
        "device": _sharded_values(x, y, device_path=True),
        "cpu": _sharded_values(x, y, device_path=False),
    }


def case_syncs(rank: int, world: int, per_rank: int, batches: int, dtype: str, kind: str) -> dict[str, Any]:
    preds, target = _data(per_rank * world, 3, kind)
    part = rank_slice(per_rank * world, world, rank, "even")
    return _sharded_values(preds[part].to(DTYPES[dtype]), target[part], device_path=True, batches=batches)


def _single(preds: torch.Tensor, target: torch.Tensor) -> tuple[float, float]:
    """The one-process values of this package (CPU path), the reference for bits."""
    out = []
    for cls in (VarlenAUROC, VarlenAveragePrecision):
        metric = cls(normalization=None)
        metric.update(preds, target)
        out.append(metric.compute().item())
    return out[0], out[1]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize(
    ("pattern", "dtype", "kind"),
    [
        ("even", "float32", "probs"),  # compact keys
        ("uneven", "float32", "spread"),  # wide keys
        ("uneven", "float64", "spread"),  # scores and labels move, int64 codes merged
        ("first_empty", "float16", "ties"),  # ties across ranks, an empty rank
        ("one_rank", "float32", "ties"),
        ("even", "bfloat16", "probs"),
        ("even", "float64", "ties"),
    ],
)
def test_device_path_is_the_one_process_value(pool: DistPool, world: int, pattern: str, dtype: str, kind: str) -> None:
    """Under ``force_device_path()`` in every rank: AUROC the one-process value bit for bit, AP to float32 (here
    the same bits too), both equal to the CPU path's sharded value and to scikit-learn's.
    """
    n, seed = 3001, 7
    preds, target = _data(n, seed, kind)
    reference = preds.to(DTYPES[dtype])
    single_auroc, single_ap = _single(reference, target)
    outcomes = pool.values(case_device, world, n, seed, pattern, dtype, kind)
    for out in outcomes:
        device, cpu = out["device"], out["cpu"]
        assert device["auroc"] == single_auroc == cpu["auroc"]
        assert device["ap"] == f32(single_ap) == cpu["ap"]
        assert device["auroc"] == pytest.approx(f32(roc_auc_score(target, reference.double())), abs=1e-7)
        assert device["ap"] == pytest.approx(f32(average_precision_score(target, reference.double())), abs=1e-7)
        assert (device["auroc"], device["ap"]) == (outcomes[0]["device"]["auroc"], outcomes[0]["device"]["ap"])


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize(("dtype", "kind"), [("float32", "probs"), ("float32", "spread"), ("float64", "spread")])
def test_device_path_host_syncs_do_not_grow_with_n(pool: DistPool, world: int, dtype: str, kind: str) -> None:
    """The host reads of one sharded compute on the device path: the same at 2,000 and 200,000 samples per rank,
    and with the 200,000 stored in 50 batches (the chunked pass made one or more per 65,536 keys).
    """
    counts = []
    for per_rank, batches in ((2_000, 2), (200_000, 2), (200_000, 50)):
        outcomes = pool.values(case_syncs, world, per_rank, batches, dtype, kind)
        counts.append([(out["auroc_syncs"], out["ap_syncs"]) for out in outcomes])
    assert counts[0] == counts[1] == counts[2], counts
    assert max(max(pair) for pair in counts[0]) <= 16, counts  # a handful per compute: O(1) here, at most O(W)
