"""MetricCollection: AUROC, AP, curves and best F1 share one compute group, and their data moves once per group.

Every member still checks in (a few store operations and one fixed-size all-gather): torchmetrics forms compute
groups on each rank from that rank's own first batch, so only the ranks together can tell whether a member may
reuse the group's sync.
"""

from __future__ import annotations

from typing import Any

import pytest
from _data import scores_and_labels
from _dist import DistPool, count_syncs
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
    values, counts = count_syncs(collection.compute)
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
        # One data exchange for the whole group's states (one broadcast per rank on gloo); every one of the five
        # members checks in (its fixed-size metadata all-gather), and four of them reuse the first one's data.
        assert out["counts"] == {"collectives": 5 + world, "check_ins": 5}
        assert out["auroc"] == pytest.approx(f32(roc_auc_score(target, p)), abs=1e-12)
        assert out["ap"] == pytest.approx(f32(average_precision_score(target, p)), abs=1e-12)
    for out in pool.values(case_collection, world, True, True):
        assert out["groups"] == 2  # exact states and binned states cannot be shared
        # + two binned members (one all-reduce of their counts, once)
        assert out["counts"] == {"collectives": 7 + world + 1, "check_ins": 7}
    for out in pool.values(case_collection, world, False, False):
        assert out["counts"] == {"collectives": 5 * (1 + world), "check_ins": 5}  # without compute groups: per metric
        assert out["auroc"] == pytest.approx(f32(roc_auc_score(target, p)), abs=1e-12)


def case_empty_rank_forms_no_compute_group(rank: int, world: int) -> dict[str, Any]:
    """Rank 1 sees no data, so torchmetrics forms no compute group there, while rank 0 shares AUROC's states with AP."""
    preds, target = scores_and_labels(40, 8)
    collection = MetricCollection(
        {"auroc": VarlenAUROC(sync_timeout=5), "ap": VarlenAveragePrecision(sync_timeout=5)}, compute_groups=True
    )
    if rank == 0:
        collection.update(preds.float(), target)
    groups = len(collection.compute_groups)
    values = collection.compute()
    return {"groups": groups, "auroc": float(values["auroc"]), "ap": float(values["ap"])}


def test_ranks_with_different_compute_groups_still_agree(pool: DistPool) -> None:
    """The first rank reuses AUROC's sync for AP, the empty rank cannot: the data moves again, exact on both."""
    preds, target = scores_and_labels(40, 8)
    p = preds.float().double()
    outcomes = pool.values(case_empty_rank_forms_no_compute_group, 2)
    assert outcomes[0]["groups"] == 1
    assert outcomes[1]["groups"] == 2
    for out in outcomes:
        assert out["auroc"] == pytest.approx(f32(roc_auc_score(target, p)), abs=1e-12)
        assert out["ap"] == pytest.approx(f32(average_precision_score(target, p)), abs=1e-12)


def case_direct_updates(rank: int, world: int) -> list[Any]:
    """Epoch 1: the member of a ``VarlenCollection(dataset_size=3)`` updated directly (its padding kept); epoch 2:
    through the collection.
    """
    import torch

    from torchmetrics_varlen import VarlenCollection

    preds, target = torch.tensor([0.2, 0.9, 0.4]), torch.tensor([0, 1, 1])
    mine = [[0, 2], [1, 0]][rank]  # DistributedSampler(range(3), 2, shuffle=False): rank 1's second row is padding
    collection = VarlenCollection({"auroc": VarlenAUROC()}, dataset_size=3, sync_timeout=10)
    collection["auroc"].update(preds[mine], target[mine])
    out: list[Any] = []
    try:
        collection.compute()
        out.append("no error")
    except ValueError as err:
        out.append(str(err))
    collection.reset()
    collection.update(preds[mine], target[mine])
    out.append(float(collection.compute()["auroc"]))
    return out


@pytest.mark.distributed
def test_members_updated_directly_bypass_no_padding_silently(pool: DistPool) -> None:
    """A member updated directly kept the padding its collection's ``dataset_size`` should drop (found by a user
    review: a MAP next to a classification metric, whose updates differ): every rank raises, and the next epoch,
    through the collection, is exact.
    """
    expected = f32(roc_auc_score([0, 1, 1], [0.2, 0.9, 0.4]))
    for error, value in pool.values(case_direct_updates, 2):
        assert "to be updated through the collection" in error
        assert "its own `dataset_size=`" in error
        assert value == expected


def case_padding_only_batch_between_computes(rank: int, world: int, forward: bool) -> list[Any]:
    """``DistributedSampler(range(3), 2, shuffle=False)`` in batches of one, a ``compute()`` after each batch: rank 1's
    second batch is all padding, rank 0's is a real sample.
    """
    import torch
    from torchmetrics.classification import BinaryAccuracy

    from torchmetrics_varlen import VarlenCollection

    preds, target = torch.tensor([0.2, 0.6, 0.7]), torch.tensor([0, 1, 0])
    collection = VarlenCollection({"a": VarlenAUROC(), "b": BinaryAccuracy()}, dataset_size=3, sync_timeout=10)
    out: list[Any] = []
    for i in [[0, 2], [1, 0]][rank]:
        step = collection.forward if forward else collection.update
        step(preds[[i]], target[[i]])
        values = collection.compute()
        report = collection.sync_report
        out.append((float(values["a"]), float(values["b"]), report.seen_per_rank, report.kept))
    return out


@pytest.mark.distributed
@pytest.mark.parametrize("forward", [False, True])
def test_a_padding_only_batch_leaves_no_stale_value(pool: DistPool, forward: bool) -> None:
    """A batch of sampler padding reaches no member of a ``VarlenCollection(dataset_size=N)``, yet the members' cached
    values are stale on that rank too (found by a user review: that rank returned the first compute()'s value
    without a sync, and the other rank, whose batch was real, timed out waiting for it).
    """
    whole = (f32(roc_auc_score([0, 1, 0], [0.2, 0.6, 0.7])), 2 / 3)
    first = (f32(roc_auc_score([0, 1], [0.2, 0.6])), 1.0)
    for outcome in pool.values(case_padding_only_batch_between_computes, 2, forward):
        assert outcome[0][:2] == pytest.approx(first, abs=1e-7)
        assert outcome[1][:2] == pytest.approx(whole, abs=1e-7)
        assert outcome[1][2:] == ((2, 2), 3)
