"""compute_on_rank: one rank receives the data and computes, every rank gets the value."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _data import rank_slice, scores_and_labels
from _dist import DistPool, count_syncs
from _float32 import f32
from sklearn.metrics import roc_auc_score

from torchmetrics_varlen import VarlenAUROC, VarlenGroupAUROC, VarlenROC

pytestmark = pytest.mark.distributed


def case_compute_on_rank(rank: int, world: int, dst: int) -> dict[str, Any]:
    preds, target = scores_and_labels(97, 4)
    part = rank_slice(97, world, rank, "first_empty")
    ids = torch.arange(97)[part]
    auroc = VarlenAUROC(compute_on_rank=dst, sync_timeout=20)
    curve = VarlenROC(compute_on_rank=dst, sync_timeout=20)
    for metric in (auroc, curve):
        metric.update(preds[part], target[part], sample_ids=ids)
        metric.update(preds[part][:3], target[part][:3], sample_ids=ids[:3])  # duplicates, dropped by id
    names = ("gather", "all_gather", "all_gather_single", "all_gather_into_tensor", "broadcast", "batch_isend_irecv")
    value, calls = count_syncs(lambda: float(auroc.compute()), names, per_name=True)
    fpr, tpr, _ = curve.compute()
    report = auroc.sync_report
    assert report is not None
    return {
        "value": value,
        "calls": calls,
        "tpr_points": int(tpr.numel()),
        "kept": report.kept,
        "dropped": report.duplicates_dropped,
        "cached": float(auroc.compute()) == value,
    }


@pytest.mark.parametrize(("world", "dst"), [(2, 0), (3, 1), (4, 3)])
def test_compute_on_one_rank_broadcasts_the_exact_value(pool: DistPool, world: int, dst: int) -> None:
    preds, target = scores_and_labels(97, 4)
    expected = roc_auc_score(target, preds)
    outcomes = pool.values(case_compute_on_rank, world, dst)
    for rank, out in enumerate(outcomes):
        assert out["value"] == pytest.approx(f32(expected), abs=1e-12)
        # The data goes to one rank only, point to point: one batch of sends / receives on every rank that sends or
        # receives (rank 0 holds no rows: it sends nothing unless it is the destination).
        assert out["calls"].get("batch_isend_irecv", 0) == (0 if rank == 0 and dst != 0 else 1)
        assert "gather" not in out["calls"]
        assert "all_gather" not in out["calls"]
        # the fixed-size metadata of the check-in (no data), whichever way it reaches the backend
        gathers = ("all_gather_single", "all_gather_into_tensor", "collectives.all_gather_into")
        assert sum(out["calls"].get(name, 0) for name in gathers) == 1
        assert out["kept"] == 97
        assert out["cached"]
    assert len({out["tpr_points"] for out in outcomes}) == 1
    assert len({out["dropped"] for out in outcomes}) == 1


def case_bad_rank(rank: int, world: int) -> str:
    metric = VarlenAUROC(compute_on_rank=5, sync_timeout=20)
    metric.update(torch.tensor([0.1, 0.9]), torch.tensor([0, 1]))
    try:
        metric.compute()
    except ValueError as err:
        return str(err)
    return "no error"


def test_compute_on_a_rank_outside_the_group_raises_on_every_rank(pool: DistPool) -> None:
    for text in pool.values(case_bad_rank, 2):
        assert "compute_on_rank=5 but the process group has 2 ranks" in text


def test_bad_compute_on_rank_argument() -> None:
    with pytest.raises(ValueError, match="`compute_on_rank` to be a rank \\(int >= 0\\) or None, but got -1"):
        VarlenAUROC(compute_on_rank=-1)


def case_group_detail_on_one_rank(rank: int, world: int) -> dict[str, Any]:
    preds, target = scores_and_labels(60, 9)
    groups = torch.arange(60) % 5
    part = rank_slice(60, world, rank, "uneven")
    metric = VarlenGroupAUROC(return_per_group=True, compute_on_rank=world - 1, sync_timeout=20)
    metric.update(preds[part].float(), target[part], groups[part])
    detail = metric.compute()
    return {
        "type": type(detail).__name__,
        "value": float(detail.value),
        "groups": detail.groups.tolist(),
        "per_group": detail.per_group.tolist(),
        "skipped": int(detail.num_skipped),
    }


def test_group_auroc_detail_arrives_as_its_named_tuple(pool: DistPool) -> None:
    """The per-group detail, computed on the last rank, reaches every rank as a GroupAUROC (tensors, no pickle)."""
    preds, target = scores_and_labels(60, 9)
    groups = torch.arange(60) % 5
    per_group = [f32(roc_auc_score(target[groups == g], preds[groups == g].float().double())) for g in range(5)]
    for out in pool.values(case_group_detail_on_one_rank, 3):
        assert out["type"] == "GroupAUROC"
        assert out["groups"] == list(range(5))
        assert out["per_group"] == pytest.approx(per_group, abs=1e-7)
        assert out["skipped"] == 0
