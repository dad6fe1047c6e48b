"""A batch that ``forward`` refuses leaves the metric as it was, as a refused ``update`` does.

Torchmetrics' ``forward`` resets the states before it updates with the batch (then adds the old states back): when
the update raised, the old states were lost and every later value was computed without them. Each case feeds good
batches, one refused batch through ``forward``, and more good batches (``forward`` and ``update``), and must give
bit for bit the value of the same metric fed the good batches only (and scikit-learn's AUROC).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from _dist import DistPool
from _float32 import f32
from sklearn.metrics import roc_auc_score
from torchmetrics import Metric
from torchmetrics.classification import BinaryAccuracy

from torchmetrics_varlen import (
    MetricSyncError,
    Varlen,
    VarlenAUROC,
    VarlenAUROCInterval,
    VarlenAveragePrecision,
    VarlenBestF1,
    VarlenBootstrap,
    VarlenGroupAUROC,
    VarlenMulticlassAUROC,
    VarlenROC,
)

Batch = tuple[tuple[torch.Tensor, ...], dict[str, Any]]


def _binary(seed: int, size: int = 30) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (size,), generator=gen)
    target[:2] = torch.tensor([0, 1])
    return (torch.rand(size, generator=gen) * 0.7 + 0.3 * target, target), {}


def _with_ids(seed: int) -> Batch:
    (preds, target), _ = _binary(seed)
    return (preds, target), {"sample_ids": torch.arange(30) + 30 * seed}


def _grouped(seed: int) -> Batch:
    (preds, target), _ = _binary(seed)
    return (preds, target, torch.arange(30) % 3), {}


def _multiclass(seed: int) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    target = torch.arange(30) % 3
    return (torch.softmax(torch.randn(30, 3, generator=gen) + torch.eye(3)[target], dim=1), target), {}


def _refused(batch: Batch) -> Batch:
    """The same batch with a label the metric refuses (2 for binary, 7 for three classes)."""
    args, kwargs = batch
    target = args[1].clone()
    target[5] = 7 if args[0].ndim == 2 else 2
    return (args[0], target, *args[2:]), kwargs


CASES: dict[str, tuple[Callable[[], Any], Callable[[int], Batch]]] = {
    "auroc": (VarlenAUROC, _binary),
    "auroc bfloat16": (lambda: VarlenAUROC(thresholds=torch.bfloat16), _binary),
    "auroc binned": (lambda: VarlenAUROC(thresholds=11), _binary),
    "auroc ids": (VarlenAUROC, _with_ids),
    "ap": (VarlenAveragePrecision, _binary),
    "roc": (VarlenROC, _binary),
    "best f1": (VarlenBestF1, _binary),
    "group auroc": (VarlenGroupAUROC, _grouped),
    "multiclass auroc": (lambda: VarlenMulticlassAUROC(num_classes=3), _multiclass),
    "auroc interval": (VarlenAUROCInterval, _binary),
    "bootstrap": (lambda: VarlenBootstrap(VarlenAUROC(), num_bootstraps=20), _with_ids),
    "Varlen(BinaryAccuracy)": (lambda: Varlen(BinaryAccuracy()), _binary),
}


def _flat(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat(v)]
    return [t for v in value for t in _flat(v)]


@pytest.mark.parametrize("name", list(CASES))
def test_a_batch_forward_refuses_changes_nothing(name: str) -> None:
    make, batch = CASES[name]
    good = [batch(seed) for seed in range(5)]
    metric, reference = make(), make()
    for i, (args, kwargs) in enumerate(good):
        if i == 2:
            bad_args, bad_kwargs = _refused(batch(9))
            with pytest.raises((ValueError, RuntimeError)):
                metric(*bad_args, **bad_kwargs)
        (metric if i % 2 else metric.forward)(*args, **kwargs) if i != 4 else metric.update(*args, **kwargs)
        reference.update(*args, **kwargs)
    got, expected = _flat(metric.compute()), _flat(reference.compute())
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b), name
    if not isinstance(metric, Varlen):
        assert metric.sync_report.rejected == 30
        assert metric.sync_report.seen_per_rank == (150,)
    assert metric._update_count == 5


def _nan_scores(batch: Batch) -> Batch:
    args, kwargs = batch
    preds = args[0].clone()
    preds[3] = float("nan")
    return (preds, *args[1:]), kwargs


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", list(CASES))
def test_a_refused_update_is_no_update(name: str, seed: int) -> None:
    """Every refusal (a bad label, a NaN score; through ``update`` or ``forward``) is taken back from torchmetrics'
    update count at one place (the ledger's refusal), so the count is the number of accepted calls, whatever the
    order; a metric whose every call was refused computes as one never updated (torchmetrics' warning).
    """
    make, batch = CASES[name]
    gen = torch.Generator().manual_seed(seed)
    metric = make()
    with pytest.raises((ValueError, RuntimeError)):
        metric.update(*_refused(batch(50))[0], **_refused(batch(50))[1])
    assert metric._update_count == 0
    accepted = 0
    for i in range(8):
        kind = int(torch.randint(0, 4, (1,), generator=gen))
        call = metric.update if int(torch.randint(0, 2, (1,), generator=gen)) else metric.forward
        if kind == 0:
            args, kwargs = _refused(batch(i))
        elif kind == 1 and name != "Varlen(BinaryAccuracy)":  # (BinaryAccuracy takes NaN scores)
            args, kwargs = _nan_scores(batch(i))
        else:
            args, kwargs = batch(i)
            call(*args, **kwargs)
            accepted += 1
            assert metric._update_count == accepted
            continue
        with pytest.raises((ValueError, RuntimeError)):
            call(*args, **kwargs)
        assert metric._update_count == accepted


def test_the_value_after_a_refused_forward_is_scikit_learns() -> None:
    metric = VarlenAUROC()
    good = [_binary(seed)[0] for seed in range(4)]
    metric(*good[0])
    with pytest.raises(ValueError, match="target"):
        metric(*_refused(_binary(9))[0])
    for args in good[1:]:
        metric(*args)
    preds = torch.cat([p for p, _ in good]).double().numpy()
    target = torch.cat([t for _, t in good]).numpy()
    assert float(metric.compute()) == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-7)


def test_a_refused_forward_restores_torchmetrics_switches() -> None:
    """``forward`` sets ``compute_on_cpu`` off and its sync switches for the batch; a refused one puts them back."""
    metric = VarlenAUROC(compute_on_cpu=True)
    metric.update(*_binary(0)[0])
    before = {k: getattr(metric, k) for k in ("compute_on_cpu", "_to_sync", "_should_unsync", "_enable_grad")}
    with pytest.raises(ValueError, match="target"):
        metric(*_refused(_binary(1))[0])
    assert {k: getattr(metric, k) for k in before} == before


@pytest.mark.parametrize(
    ("make", "first", "switched", "match"),
    [
        # ids given by update(), then a forward without: the reset metric inside forward could not see the switch
        (VarlenAUROC, {"sample_ids": torch.arange(30)}, {}, "no `sample_ids`"),
        (VarlenAUROC, {}, {"sample_ids": torch.arange(30, 60)}, "has `sample_ids`"),
        (VarlenAUROC, {"sample_weight": torch.ones(30)}, {}, "no `sample_weight`"),
        (lambda: VarlenAUROC(thresholds=torch.bfloat16), {}, {"sample_weight": torch.ones(30)}, "has `sample_weight`"),
    ],
)
def test_forward_refuses_a_switch_of_mode_within_an_epoch(
    make: Callable[[], Any], first: dict[str, Any], switched: dict[str, Any], match: str
) -> None:
    args = _binary(0)[0]
    metric, reference = make(), make()
    metric.update(*args, **first)
    reference.update(*args, **first)
    with pytest.raises(ValueError, match=match):
        metric(*_binary(1)[0], **switched)
    assert torch.equal(metric.compute(), reference.compute())
    assert metric.sync_report.rejected == 30


def test_group_auroc_forward_refuses_ids_in_an_epoch_without_them() -> None:
    metric = VarlenGroupAUROC()
    metric.update(*_grouped(0)[0])
    with pytest.raises(ValueError, match="has `sample_ids`"):
        metric(*_grouped(1)[0], sample_ids=torch.arange(30))
    assert metric.ids == []


@pytest.mark.parametrize("thresholds", [None, torch.bfloat16, 11])
def test_refused_forwards_are_reported_after_each_compute(thresholds: Any) -> None:
    """A refused forward leaves no cached value behind: each compute() reports every refused row so far."""
    metric = VarlenAUROC(thresholds=thresholds)
    metric.update(*_binary(0)[0])
    for k in range(1, 4):
        with pytest.raises(ValueError, match="target"):
            metric(*_refused(_binary(k))[0])
        metric.compute()
        assert metric.sync_report.rejected == 30 * k


class _MeanOfTwoOrMore(Metric):
    """A metric whose forward takes its own states first (``full_state_update``, adding in place) and whose value
    needs two samples: a one-sample batch passes the update and fails the batch's value.
    """

    full_state_update = True

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("n", torch.tensor(0), dist_reduce_fx="sum")

    def update(self, x: torch.Tensor) -> None:
        self.total += x.sum()
        self.n += x.numel()

    def compute(self) -> torch.Tensor:
        if self.n < 2:
            msg = "needs two values"
            raise ValueError(msg)
        return self.total / self.n


def test_a_wrapped_metric_that_updates_in_place_is_put_back_when_forward_raises() -> None:
    metric = Varlen(_MeanOfTwoOrMore())
    metric.update(torch.tensor([1.0, 3.0]))
    with pytest.raises(ValueError, match="two values"):
        metric(torch.tensor([100.0]))
    assert float(metric.compute()) == 2.0
    assert metric.sync_report.rejected == 1


def test_a_batch_whose_own_value_fails_is_not_kept_and_counts_as_rejected() -> None:
    """The update takes the batch, then its own value fails (a sample id with two targets within the batch): the
    batch is not kept, and its rows count as rejected, not as seen (the report matches the states).
    """
    metric = VarlenAUROC()
    metric.update(torch.tensor([0.1, 0.9, 0.4, 0.6]), torch.tensor([0, 1, 0, 1]), sample_ids=torch.arange(4))
    with pytest.raises(ValueError, match="Sample id 10 was seen twice"):
        metric(torch.tensor([0.3, 0.8, 0.5]), torch.tensor([1, 0, 0]), sample_ids=torch.tensor([10, 11, 10]))
    assert float(metric.compute()) == 1.0
    report = metric.sync_report
    assert (report.seen_per_rank, report.kept, report.rejected) == ((4,), 4, 3)
    metric(torch.tensor([0.3, 0.2]), torch.tensor([1, 0]), sample_ids=torch.tensor([4, 5]))
    preds, target = [0.1, 0.9, 0.4, 0.6, 0.3, 0.2], [0, 1, 0, 1, 1, 0]
    assert float(metric.compute()) == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-7)


def case_uneven_batch_syncs(rank: int, world: int) -> list[Any]:
    """``dist_sync_on_step=True`` (a sync per forward): rank 0 has one batch more in the first epoch."""
    metric = VarlenAUROC(dist_sync_on_step=True, sync_timeout=5)
    out: list[Any] = []
    for epoch in range(2):
        for k in range(3):
            if epoch == 0 and rank == 1 and k == 1:
                continue
            try:
                metric(*_binary(100 * epoch + 10 * rank + k, size=8)[0])
                out.append("ok")
            except MetricSyncError:
                out.append(f"error e{epoch}k{k}")
        out.append(float(metric.compute()))
        out.append(metric.sync_report.rejected)  # the failed batch's rows: rejected, not seen
        metric.reset()
    return out


@pytest.mark.distributed
def test_a_rank_with_one_batch_sync_more_fails_that_batch_not_the_epoch(pool: DistPool) -> None:
    """Before, the batch syncs and compute()'s were placed in one sequence: rank 1's compute() paired with rank 0's
    third batch and returned another value than rank 0's, silently. Now rank 0's extra batch fails on its own (and
    is not kept), and both ranks compute the same, exact value.
    """
    first, second = pool.values(case_uneven_batch_syncs, 2)
    assert first[:3] == ["ok", "ok", "error e0k2"]
    assert second[:2] == ["ok", "ok"]
    kept = [(0, 0), (0, 1), (1, 0), (1, 2)]
    assert (first[4], first[9], second[3], second[8]) == (8, 0, 8, 0)
    for out, epoch_values in ((first, (first[3], first[8])), (second, (second[2], second[7]))):
        batches = [_binary(10 * r + k, size=8)[0] for r, k in kept]
        preds = torch.cat([p for p, _ in batches]).double().numpy()
        target = torch.cat([t for _, t in batches]).numpy()
        assert epoch_values[0] == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-7), out
        batches = [_binary(100 + 10 * r + k, size=8)[0] for r in range(2) for k in range(3)]
        preds = torch.cat([p for p, _ in batches]).double().numpy()
        target = torch.cat([t for _, t in batches]).numpy()
        assert epoch_values[1] == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-7), out
