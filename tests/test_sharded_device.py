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
from torchmetrics_varlen._core import sharded as _sharded
from torchmetrics_varlen.functional._device import force_device_path
from torchmetrics_varlen.functional._ranking import rank_sums
from torchmetrics_varlen.functional._sort import SortedKeys

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


def case_tasks(rank: int, world: int, n: int, task: str) -> dict[str, Any]:
    """Multiclass (one sample sort per class) and duplicate sample ids (routed by id first), both paths."""
    gen = torch.Generator().manual_seed(5)
    ids = torch.arange(n)
    if task == "multiclass":
        preds, target = torch.softmax(torch.randn(n, 3, generator=gen), 1), torch.randint(0, 3, (n,), generator=gen)
        kwargs: dict[str, Any] = {"task": "multiclass", "num_classes": 3}
    else:
        preds, target = scores_and_labels(n, 5, ties=True)
        preds, kwargs = preds.float(), {}
    mine = ids[rank::world]
    out: dict[str, Any] = {}
    for path in ("device", "cpu"):
        for name, cls in (("auroc", VarlenAUROC), ("ap", VarlenAveragePrecision)):
            metric = cls(compute_sharded=True, sync_timeout=30, **kwargs)
            metric.update(preds[mine], target[mine], sample_ids=mine)
            metric.update(preds[mine][:3], target[mine][:3], sample_ids=mine[:3])  # duplicates
            with contextlib.ExitStack() as stack, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if path == "device":
                    stack.enter_context(force_device_path())
                syncs = stack.enter_context(HostSyncCounter())
                out[f"{path}-{name}"] = metric.compute().item()
            out[f"{path}-{name}-syncs"] = syncs.total
    return out


@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_device_path_with_sample_ids_and_classes(pool: DistPool, task: str) -> None:
    """Every duplicate dropped and every class summed on the device path: the CPU path's value, bit for bit, with
    a number of host reads that does not grow with N.
    """
    small, large = (pool.values(case_tasks, 2, n, task) for n in (1_000, 60_000))
    for outs in (small, large):
        for out in outs:
            assert out["device-auroc"] == out["cpu-auroc"]
            assert out["device-ap"] == out["cpu-ap"]
    assert [o["device-auroc-syncs"] for o in small] == [o["device-auroc-syncs"] for o in large]
    assert [o["device-ap-syncs"] for o in small] == [o["device-ap-syncs"] for o in large]


def _runs(world: int, seed: int, ties: bool) -> tuple[torch.Tensor, list[int]]:
    """``world`` sorted runs of compact keys end to end (some empty), as a rank receives them."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 400, (world,), generator=gen).tolist()
    lengths[seed % world] = 0
    high = 50 if ties else 1 << 30
    runs = [torch.sort(torch.randint(0, high, (m,), generator=gen, dtype=torch.int32)).values for m in lengths]
    return torch.cat(runs), lengths


@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("ties", [False, True])
def test_merge_of_received_runs_is_the_sorted_run_length_encoding(world: int, ties: bool) -> None:
    """The run-length encoded, merged runs: increasing keys whose counts per key are those of the sorted keys."""
    keys, lengths = _runs(world, world + 3 * ties, ties)
    merged, pos, neg = _sharded._merged(_sharded._key_runs(keys, lengths))
    assert bool((merged[1:] >= merged[:-1]).all())
    assert bool((pos[merged % 2 == 0] == 0).all())
    assert bool((neg[merged % 2 == 1] == 0).all())
    distinct, counts = torch.unique(keys, return_counts=True)
    total = torch.zeros_like(distinct, dtype=torch.int64).index_add_(0, torch.searchsorted(distinct, merged), pos + neg)
    assert torch.equal(total, counts)


@pytest.mark.parametrize("ties", [False, True])
def test_range_sums_split_area_is_exact(monkeypatch: pytest.MonkeyPatch, ties: bool) -> None:
    """The area summed in two parts (what a range of 1.5e9+ samples takes) is the one-part integer, and both are
    the CPU pass's sums over the same keys.
    """
    keys, lengths = _runs(3, 11, ties)
    merged, pos, neg = _sharded._merged(_sharded._key_runs(keys, lengths))
    totals = (int(pos.sum()) + 7, keys.numel() + 20)  # as if 7 positives and 13 negatives lay in lower ranges
    args = (merged >> 1, pos, neg, 7, 20, totals)
    whole = _sharded._range_sums(*args, area=True, ap=True, big=keys.numel())
    monkeypatch.setattr(_sharded, "_AREA_SPLIT", 0)
    monkeypatch.setattr(_sharded, "_AREA_SHIFT", 3)  # a high part that is not 0 at this size
    split = _sharded._range_sums(*args, area=True, ap=True, big=keys.numel())
    assert split[0].item() > 0
    assert (split[0].item() << _sharded._AREA_SHIFT) + split[1].item() == whole[1].item()
    assert whole[2].item() == split[2].item()
    expected = rank_sums(
        SortedKeys(torch.sort(keys).values, torch.float32, int(pos.sum()), True),
        pos_before=7,
        all_before=20,
        totals=totals,
    )
    assert whole[1].item() + 2 * 13 * int(pos.sum()) == expected.twice_area
    assert whole[2:3].view(torch.float64).item() == pytest.approx(expected.ap_sum, rel=1e-14)
