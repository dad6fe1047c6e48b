"""Sample weights in the functional API against scikit-learn's ``sample_weight`` (exact values, ties, zero weights)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from _data import flat_tensors
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve
from sklearn.metrics import precision_recall_curve as sk_pr

import torchmetrics_varlen as tv
from torchmetrics_varlen.functional import auroc, average_precision, precision_recall_curve, roc
from torchmetrics_varlen.functional._count import binned_confmat
from torchmetrics_varlen.functional._hist import counts_from_histogram, histogram
from torchmetrics_varlen.functional._ranking import auroc_from_sums, average_precision_from_sums
from torchmetrics_varlen.functional._weighted import (
    WeightedRankSums,
    combine_weighted,
    weighted_counts,
    weighted_rank_sums,
)

TOL = 1e-9


def _data(n: int, seed: int, levels: int | None, zeros: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    target[0], target[1] = 0, 1
    preds = torch.rand(n, generator=gen, dtype=torch.float64) * 0.8 + 0.2 * target
    if levels is not None:
        preds = torch.round(preds * levels) / levels
    weight = torch.rand(n, generator=gen, dtype=torch.float64) * 3
    if zeros:
        weight[torch.rand(n, generator=gen) < 0.3] = 0.0
        weight[0], weight[1] = 0.5, 2.0  # keep both classes
    return preds, target, weight


CASES = [(2, 0, None, False), (7, 1, None, True), (300, 2, None, True), (1000, 3, 5, True), (500, 4, 1, False)]


@pytest.mark.parametrize(("n", "seed", "levels", "zeros"), CASES)
def test_weighted_scalars_equal_sklearn(n: int, seed: int, levels: int | None, zeros: bool) -> None:
    """AUROC and AP with float weights (ties, zero weights): scikit-learn's value in float32, and in float64 from
    the weighted rank sums to 1e-12.
    """
    preds, target, weight = _data(n, seed, levels, zeros)
    sk_auc = roc_auc_score(target, preds, sample_weight=weight)
    sk_ap = average_precision_score(target, preds, sample_weight=weight)
    assert float(auroc(preds, target, sample_weight=weight)) == pytest.approx(f32(sk_auc), abs=TOL)
    assert float(average_precision(preds, target, sample_weight=weight)) == pytest.approx(f32(sk_ap), abs=TOL)
    sums = weighted_rank_sums(weighted_counts(preds, target.bool(), weight))
    device = preds.device
    assert float(auroc_from_sums(sums, device)) == pytest.approx(sk_auc, abs=1e-12)
    assert float(average_precision_from_sums(sums, device)) == pytest.approx(sk_ap, abs=1e-12)


@pytest.mark.parametrize("max_fpr", [0.1, 0.5])
def test_weighted_partial_auroc(max_fpr: float) -> None:
    preds, target, weight = _data(400, 7, 6, True)
    expected = roc_auc_score(target, preds, sample_weight=weight, max_fpr=max_fpr)
    assert float(auroc(preds, target, max_fpr=max_fpr, sample_weight=weight)) == pytest.approx(f32(expected), abs=TOL)


@pytest.mark.parametrize(("n", "seed", "levels", "zeros"), CASES)
def test_weighted_roc_equals_sklearn(n: int, seed: int, levels: int | None, zeros: bool) -> None:
    """The curve of every distinct score of positive weight (scikit-learn without ``drop_intermediate``); the first
    threshold is torchmetrics' 1.0 instead of scikit-learn's inf.
    """
    preds, target, weight = _data(n, seed, levels, zeros)
    fpr, tpr, thr = roc(preds, target, sample_weight=weight)
    sk_fpr, sk_tpr, sk_thr = roc_curve(target, preds, sample_weight=weight, drop_intermediate=False)
    assert isinstance(fpr, torch.Tensor)
    assert isinstance(tpr, torch.Tensor)
    assert isinstance(thr, torch.Tensor)
    assert fpr.tolist() == pytest.approx(f32(sk_fpr), abs=TOL)
    assert tpr.tolist() == pytest.approx(f32(sk_tpr), abs=TOL)
    assert thr[1:].tolist() == sk_thr[1:].tolist()
    assert float(thr[0]) == 1.0


@pytest.mark.parametrize(("n", "seed", "levels", "zeros"), CASES)
def test_weighted_pr_equals_sklearn(n: int, seed: int, levels: int | None, zeros: bool) -> None:
    preds, target, weight = _data(n, seed, levels, zeros)
    precision, recall, thr = precision_recall_curve(preds, target, sample_weight=weight)
    sk_p, sk_r, sk_thr = sk_pr(target, preds, sample_weight=weight, drop_intermediate=False)
    assert isinstance(precision, torch.Tensor)
    assert isinstance(recall, torch.Tensor)
    assert isinstance(thr, torch.Tensor)
    assert thr.tolist() == sk_thr.tolist()
    assert precision.tolist() == pytest.approx(f32(sk_p), abs=TOL)
    assert recall.tolist() == pytest.approx(f32(sk_r), abs=TOL)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_integer_weights_equal_repeated_samples(seed: int) -> None:
    """An integer weight k is the sample repeated k times (0: left out), in every mode and for the curves."""
    preds, target, _ = _data(200, seed, 8, False)
    gen = torch.Generator().manual_seed(100 + seed)
    k = torch.randint(0, 4, (200,), generator=gen)
    k[0], k[1] = 1, 1
    rep_p, rep_t = preds.repeat_interleave(k), target.repeat_interleave(k)
    for thresholds in (None, torch.float16, torch.bfloat16, 11):
        for fn in (auroc, average_precision):
            got = fn(preds, target, thresholds=thresholds, sample_weight=k)
            assert float(got) == pytest.approx(float(fn(rep_p, rep_t, thresholds=thresholds)), abs=1e-7)
        for curve in (roc, precision_recall_curve):
            got_curve = curve(preds, target, thresholds=thresholds, sample_weight=k)
            want_curve = curve(rep_p, rep_t, thresholds=thresholds)
            for a, b in zip(got_curve, want_curve, strict=True):
                assert isinstance(a, torch.Tensor)
                assert isinstance(b, torch.Tensor)
                assert a.shape == b.shape
                assert torch.allclose(a.double(), b.double(), atol=1e-7, equal_nan=True)


def test_unit_weights_equal_unweighted() -> None:
    preds, target, _ = _data(1000, 5, 4, False)
    ones = torch.ones(1000)
    assert torch.equal(auroc(preds, target, sample_weight=ones), auroc(preds, target))
    assert torch.equal(average_precision(preds, target, sample_weight=ones), average_precision(preds, target))


def test_16bit_weighted_equals_exact_on_rounded_scores() -> None:
    """The weighted 16-bit histograms give the weighted exact value of the rounded scores (scikit-learn's)."""
    preds, target, weight = _data(3000, 9, None, True)
    for dtype in (torch.float16, torch.bfloat16):
        rounded = preds.to(dtype).double()
        expected = roc_auc_score(target, rounded, sample_weight=weight)
        assert float(auroc(preds, target, thresholds=dtype, sample_weight=weight)) == pytest.approx(
            f32(expected), abs=TOL
        )
        expected_ap = average_precision_score(target, rounded, sample_weight=weight)
        got_ap = average_precision(preds, target, thresholds=dtype, sample_weight=weight)
        assert float(got_ap) == pytest.approx(f32(expected_ap), abs=TOL)
        # The state itself: float64 sums of weights that add across batches (ranks).
        hist = histogram(preds[:1000], target[:1000], dtype, weight=weight[:1000])
        hist += histogram(preds[1000:], target[1000:], dtype, weight=weight[1000:])
        assert hist.dtype == torch.float64
        sums = weighted_rank_sums(counts_from_histogram(hist, dtype))
        assert float(auroc_from_sums(sums, preds.device)) == pytest.approx(expected, abs=1e-12)


def test_weighted_binned_confmat() -> None:
    preds, target, weight = _data(500, 11, None, True)
    thresholds = torch.linspace(0, 1, 7, dtype=torch.float64)
    confmat = binned_confmat(preds, target, thresholds, weight=weight)
    assert confmat.dtype == torch.float64
    for t, thr in enumerate(thresholds.tolist()):
        predicted = preds >= thr
        for label in (0, 1):
            for pred in (0, 1):
                mask = (target == label) & (predicted == bool(pred))
                assert float(confmat[t, label, pred]) == pytest.approx(float(weight[mask].sum()), abs=1e-12)


@pytest.mark.parametrize("cuts", [[0.3], [0.2, 0.5, 0.9], [0.0, 1.5]])
def test_weighted_rank_sums_of_score_ranges_combine(cuts: list[float]) -> None:
    """The sharded form: rank sums of consecutive score ranges, each placed by the weights below it, add up to the
    whole.
    """
    preds, target, weight = _data(2000, 12, 10, True)
    whole = weighted_rank_sums(weighted_counts(preds, target.bool(), weight))
    bounds = [-np.inf, *cuts, np.inf]
    parts: list[WeightedRankSums] = []
    pos_before = all_before = 0.0
    totals = (whole.w_pos, whole.w_all)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        mask = (preds > lo) & (preds <= hi)
        part = weighted_rank_sums(
            weighted_counts(preds[mask], target[mask].bool(), weight[mask]),
            pos_before=pos_before,
            all_before=all_before,
            totals=totals,
        )
        parts.append(part)
        pos_before += part.w_pos
        all_before += part.w_all
    combined = combine_weighted(parts)
    for a, b in zip(combined, whole, strict=True):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("average", ["macro", "weighted"])
def test_weighted_multiclass_equals_sklearn(average: str) -> None:
    gen = torch.Generator().manual_seed(3)
    n, c = 400, 4
    target = torch.randint(0, c, (n,), generator=gen)
    logits = torch.randn(n, c, generator=gen, dtype=torch.float64) + torch.nn.functional.one_hot(target, c)
    probs = torch.round(logits.softmax(1) * 20) / 20  # ties; rows need not sum to 1 for one-vs-rest
    weight = torch.rand(n, generator=gen, dtype=torch.float64)
    weight[:50] = 0
    onehot = torch.nn.functional.one_hot(target, c).numpy()
    sk = roc_auc_score(onehot, probs.numpy(), sample_weight=weight.numpy(), average=average)
    got = auroc(probs, target, task="multiclass", num_classes=c, average=average, sample_weight=weight)  # type: ignore[arg-type]
    assert float(got) == pytest.approx(f32(sk), abs=TOL)
    sk_ap = average_precision_score(onehot, probs.numpy(), sample_weight=weight.numpy(), average=average)
    got_ap = average_precision(
        probs,
        target,
        task="multiclass",
        num_classes=c,
        average=average,  # type: ignore[arg-type]
        sample_weight=weight,
    )
    assert float(got_ap) == pytest.approx(f32(sk_ap), abs=TOL)
    per_class = auroc(probs, target, task="multiclass", num_classes=c, average="none", sample_weight=weight)
    for k in range(c):
        expected = roc_auc_score(onehot[:, k], probs[:, k].numpy(), sample_weight=weight.numpy())
        assert float(per_class[k]) == pytest.approx(f32(expected), abs=TOL)


@pytest.mark.parametrize("average", ["macro", "weighted", "micro"])
def test_weighted_multilabel_equals_sklearn(average: str) -> None:
    gen = torch.Generator().manual_seed(4)
    n, labels = 300, 3
    target = torch.randint(0, 2, (n, labels), generator=gen)
    preds = torch.round((torch.rand(n, labels, generator=gen, dtype=torch.float64) + 0.3 * target) * 8) / 10
    weight = torch.rand(n, generator=gen, dtype=torch.float64) * 2
    weight[::7] = 0
    kw = {"task": "multilabel", "num_labels": labels, "average": average, "sample_weight": weight}
    sk = roc_auc_score(target.numpy(), preds.numpy(), sample_weight=weight.numpy(), average=average)
    assert float(auroc(preds, target, **kw)) == pytest.approx(f32(sk), abs=TOL)  # type: ignore[arg-type]
    sk_ap = average_precision_score(target.numpy(), preds.numpy(), sample_weight=weight.numpy(), average=average)
    assert float(average_precision(preds, target, **kw)) == pytest.approx(f32(sk_ap), abs=TOL)  # type: ignore[arg-type]


def test_weight_per_sample_of_multidimensional_input() -> None:
    """A ``(N,)`` weight applies to every position of its sample; ignored positions drop their weight."""
    gen = torch.Generator().manual_seed(5)
    target = torch.randint(0, 2, (40, 6), generator=gen)
    preds = torch.rand(40, 6, generator=gen, dtype=torch.float64) * 0.7 + 0.3 * target
    weight = torch.rand(40, generator=gen, dtype=torch.float64)
    full = weight[:, None].expand(40, 6)
    expected = roc_auc_score(target.flatten(), preds.flatten(), sample_weight=full.flatten())
    assert float(auroc(preds, target, sample_weight=weight)) == pytest.approx(f32(expected), abs=TOL)
    assert float(auroc(preds, target, sample_weight=full)) == pytest.approx(f32(expected), abs=TOL)
    target[:5, 0] = -1
    keep = target.flatten() != -1
    expected = roc_auc_score(target.flatten()[keep], preds.flatten()[keep], sample_weight=full.flatten()[keep])
    got = auroc(preds, target, ignore_index=-1, sample_weight=weight)
    assert float(got) == pytest.approx(f32(expected), abs=TOL)


@pytest.mark.parametrize(
    "bad",
    [torch.tensor([1.0, -0.5, 1.0]), torch.tensor([1.0, float("nan"), 1.0]), torch.tensor([1.0, 1.0, float("inf")])],
)
def test_bad_weights_raise(bad: torch.Tensor) -> None:
    preds, target = torch.tensor([0.2, 0.6, 0.4]), torch.tensor([0, 1, 1])
    for fn in (auroc, average_precision, roc, precision_recall_curve):
        with pytest.raises(ValueError, match="sample_weight"):
            fn(preds, target, sample_weight=bad)


def test_wrong_weight_shape_raises() -> None:
    preds, target = torch.tensor([0.2, 0.6, 0.4]), torch.tensor([0, 1, 1])
    with pytest.raises(ValueError, match="shape"):
        auroc(preds, target, sample_weight=torch.ones(4))
    with pytest.raises(TypeError, match="tensor"):
        auroc(preds, target, sample_weight=[1.0, 1.0, 1.0])  # type: ignore[arg-type]


def test_all_weight_on_one_class_warns_like_auroc() -> None:
    """Zero weight on every negative: one class left, so 0.0 and torchmetrics' warning, as unweighted."""
    preds, target = torch.tensor([0.2, 0.6, 0.4]), torch.tensor([0, 1, 1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = auroc(preds, target, sample_weight=torch.tensor([0.0, 1.0, 2.0]))
    assert float(value) == 0.0
    assert any("negative samples" in str(w.message) for w in caught)


@pytest.mark.parametrize("labels", [[1], [0], [1, 1, 1], [0, 0], [1, 0, 1]])
def test_weighted_binned_batches_with_one_class_absent(labels: list[int]) -> None:
    """A small weighted batch in binned mode may hold no positive (or no negative): its bins are float64 zeros too
    (``torch.bincount`` of nothing is int64 whatever the weights), and the metric adds it like any other batch.
    """
    target = torch.tensor(labels)
    preds = torch.linspace(0.1, 0.9, len(labels))
    weight = torch.linspace(0.5, 2.0, len(labels), dtype=torch.float64)
    confmat = binned_confmat(preds, target, torch.linspace(0, 1, 50), weight)
    assert confmat.dtype == torch.float64
    assert float(confmat[0].sum()) == pytest.approx(float(weight.sum()))
    metric = tv.VarlenAUROC(thresholds=50)
    metric.update(preds, target, sample_weight=weight.float())
    metric.update(torch.tensor([0.3, 0.8]), torch.tensor([0, 1]), sample_weight=torch.tensor([1.0, 3.0]))
    full_preds = torch.cat([preds, torch.tensor([0.3, 0.8])])
    full_target = torch.cat([target, torch.tensor([0, 1])])
    full_weight = torch.cat([weight.float(), torch.tensor([1.0, 3.0])])
    expected = auroc(full_preds, full_target, thresholds=50, sample_weight=full_weight)
    assert torch.equal(metric.compute(), expected)


@pytest.mark.parametrize("thresholds", [None, torch.float16, torch.bfloat16, 11])
@pytest.mark.parametrize(
    "cls", [tv.VarlenAUROC, tv.VarlenAveragePrecision, tv.VarlenROC, tv.VarlenPrecisionRecallCurve]
)
def test_weighted_batch_of_only_dropped_rows_declares_the_epoch_weighted(cls: type, thresholds: object) -> None:
    """A batch given ``sample_weight`` whose every row is dropped (``ignore_index`` here, sampler padding on a rank)
    keeps the epoch weighted, in every mode: the next weighted batch is taken and the value is the weighted one (the
    16-bit modes recorded "no weights": ``torch.bincount`` of no score is int64, so their histogram was too).
    """
    preds, target = torch.tensor([0.6, 0.7, 0.4, 0.9]), torch.tensor([0, 1, 1, 0])
    weight = torch.tensor([1.0, 2.0, 3.0, 0.5])  # weighted AUROC 2 / 7.5, unweighted 0.25
    metric = cls(thresholds=thresholds, ignore_index=-1)
    metric.update(torch.tensor([0.3, 0.8]), torch.tensor([-1, -1]), sample_weight=torch.tensor([5.0, 7.0]))
    assert metric._weight_mode() == "weights"
    metric.update(preds, target, sample_weight=weight)
    alone = cls(thresholds=thresholds)
    alone.update(preds, target, sample_weight=weight)
    got, want = flat_tensors(metric.compute()), flat_tensors(alone.compute())
    assert all(torch.equal(a.nan_to_num(-1), b.nan_to_num(-1)) for a, b in zip(got, want, strict=True))  # NaN: PR
    if cls is tv.VarlenAUROC and thresholds != 11:
        rounded = preds.to(thresholds if isinstance(thresholds, torch.dtype) else torch.float32).double()
        assert float(got[0]) == pytest.approx(f32(roc_auc_score(target, rounded, sample_weight=weight)), abs=TOL)


def test_weighted_histogram_of_no_score_is_float64() -> None:
    """The weighted 16-bit histogram holds float64 sums even of no score (``torch.bincount`` would give int64)."""
    empty = torch.zeros(0)
    assert histogram(empty, empty, torch.float16, weight=empty.double()).dtype == torch.float64
