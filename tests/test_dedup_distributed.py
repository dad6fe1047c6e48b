"""DistributedSampler padding never changes the value: dedup by sampler rule and by id, on real gloo ranks."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import pytest
import torch
from _data import scores_and_labels
from _dist import DistPool
from _float32 import f32
from _sampler import evaluated_indices, reference
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from torchmetrics_varlen import MetricSyncError, VarlenAUROC, VarlenAveragePrecision

pytestmark = pytest.mark.distributed

METRICS = {"auroc": VarlenAUROC, "ap": VarlenAveragePrecision}
GRID = list(itertools.product([1, 7, 64], [False, True], [False, True]))  # batch, shuffle, drop_last


def _loader(n: int, seed: int, world: int, rank: int, batch: int, shuffle: bool, drop_last: bool) -> DataLoader:
    preds, target = scores_and_labels(n, seed, ties=True)
    data = TensorDataset(preds.float(), target, torch.arange(n))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
    return DataLoader(data, batch_size=batch, sampler=sampler)


def case_matrix(rank: int, world: int, n: int, seed: int) -> list[dict[str, Any]]:
    """Every (batch, shuffle, drop_last) x (metric) x (dedup mode) through a real DistributedSampler on this rank."""
    rows = []
    for batch, shuffle, drop_last in GRID:
        metrics = {
            (name, mode): cls(dataset_size=None if mode == "ids" else n, sync_timeout=20)
            for name, cls in METRICS.items()
            for mode in ("dataset_size", "ids", "both")
        }
        for preds, target, ids in _loader(n, seed, world, rank, batch, shuffle, drop_last):
            for (_, mode), metric in metrics.items():
                metric.update(preds, target, sample_ids=None if mode == "dataset_size" else ids)
        for (name, mode), metric in metrics.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = metric.compute().item()
            report = metric.sync_report
            assert report is not None
            rows.append(
                {
                    "batch": batch,
                    "shuffle": shuffle,
                    "drop_last": drop_last,
                    "name": name,
                    "mode": mode,
                    "value": value,
                    "kept": report.kept,
                    "missing": report.missing,
                    "dropped": report.duplicates_dropped,
                    "seen": list(report.seen_per_rank),
                    "warned": any("never seen" in str(w.message) for w in caught),
                }
            )
    return rows


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [3, 10, 11, 101, 1001])
def test_sampler_matrix_equals_sklearn(pool: DistPool, n: int, world: int) -> None:
    """Real DistributedSampler, batch 1/7/64, shuffle on/off, drop_last on/off, dedup by dataset_size, by ids and
    by both, both metrics:
    every rank returns scikit-learn's value on the evaluated samples, and the report accounts for all of them.
    """
    preds, target = scores_and_labels(n, n, ties=True)
    preds = preds.float().double()
    per_rank = pool.values(case_matrix, world, n, n, timeout=300)
    for rank, rows in enumerate(per_rank):
        for row in rows:
            idx = evaluated_indices(n, world, row["shuffle"], row["drop_last"], seed=n)
            expected = reference(row["name"], preds[idx], target[idx])
            where = f"rank {rank} of {world}, n={n}, {row}"
            assert row["value"] == pytest.approx(f32(expected), abs=1e-12), where
            assert row["kept"] == len(idx), where
            with_size = row["mode"] != "ids"
            assert row["missing"] == (n - len(idx) if with_size else None), where
            assert sum(row["seen"]) == row["kept"] + row["dropped"], where
            assert row["warned"] == (with_size and len(idx) < n), where
    # All ranks agree bit for bit on values and accounting (every rank warns, with the same text).
    strip = [[{k: v for k, v in row.items() if k != "warned"} for row in rows] for rows in per_rank]
    assert all(rows == strip[0] for rows in strip)


def test_id_mode_is_bitwise_identical_across_world_sizes_and_batches(pool: DistPool) -> None:
    """With sample ids (and no samples lost) the value has the same bits for W = 1..4, any batch size, any shuffle."""
    bits: dict[str, set[float]] = {"auroc": set(), "ap": set()}
    for world in (1, 2, 3, 4):
        for row in pool.values(case_matrix, world, 101, 7, timeout=300)[0]:
            if row["mode"] != "dataset_size" and not row["drop_last"]:
                bits[row["name"]].add(row["value"])
    assert len(bits["auroc"]) == 1
    assert len(bits["ap"]) == 1


def case_conflict(rank: int, world: int) -> str:
    metric = VarlenAUROC(sync_timeout=20)
    # id 5 is a positive on rank 0 and a negative on rank 1: a data bug.
    target = torch.tensor([1, 0]) if rank == 0 else torch.tensor([0, 1])
    metric.update(torch.tensor([0.9, 0.1]), target, sample_ids=torch.tensor([5, 2 + rank * 10]))
    metric.compute()
    return "no error"


def test_conflicting_targets_for_one_id_raise_on_every_rank(pool: DistPool) -> None:
    outcomes = pool.run(case_conflict, 2, allow_failure=True)
    for o in outcomes:
        assert o.status == "error"
        assert "ValueError" in o.error
        assert "Sample id 5 was seen twice with different targets (1 and 0)" in o.error


def case_conflict_then_recover(rank: int, world: int, path: str) -> list[str]:
    """Epoch 1 exact, epoch 2 with one id given two targets (caught as a ValueError), epoch 3 exact again."""
    kwargs = {"compute_on_rank": 0} if path == "on_rank" else {"compute_sharded": True} if path == "sharded" else {}
    metric = VarlenAUROC(sync_timeout=20, **kwargs)
    preds, target = scores_and_labels(60, 4, ties=True)
    ids = torch.arange(rank, 60, world)
    out = []
    for epoch in range(3):
        metric.update(preds[ids].float(), target[ids], sample_ids=ids)
        if epoch == 1 and rank == world - 1:  # id 7 again, with the other target
            metric.update(preds[7:8].float(), 1 - target[7:8], sample_ids=torch.tensor([7]))
        try:
            out.append(f"{metric.compute().item():.9f}")
        except ValueError as err:
            out.append(f"{type(err).__name__}|{isinstance(err, MetricSyncError)}|{err}")
        metric.reset()
    return out


@pytest.mark.parametrize("path", ["gather", "on_rank", "sharded"])
def test_a_conflicting_id_is_a_value_error_naming_it_on_every_rank_and_the_next_epoch_is_exact(
    pool: DistPool, path: str
) -> None:
    from sklearn.metrics import roc_auc_score

    preds, target = scores_and_labels(60, 4, ties=True)
    expected = f"{f32(roc_auc_score(target, preds.float().double())):.9f}"
    first, second = int(target[7]), 1 - int(target[7])
    for rank, (before, failed, after) in enumerate(pool.values(case_conflict_then_recover, 3, path)):
        assert before == expected
        assert after == expected
        name, is_sync_error, text = failed.split("|", 2)
        assert f"Sample id 7 was seen twice with different targets ({first} and {second})" in text
        if path == "on_rank" and rank != 0:  # quoted from rank 0, and still a ValueError
            assert (name, is_sync_error) == ("RemoteValueError", "True")
        else:
            assert is_sync_error == "False"


def case_mixed_modes(rank: int, world: int) -> str:
    metric = VarlenAveragePrecision(sync_timeout=20)
    ids = torch.tensor([rank * 2, rank * 2 + 1]) if rank == 0 else None
    metric.update(torch.tensor([0.9, 0.1]), torch.tensor([1, 0]), sample_ids=ids)
    metric.compute()
    return "no error"


def test_ranks_mixing_dedup_modes_raise_on_every_rank(pool: DistPool) -> None:
    outcomes = pool.run(case_mixed_modes, 3, allow_failure=True)
    for o in outcomes:
        assert o.status == "error"
        assert MetricSyncError.__name__ in o.error
        assert "the ranks disagree on `dedup`" in o.error
        assert "rank 0: ids" in o.error
        assert "rank 1: none" in o.error


def case_wrapper(rank: int, world: int, n: int, batch: int, shuffle: bool) -> dict[str, Any]:
    from torchmetrics.classification import BinaryAccuracy, BinaryF1Score, MulticlassConfusionMatrix

    from torchmetrics_varlen import Varlen

    gen = torch.Generator().manual_seed(n)
    probs = torch.rand(n, generator=gen)
    target = torch.randint(0, 2, (n,), generator=gen)
    classes = torch.randint(0, 3, (n,), generator=gen)
    cls_target = torch.randint(0, 3, (n,), generator=gen)
    data = TensorDataset(probs, target, classes, cls_target)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=shuffle, seed=1, drop_last=False)
    acc = Varlen(BinaryAccuracy(), dataset_size=n)
    f1 = Varlen(BinaryF1Score(), dataset_size=n)
    cm = Varlen(MulticlassConfusionMatrix(num_classes=3), dataset_size=n)
    for step, (p, t, c, ct) in enumerate(DataLoader(data, batch_size=batch, sampler=sampler)):
        if step % 2:
            acc(p, t)  # forward accumulates too
        else:
            acc.update(p, t)
        f1.update(p, t)
        cm.update(c, ct)
    return {"acc": acc.compute().item(), "f1": f1.compute().item(), "cm": cm.compute().tolist()}


@pytest.mark.parametrize(("world", "n", "batch", "shuffle"), [(2, 11, 4, False), (3, 10, 3, True), (4, 11, 2, True)])
def test_wrapper_makes_sum_state_metrics_exact(pool: DistPool, world: int, n: int, batch: int, shuffle: bool) -> None:
    """BinaryAccuracy, BinaryF1Score and MulticlassConfusionMatrix over a padded sampler equal scikit-learn on
    the full data set.
    """
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score

    gen = torch.Generator().manual_seed(n)
    probs = torch.rand(n, generator=gen)
    target = torch.randint(0, 2, (n,), generator=gen)
    classes = torch.randint(0, 3, (n,), generator=gen)
    cls_target = torch.randint(0, 3, (n,), generator=gen)
    hard = (probs > 0.5).long()
    expected = {
        "acc": accuracy_score(target, hard),
        "f1": f1_score(target, hard, zero_division=0),
        "cm": confusion_matrix(cls_target, classes, labels=[0, 1, 2]).tolist(),
    }
    for got in pool.values(case_wrapper, world, n, batch, shuffle):
        assert got["acc"] == pytest.approx(expected["acc"], abs=1e-6)
        assert got["f1"] == pytest.approx(expected["f1"], abs=1e-6)
        assert got["cm"] == expected["cm"]


def case_histogram(rank: int, world: int, n: int) -> list[float]:
    out = []
    for dtype in (torch.float16, torch.bfloat16):
        metric = VarlenAUROC(thresholds=dtype, dataset_size=n, sync_timeout=20)
        ap = VarlenAveragePrecision(thresholds=dtype, dataset_size=n, sync_timeout=20)
        for preds, target, _ in _loader(n, 5, world, rank, 7, True, False):
            metric.update(preds, target)
            ap.update(preds, target)
        out += [metric.compute().item(), ap.compute().item()]
    return out


@pytest.mark.parametrize("world", [2, 3, 4])
def test_histogram_mode_with_sampler_padding(pool: DistPool, world: int) -> None:
    """The 16-bit mode sums fixed-size histograms across ranks; dataset_size removes the padding first."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    preds, target = scores_and_labels(101, 5, ties=True)
    expected = []
    for dtype in (torch.float16, torch.bfloat16):
        rounded = preds.float().to(dtype).double()
        expected += [roc_auc_score(target, rounded), average_precision_score(target, rounded)]
    for got in pool.values(case_histogram, world, 101):
        assert got == pytest.approx(f32(expected), abs=1e-12)


def case_weighted_copies(rank: int, world: int, order: int, path: str) -> list[float]:
    """Ids 0..39, each fed once with weight 1; ids 3, 8, 13 ... also fed again with the same score and target but
    weight 5, on another rank, before or after the first copy (``order``).
    """
    kwargs = {"compute_on_rank": 0} if path == "on_rank" else {"compute_sharded": True} if path == "sharded" else {}
    metrics = [cls(sync_timeout=20, **kwargs) for cls in (VarlenAUROC, VarlenAveragePrecision)]
    gen = torch.Generator().manual_seed(3)
    preds = (torch.randint(0, 8, (40,), generator=gen) / 8).float()
    target = torch.randint(0, 2, (40,), generator=gen)
    mine = torch.arange(rank, 40, world)
    twins = torch.arange(3, 40, 5)
    twins = twins[(twins + 1) % world == rank]  # a copy on the next rank (the same rank when W = 1)
    feeds = [(mine, torch.ones(mine.numel())), (twins, torch.full((twins.numel(),), 5.0))]
    for ids, weight in feeds if order == 0 else feeds[::-1]:
        for metric in metrics:
            metric.update(preds[ids], target[ids], sample_ids=ids, sample_weight=weight)
    return [metric.compute().item() for metric in metrics]


@pytest.mark.parametrize("path", ["gather", "on_rank", "sharded"])
def test_copies_differing_only_in_weight_keep_one_value_at_every_world_size(pool: DistPool, path: str) -> None:
    """Copies of an id with equal scores and targets but different weights are not interchangeable: the one with
    the smaller weight is kept (the weight is compared after the scores), whatever the order and the world size.
    """
    from sklearn.metrics import average_precision_score, roc_auc_score

    gen = torch.Generator().manual_seed(3)
    preds = (torch.randint(0, 8, (40,), generator=gen) / 8).double()
    target = torch.randint(0, 2, (40,), generator=gen)
    expected = [
        f32(roc_auc_score(target, preds, sample_weight=torch.ones(40))),
        f32(average_precision_score(target, preds, sample_weight=torch.ones(40))),
    ]
    seen = set()
    for world in (1, 2, 3):
        for order in (0, 1):
            for value in pool.values(case_weighted_copies, world, order, path):  # every rank's (AUROC, AP)
                seen.add(tuple(value))
    assert seen == {tuple(expected)}
