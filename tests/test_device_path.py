"""The device path (one vectorised exact pass) equals the CPU path, and its host reads do not grow with N.

Every case runs on CPU tensors twice: as they are (NumPy sorts, chunked sums, sweeps) and under
:func:`~torchmetrics_varlen.functional._device.force_device_path` (the torch-only path CUDA takes). AUROC, curves and
the 16-bit mode must agree bit for bit, AP and the multiclass / multilabel averages to the float32 output; both are
checked against scikit-learn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from _syncs import HostSyncCounter
from sklearn.metrics import average_precision_score, roc_auc_score

from torchmetrics_varlen.functional import (
    auroc,
    average_precision,
    best_f1,
    group_auroc,
    precision_recall_curve,
    roc,
)
from torchmetrics_varlen.functional._device import force_device_path
from torchmetrics_varlen.functional._ranking import EXACT_AREA_LIMIT, counts_rank_sums, rank_sums
from torchmetrics_varlen.functional._sort import Counts, encode, runs_of_keys, sort_problem, sorted_keys
from torchmetrics_varlen.functional.delong import auroc_interval


def _both(fn: Callable[[], Any]) -> tuple[Any, Any]:
    cpu = fn()
    with force_device_path():
        dev = fn()
    return cpu, dev


def _flat(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    return [t for item in x for t in _flat(item)]


def _assert_bitwise(a: Any, b: Any) -> None:
    fa, fb = _flat(a), _flat(b)
    assert len(fa) == len(fb)
    for x, y in zip(fa, fb, strict=True):
        assert x.dtype == y.dtype
        assert x.shape == y.shape
        assert (
            torch.equal(x.view(-1), y.view(-1))
            or torch.equal(x.isnan(), y.isnan())
            and torch.equal(x[~x.isnan()], y[~y.isnan()])
        )


def _binary(n: int, seed: int, ties: int | None = 100) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = torch.rand(n, generator=gen) * 0.7 + 0.3 * target
    if ties:
        preds = (preds * ties).round() / ties
    return preds, target


CASES = {
    "probabilities": lambda: _binary(5000, 0, ties=None),
    "ties": lambda: _binary(5000, 1, ties=30),
    "logits (wide keys)": lambda: (lambda p, t: (p * 8 - 4, t))(*_binary(3000, 2, ties=50)),
    "float16": lambda: (lambda p, t: (p.half(), t))(*_binary(4000, 3, ties=None)),
    "bfloat16 logits": lambda: (lambda p, t: ((p * 6 - 3).bfloat16(), t))(*_binary(4000, 4, ties=None)),
    "float64": lambda: (lambda p, t: (p.double(), t))(*_binary(2000, 5, ties=40)),
    "one sample": lambda: (torch.tensor([0.3]), torch.tensor([1])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_binary_auroc_ap_curves_match(case: str) -> None:
    preds, target = CASES[case]()
    norm = None if preds.min() < 0 else "sigmoid"
    kw: dict[str, Any] = {"task": "binary", "normalization": norm}
    one_class = target.unique().numel() < 2
    with pytest.warns(UserWarning, match="No negative") if one_class else contextlib.nullcontext():
        a_cpu, a_dev = _both(lambda: auroc(preds, target, **kw))
    _assert_bitwise(a_cpu, a_dev)
    ap_cpu, ap_dev = _both(lambda: average_precision(preds, target, **kw))
    assert ap_cpu.dtype == ap_dev.dtype == torch.float32
    assert torch.equal(ap_cpu, ap_dev)
    with pytest.warns(UserWarning, match="No negative") if one_class else contextlib.nullcontext():
        roc_cpu, roc_dev = _both(lambda: roc(preds, target, **kw))
    _assert_bitwise(roc_cpu, roc_dev)
    pr_cpu, pr_dev = _both(lambda: precision_recall_curve(preds, target, **kw))
    _assert_bitwise(pr_cpu, pr_dev)
    if not one_class:
        y, s = target.numpy(), preds.double().numpy()
        assert float(a_dev) == pytest.approx(roc_auc_score(y, s), abs=1e-6)
        assert float(ap_dev) == pytest.approx(average_precision_score(y, s), abs=1e-6)
        f_cpu, f_dev = _both(lambda: best_f1(preds, target, **kw))
        _assert_bitwise(f_cpu, f_dev)
        iv_cpu, iv_dev = _both(lambda: auroc_interval(preds, target, normalization=norm))
        _assert_bitwise(list(iv_cpu), list(iv_dev))


def test_weighted_and_partial_auroc_match() -> None:
    preds, target = _binary(3000, 6, ties=40)
    weight = torch.rand(3000, generator=torch.Generator().manual_seed(7)) * 3
    weight[::17] = 0
    a_cpu, a_dev = _both(lambda: auroc(preds, target, task="binary", sample_weight=weight))
    _assert_bitwise(a_cpu, a_dev)
    assert float(a_dev) == pytest.approx(roc_auc_score(target, preds, sample_weight=weight), abs=1e-6)
    ap_cpu, ap_dev = _both(lambda: average_precision(preds, target, task="binary", sample_weight=weight))
    assert torch.equal(ap_cpu, ap_dev)
    assert float(ap_dev) == pytest.approx(average_precision_score(target, preds, sample_weight=weight), abs=1e-6)
    r_cpu, r_dev = _both(lambda: roc(preds, target, task="binary", sample_weight=weight))
    _assert_bitwise(r_cpu, r_dev)
    p_cpu, p_dev = _both(lambda: auroc(preds, target, task="binary", max_fpr=0.3))
    _assert_bitwise(p_cpu, p_dev)
    assert float(p_dev) == pytest.approx(roc_auc_score(target, preds, max_fpr=0.3), abs=1e-6)


def test_sixteen_bit_mode_matches() -> None:
    preds, target = _binary(4000, 8, ties=None)
    for dtype in (torch.float16, torch.bfloat16):
        a_cpu, a_dev = _both(lambda d=dtype: auroc(preds, target, task="binary", thresholds=d))
        _assert_bitwise(a_cpu, a_dev)
        ap_cpu, ap_dev = _both(lambda d=dtype: average_precision(preds, target, task="binary", thresholds=d))
        assert torch.equal(ap_cpu, ap_dev)


AVERAGES = ("macro", "weighted", "none")


@pytest.mark.parametrize("average", AVERAGES)
def test_multiclass_matches(average: str) -> None:
    gen = torch.Generator().manual_seed(9)
    n, k = 3000, 5
    target = torch.randint(0, k, (n,), generator=gen)
    preds = ((torch.rand(n, k, generator=gen) * 20).round() / 20).softmax(1)
    kw: dict[str, Any] = {"task": "multiclass", "num_classes": k, "average": average}
    for fn in (auroc, average_precision):
        cpu, dev = _both(lambda f=fn: f(preds, target, **kw))
        assert cpu.dtype == dev.dtype == torch.float32
        assert torch.equal(cpu, dev), (fn.__name__, cpu, dev)
    if average == "macro":
        onehot = torch.nn.functional.one_hot(target, k).numpy()
        with force_device_path():
            value = auroc(preds, target, **kw)
            ap = average_precision(preds, target, **kw)
        assert float(value) == pytest.approx(roc_auc_score(onehot, preds.numpy(), average="macro"), abs=1e-6)
        assert float(ap) == pytest.approx(average_precision_score(onehot, preds.numpy(), average="macro"), abs=1e-6)


@pytest.mark.parametrize("average", ["macro", "weighted", "none", "micro"])
def test_multilabel_matches(average: str) -> None:
    gen = torch.Generator().manual_seed(10)
    n, k = 2000, 4
    target = torch.randint(0, 2, (n, k), generator=gen)
    preds = (torch.rand(n, k, generator=gen) * 8 - 4).round()  # logits with ties
    target[::7, 1] = -1
    kw: dict[str, Any] = {"task": "multilabel", "num_labels": k, "average": average, "ignore_index": -1}
    for fn in (auroc, average_precision):
        cpu, dev = _both(lambda f=fn: f(preds, target, **kw))
        assert torch.equal(cpu, dev), (fn.__name__, cpu, dev)
    curves_cpu, curves_dev = _both(lambda: roc(preds, target, task="multilabel", num_labels=k, ignore_index=-1))
    _assert_bitwise(curves_cpu, curves_dev)
    f_cpu, f_dev = _both(lambda: best_f1(preds, target, task="multilabel", num_labels=k, ignore_index=-1))
    _assert_bitwise(f_cpu, f_dev)


def test_group_auroc_matches() -> None:
    preds, target = _binary(3000, 11, ties=20)
    groups = torch.randint(0, 40, (3000,), generator=torch.Generator().manual_seed(12))
    cpu, dev = _both(lambda: group_auroc(preds, target, groups, return_per_group=True))
    _assert_bitwise(list(cpu), list(dev))


def test_encode_of_pieces_is_the_same_keys() -> None:
    """The device encoder builds the CPU encoder's keys (same order: no sort yet), compact and wide, from pieces."""
    preds, target = _binary(70000, 13, ties=None)
    pieces = list(preds.split(9000))
    labels = list(target.split(9000))
    for scores in (pieces, [p * 4 - 2 for p in pieces], [p.half() for p in pieces]):
        cpu, dev = _both(lambda s=scores: encode(s, labels))
        assert cpu.dtype == dev.dtype
        assert torch.equal(cpu, dev)
    special = torch.tensor([-0.0, 0.0, 1.0, float("nan"), -float("nan"), float("inf"), -float("inf"), -1.5])
    cpu, dev = _both(lambda: encode(special, torch.tensor([1, 0, 1, 0, 1, 0, 1, 0])))
    assert torch.equal(cpu, dev)


def test_runs_equal_materialized_keys_and_sharded_sums() -> None:
    """``runs_of_keys`` gives the counts of the sorted keys; ``rank_sums`` of one range of the scores (the sharded
    compute's call, with ``pos_before`` / ``all_before`` / ``totals``) agrees between the paths.
    """
    preds, target = _binary(20000, 14, ties=200)
    col = sorted_keys(preds, target)
    with force_device_path():
        counts = sort_problem(preds, target)
    assert isinstance(counts, Counts)
    ref = rank_sums(col)
    with force_device_path():
        dev = rank_sums(col)
        dev_counts = rank_sums(counts)
    assert ref.twice_area == dev.twice_area == dev_counts.twice_area
    assert (ref.n_pos, ref.n_all) == (dev.n_pos, dev.n_all)
    assert np.float32(ref.ap_sum / ref.n_pos) == np.float32(dev.ap_sum / dev.n_pos)
    keys = col.keys[5000:]  # the upper range of the scores, as one rank of the sharded compute holds it
    pos_before = int(col.keys[:5000].bitwise_and(1).sum())
    part = sorted_keys(preds, target)._replace(keys=keys, n_pos=col.n_pos - pos_before)
    totals = (col.n_pos, col.keys.numel())
    a = rank_sums(part, pos_before=pos_before, all_before=5000, totals=totals)
    with force_device_path():
        b = rank_sums(part, pos_before=pos_before, all_before=5000, totals=totals)
        c = rank_sums(
            runs_of_keys(keys, part.dtype, part.compact, is_sorted=True),
            pos_before=pos_before,
            all_before=5000,
            totals=totals,
        )
    assert a.twice_area == b.twice_area == c.twice_area
    assert a.ap_sum == pytest.approx(b.ap_sum, rel=1e-14)


def test_twice_area_exact_beyond_int64_products() -> None:
    """Counts whose twice-area is far above 2**63 (2**34 samples) are summed exactly (high / low halves)."""
    big = 1 << 33
    counts = Counts(torch.tensor([0, big, big + 3]), torch.tensor([big, 2 * big, 2 * big + 5]), None)
    sums = counts_rank_sums(counts, ap=False)
    pos_g, neg_g, neg_below = [0, big, 3], [big, 0, 2], [0, big, big]
    expected = sum(p * (2 * nb + ng) for p, ng, nb in zip(pos_g, neg_g, neg_below, strict=True))
    assert expected > 1 << 63
    assert sums.twice_area == expected
    too_many = Counts(torch.tensor([1]), torch.tensor([EXACT_AREA_LIMIT]), None)
    with pytest.raises(ValueError, match="exact up to"):
        counts_rank_sums(too_many)


def _syncs(fn: Callable[[], Any]) -> int:
    with force_device_path(), HostSyncCounter() as counter:
        fn()
    return counter.total


COMPUTES: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
    "auroc": lambda p, t: auroc(p, t, task="binary", validate_args=False),
    "auroc logits": lambda p, t: auroc(p * 4 - 2, t, task="binary", validate_args=False, normalization=None),
    "average_precision": lambda p, t: average_precision(p, t, task="binary", validate_args=False),
    "roc": lambda p, t: roc(p, t, task="binary", validate_args=False),
    "precision_recall_curve": lambda p, t: precision_recall_curve(p, t, task="binary", validate_args=False),
    "best_f1": lambda p, t: best_f1(p, t, task="binary", validate_args=False),
    "multiclass auroc": lambda p, t: auroc(
        torch.stack([p, 1 - p, p * p], 1), t + (p > 0.5).long(), task="multiclass", num_classes=3, validate_args=False
    ),
    "multilabel ap": lambda p, t: average_precision(
        torch.stack([p, 1 - p], 1), torch.stack([t, 1 - t], 1), task="multilabel", num_labels=2, validate_args=False
    ),
}


@pytest.mark.parametrize("name", list(COMPUTES))
def test_host_reads_do_not_grow_with_n(name: str) -> None:
    counts = [_syncs(lambda n=n: COMPUTES[name](*_binary(n, n, ties=None))) for n in (1_000, 10_000, 100_000)]
    assert counts[0] == counts[1] == counts[2], counts
    assert counts[0] <= 40


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_metric_classes_over_batches_match(task: str) -> None:
    """Stored batches (pieces) through the metric classes: one sort of every class on the device path, the CPU
    path's values.
    """
    from torchmetrics_varlen import (
        VarlenMulticlassAUROC,
        VarlenMulticlassAveragePrecision,
        VarlenMultilabelAUROC,
        VarlenMultilabelAveragePrecision,
    )

    gen = torch.Generator().manual_seed(15)
    k = 4
    batches = []
    for n in (300, 1, 700):
        preds = (torch.rand(n, k, generator=gen) * 10).round().half() / 10
        target = torch.randint(0, k, (n,), generator=gen) if task == "multiclass" else torch.randint(0, 2, (n, k))
        batches.append((preds, target))
    kinds = (
        (VarlenMulticlassAUROC, VarlenMulticlassAveragePrecision)
        if task == "multiclass"
        else (VarlenMultilabelAUROC, VarlenMultilabelAveragePrecision)
    )
    for cls in kinds:

        def run(c: Any = cls) -> torch.Tensor:
            kw = {"num_classes": k} if task == "multiclass" else {"num_labels": k}
            metric = c(**kw, average="none")
            for preds, target in batches:
                metric.update(preds, target)
            return metric.compute()

        cpu, dev = _both(run)
        assert torch.equal(cpu, dev), (cls.__name__, cpu, dev)
