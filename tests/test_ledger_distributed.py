"""The ledger on real gloo ranks: checkpoints resumed on another world size, disagreeing copies identical at every W,
and a collection under drop_last that warns and reports like a single metric.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from _dist import DistPool
from sklearn.metrics import accuracy_score, roc_auc_score
from torchmetrics.classification import BinaryAccuracy, BinaryAUROC, BinaryAveragePrecision

from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenCollection, VarlenMulticlassAUROC, load_rank_states

pytestmark = pytest.mark.distributed

N = 47


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    preds = torch.rand(N, generator=gen)
    probs = torch.softmax(torch.rand(N, 3, generator=gen), 1)
    target = torch.randint(0, 2, (N,), generator=gen)
    target[:2] = torch.tensor([0, 1])
    return preds, probs, target


def _make(kind: str, mode: str) -> Any:
    size = N if mode == "dataset_size" else None
    return {
        "auroc": lambda: VarlenAUROC(dataset_size=size, sync_timeout=30),
        "multiclass": lambda: VarlenMulticlassAUROC(num_classes=3, dataset_size=size, sync_timeout=30),
        "varlen": lambda: Varlen(BinaryAUROC(), dataset_size=size, sync_timeout=30),
        "varlen_sum": lambda: Varlen(BinaryAccuracy(), dataset_size=size, sync_timeout=30),
        "collection": lambda: VarlenCollection({"auroc": VarlenAUROC()}, dataset_size=size, sync_timeout=30),
    }[kind]()


def _feed(metric: Any, kind: str, positions: list[int], mode: str) -> None:
    """Update with the samples at the given global positions (sample index = position mod N: the padding rule)."""
    preds, probs, target = _data()
    for at in range(0, len(positions), 4):
        index = torch.tensor(positions[at : at + 4]) % N
        scores = probs[index] if kind == "multiclass" else preds[index]
        labels = index % 3 if kind == "multiclass" else target[index]
        ids = {"sample_ids": index} if mode == "ids" else {}
        metric.update(scores, labels, **ids)


def case_save(rank: int, world: int, kind: str, mode: str, k: int) -> dict[str, Any]:
    metric = _make(kind, mode)
    metric.persistent(True)
    _feed(metric, kind, [j * world + rank for j in range(k)], mode)
    return metric.state_dict()


def case_resume(rank: int, world: int, kind: str, mode: str, saved: list[dict[str, Any]], base: int) -> Any:
    metric = _make(kind, mode)
    metric.persistent(True)
    load_rank_states(metric, saved)
    per_rank = math.ceil((N - base) / world)  # a DistributedSampler over the positions not dealt yet, padded
    _feed(metric, kind, [base + j * world + rank for j in range(per_rank)], mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = metric.compute()
    value = value["auroc"] if kind == "collection" else value
    return float(value), metric.sync_report.kept, metric.sync_report.missing


def _expected(kind: str) -> float:
    preds, probs, target = _data()
    if kind == "multiclass":
        return float(roc_auc_score(torch.arange(N) % 3, probs, multi_class="ovr", average="macro"))
    if kind == "varlen_sum":
        return float(accuracy_score(target, preds > 0.5))
    return float(roc_auc_score(target, preds))


# Sample ids need list states: Varlen(BinaryAccuracy()) (sum states) resumes in dataset_size mode only.
RESUMES = [
    (kind, mode)
    for kind in ("auroc", "multiclass", "varlen", "varlen_sum", "collection")
    for mode in ("dataset_size", "ids")
    if not (mode == "ids" and kind == "varlen_sum")
]


@pytest.mark.parametrize(("old", "new"), [(2, 3), (3, 2), (2, 1), (2, 2)])
@pytest.mark.parametrize(("kind", "mode"), RESUMES)
def test_a_mid_epoch_checkpoint_resumes_exactly_on_any_world_size(
    pool: DistPool, kind: str, mode: str, old: int, new: int
) -> None:
    k = 5
    saved = pool.values(case_save, old, kind, mode, k)
    for value, kept, missing in pool.values(case_resume, new, kind, mode, saved, k * old):
        assert value == pytest.approx(_expected(kind), abs=1e-6)
        assert (kept, missing) == (N, 0 if mode == "dataset_size" else None)


def case_copies(rank: int, world: int, path: str) -> float:
    """Every id twice (once with a slightly different score), dealt round-robin over the ranks."""
    preds, _, target = _data()
    noise = torch.where(torch.arange(N) % 3 == 0, 1e-3, -1e-3)
    perm = torch.randperm(2 * N, generator=torch.Generator().manual_seed(11))
    ids = torch.cat([torch.arange(N), torch.arange(N)])[perm]
    scores = torch.cat([preds, preds + noise])[perm]
    mine = torch.arange(rank, 2 * N, world)
    metric: Any = {
        "all": lambda: VarlenAUROC(dataset_size=N),
        "on_rank": lambda: VarlenAUROC(dataset_size=N, compute_on_rank=0),
        "sharded": lambda: VarlenAUROC(dataset_size=N, compute_sharded=True),
        "varlen": lambda: Varlen(BinaryAUROC(), dataset_size=N),
        "collection": lambda: VarlenCollection({"auroc": VarlenAUROC()}, dataset_size=N),
    }[path]()
    for at in range(0, mine.numel(), 5):
        rows = mine[at : at + 5]
        metric.update(scores[rows], target[ids[rows]], sample_ids=ids[rows])
    value = metric.compute()
    return float(value["auroc"] if path == "collection" else value)


@pytest.mark.parametrize("path", ["all", "on_rank", "sharded", "varlen", "collection"])
def test_disagreeing_copies_give_one_value_bit_for_bit_at_every_world_size(pool: DistPool, path: str) -> None:
    preds, _, target = _data()
    noise = torch.where(torch.arange(N) % 3 == 0, 1e-3, -1e-3)
    expected = roc_auc_score(target, torch.minimum(preds, preds + noise))
    values = {v for world in (1, 2, 3) for v in pool.values(case_copies, world, path)}
    assert len(values) == 1
    assert values.pop() == pytest.approx(expected, abs=1e-6)


def case_drop_last(rank: int, world: int, resume: bool) -> tuple[Any, list[str]]:
    preds, _, target = _data()
    per_rank = N // world  # drop_last=True: the tail is never dealt
    positions = [j * world + rank for j in range(per_rank)]
    metrics = VarlenCollection({"auroc": VarlenAUROC(), "acc": BinaryAccuracy()}, dataset_size=N, sync_timeout=30)
    if resume:  # a checkpoint after the first 3 rows, on the same world size
        metrics.persistent(True)
        first = torch.tensor(positions[:3])
        metrics.update(preds[first], target[first])
        saved = metrics.state_dict()
        metrics = VarlenCollection({"auroc": VarlenAUROC(), "acc": BinaryAccuracy()}, dataset_size=N, sync_timeout=30)
        metrics.persistent(True)
        metrics.load_state_dict(saved)
        positions = positions[3:]
    index = torch.tensor(positions)
    metrics.update(preds[index], target[index])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        metrics.compute()
        metrics.compute()  # the same epoch: warned once
    report = metrics.sync_report
    return (report.kept, report.missing, report.seen_per_rank), [f"{w.filename}:{w.message}" for w in record]


@pytest.mark.parametrize("resume", [False, True])
def test_collection_under_drop_last_warns_on_every_rank_and_reports_missing(pool: DistPool, resume: bool) -> None:
    world = 2
    outcomes = pool.values(case_drop_last, world, resume)
    texts = {tuple(w) for _, w in outcomes}
    assert len(texts) == 1  # the same text on every rank
    (text,) = texts.pop()
    assert text.startswith(f"{__file__}:")
    assert f"only {N - 1} samples were evaluated: 1 were never seen" in text
    for report, _ in outcomes:
        assert report == (N - 1, 1, (N // world, N // world))


def case_resume_counts_no_padding(rank: int, world: int) -> tuple[float, Any]:
    preds, _, target = _data()
    metrics = VarlenCollection({"auroc": VarlenAUROC()}, dataset_size=N, sync_timeout=30)
    metrics.persistent(True)
    positions = [j * world + rank for j in range(math.ceil(N / world))]
    first = torch.tensor(positions[:10]) % N
    metrics.update(preds[first], target[first])
    resumed = VarlenCollection({"auroc": VarlenAUROC()}, dataset_size=N, sync_timeout=30)
    resumed.persistent(True)
    resumed.load_state_dict(metrics.state_dict())
    rest = torch.tensor(positions[10:]) % N  # ends with the sampler's padding
    resumed.update(preds[rest], target[rest])
    value = resumed.compute()
    return float(value["auroc"]), resumed.sync_report.kept


def test_a_resumed_collection_drops_the_padding(pool: DistPool) -> None:
    preds, _, target = _data()
    for value, kept in pool.values(case_resume_counts_no_padding, 2):
        assert value == pytest.approx(roc_auc_score(target, preds), abs=1e-6)
        assert kept == N


def case_empty_rank_report(rank: int, world: int, ids: bool, path: str) -> tuple[float, Any]:
    """Only rank 0 has data: id 42 twice and id 7 once, or the same three rows without ids. ``path``: "joint" (a
    torchmetrics member too: one joint sync), or a package member alone that syncs on its own ("sharded", "on_rank").
    """
    kwargs = {"sharded": {"compute_sharded": True}, "on_rank": {"compute_on_rank": 0}}.get(path, {})
    members: dict[str, Any] = {"auroc": VarlenAUROC(sync_timeout=20, **kwargs)}
    if path == "joint":
        members["ap"] = BinaryAveragePrecision()
    collection = VarlenCollection(members, sync_timeout=20)
    if rank == 0:
        kwargs = {"sample_ids": torch.tensor([42, 42, 7])} if ids else {}
        collection.update(torch.tensor([0.3, 0.7, 0.1]), torch.tensor([1, 1, 0]), **kwargs)
    values = collection.compute()
    return float(values["auroc"]), collection.sync_report


@pytest.mark.parametrize("path", ["joint", "sharded", "on_rank"])
@pytest.mark.parametrize("ids", [True, False])
def test_a_collection_on_a_rank_without_data_reports_what_was_evaluated(pool: DistPool, ids: bool, path: str) -> None:
    """The rank that fed nothing cannot tell the epoch's dedup mode from its own batches, and a collection whose
    members sync on their own has no joint counters: every rank reports the whole evaluation (found by the red-team
    helpers: the duplicate id counted as kept, a negative duplicates_dropped, world_size 1).
    """
    for world in (2, 3):
        outcomes = pool.values(case_empty_rank_report, world, ids, path)
        for value, report in outcomes:
            assert value == 1.0
            assert report == outcomes[0][1]
            assert report.world_size == world
            assert report.seen_per_rank == (3, *([0] * (world - 1)))
            assert (report.received, report.kept, report.duplicates_dropped) == ((3, 2, 1) if ids else (3, 3, 0))
