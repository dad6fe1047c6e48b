"""Sample weights in the metric classes, and the uncertainty classes, in one process: against scikit-learn and
against O(P x N) references written here (DeLong's psi matrix; the bootstrap with every resample built explicitly).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from torchmetrics_varlen import (
    VarlenAUROC,
    VarlenAUROCComparison,
    VarlenAUROCInterval,
    VarlenAveragePrecision,
    VarlenBestF1,
    VarlenBootstrap,
    VarlenCollection,
    VarlenMulticlassAUROC,
    VarlenMultilabelAveragePrecision,
    VarlenROC,
)
from torchmetrics_varlen.functional.bootstrap import poisson_multiplicities


def _data(n: int = 240, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = (torch.rand(n, generator=gen, dtype=torch.float64) + 0.4 * target).clamp(max=1).round(decimals=2)
    weight = torch.rand(n, generator=gen, dtype=torch.float64) * 3
    weight[::17] = 0
    return preds, target, weight


def _feed(metric: object, *tensors: torch.Tensor, batch: int = 32, **named: torch.Tensor) -> None:
    n = tensors[0].shape[0]
    for at in range(0, n, batch):
        metric.update(*(t[at : at + batch] for t in tensors), **{k: v[at : at + batch] for k, v in named.items()})  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------------- weights


@pytest.mark.parametrize("thresholds", [None, torch.float16])
def test_weighted_auroc_and_ap_classes_match_sklearn(thresholds: torch.dtype | None) -> None:
    preds, target, weight = _data()
    if thresholds is not None:
        preds = preds.to(thresholds).double()  # scores exactly representable: the 16-bit mode is exact for them
    auroc, ap = VarlenAUROC(thresholds=thresholds), VarlenAveragePrecision(thresholds=thresholds)
    for metric in (auroc, ap):
        _feed(metric, preds, target, sample_weight=weight)
    assert float(auroc.compute()) == pytest.approx(roc_auc_score(target, preds, sample_weight=weight), abs=1e-7)
    assert float(ap.compute()) == pytest.approx(average_precision_score(target, preds, sample_weight=weight), abs=1e-7)


def test_weighted_auroc_in_float64_to_1e9_and_binned_equals_functional() -> None:
    from torchmetrics_varlen.functional import auroc as f_auroc

    preds, target, weight = _data()
    metric = VarlenAUROC(normalization=None)
    _feed(metric, preds, target, sample_weight=weight)
    # compute() is float32 (torchmetrics' dtype); the float64 sums inside are checked through the functional core.
    expected = roc_auc_score(target, preds, sample_weight=weight)
    assert float(f_auroc(preds, target, sample_weight=weight, normalization=None)) == pytest.approx(expected, abs=1e-7)
    assert float(metric.compute()) == pytest.approx(expected, abs=1e-7)
    binned = VarlenAUROC(thresholds=11)
    _feed(binned, preds, target, sample_weight=weight)
    assert torch.equal(binned.compute(), f_auroc(preds, target, thresholds=11, sample_weight=weight))


def test_weighted_multiclass_multilabel_and_curve_classes() -> None:
    gen = torch.Generator().manual_seed(4)
    n = 200
    probs = torch.softmax(torch.randn(n, 3, generator=gen, dtype=torch.float64), 1)
    labels = torch.randint(0, 3, (n,), generator=gen)
    weight = torch.rand(n, generator=gen, dtype=torch.float64)
    metric = VarlenMulticlassAUROC(3, average="macro")
    _feed(metric, probs, labels, sample_weight=weight)
    expected = roc_auc_score(labels, probs, multi_class="ovr", average="macro", sample_weight=weight)
    assert float(metric.compute()) == pytest.approx(expected, abs=1e-6)
    multi = (torch.rand(n, 3, generator=gen) < 0.5).long()
    scores = torch.rand(n, 3, generator=gen, dtype=torch.float64)
    ml = VarlenMultilabelAveragePrecision(3, average="weighted")
    _feed(ml, scores, multi, sample_weight=weight)
    expected = average_precision_score(multi, scores, average="weighted", sample_weight=weight)
    assert float(ml.compute()) == pytest.approx(expected, abs=1e-6)
    preds, target, w = _data()
    curve = VarlenROC()
    _feed(curve, preds, target, sample_weight=w)
    fpr, tpr, _ = curve.compute()
    ref_fpr, ref_tpr, _ = roc_curve(target, preds, sample_weight=w, drop_intermediate=False)
    np.testing.assert_allclose(fpr.numpy(), ref_fpr, atol=1e-6)
    np.testing.assert_allclose(tpr.numpy(), ref_tpr, atol=1e-6)


@pytest.mark.parametrize("thresholds", [None, torch.float16, 5])
def test_bad_or_mixed_weights_raise_and_leave_the_state_unchanged(thresholds: object) -> None:
    preds, target, weight = _data(40)
    metric = VarlenAUROC(thresholds=thresholds)
    metric.update(preds[:20], target[:20], sample_weight=weight[:20])
    before = {k: (list(v) if isinstance(v, list) else v.clone()) for k, v in metric.metric_state.items()}
    bad = weight[20:].clone()
    bad[3] = -1.0
    with pytest.raises(ValueError, match="non-negative"):
        metric.update(preds[20:], target[20:], sample_weight=bad)
    bad[3] = math.nan
    with pytest.raises(ValueError, match="finite"):
        metric.update(preds[20:], target[20:], sample_weight=bad)
    with pytest.raises(ValueError, match="has no `sample_weight`"):
        metric.update(preds[20:], target[20:])
    for key, value in metric.metric_state.items():
        if isinstance(value, list):
            assert len(value) == len(before[key])
        elif key != "rejected":
            assert torch.equal(value, before[key])
    unweighted = VarlenAUROC(thresholds=thresholds)
    unweighted.update(preds[:20], target[:20])
    with pytest.raises(ValueError, match="has `sample_weight`"):
        unweighted.update(preds[20:], target[20:], sample_weight=weight[20:])
    with pytest.raises(ValueError, match="does not take `sample_weight`"):
        VarlenBestF1().update(preds, target, sample_weight=weight)


def test_unweighted_values_and_states_are_unchanged() -> None:
    preds, target, _ = _data()
    hist = VarlenAUROC(thresholds=torch.float16)
    _feed(hist, preds, target)
    assert hist.hist.dtype == torch.int64
    assert float(hist.compute()) == pytest.approx(roc_auc_score(target, preds.half().double()), abs=1e-7)


def test_integer_weights_equal_repeated_samples_and_padding_drops_weights() -> None:
    """Integer weights are repeated samples; with ``dataset_size`` every weight of the pass counts. One process never
    pads (88ed689): rows past ``dataset_size`` raise. A padding row's weight dropped on real ranks:
    test_weight_mode_distributed (test_the_issue_case).
    """
    preds, target, _ = _data(60)
    counts = torch.arange(60) % 3
    weighted = VarlenAUROC()
    _feed(weighted, preds, target, sample_weight=counts)
    repeated = VarlenAUROC()
    repeated.update(preds.repeat_interleave(counts), target.repeat_interleave(counts))
    assert torch.equal(weighted.compute(), repeated.compute())
    sized = VarlenAUROC(dataset_size=60)
    _feed(sized, preds, target, sample_weight=counts, batch=7)
    assert float(sized.compute()) == pytest.approx(roc_auc_score(target, preds, sample_weight=counts), abs=1e-7)
    padded = VarlenAUROC(dataset_size=50)
    _feed(padded, preds, target, sample_weight=counts, batch=7)
    with pytest.raises(ValueError, match="10 rows were dropped as sampler padding"):
        padded.compute()
    padded.reset()
    _feed(padded, preds[:50], target[:50], sample_weight=counts[:50], batch=7)
    assert float(padded.compute()) == pytest.approx(
        roc_auc_score(target[:50], preds[:50], sample_weight=counts[:50]), abs=1e-7
    )


# ---------------------------------------------------------------------------------------------------- DeLong


def _psi_delong(preds: torch.Tensor, target: torch.Tensor) -> tuple[float, np.ndarray, np.ndarray]:
    """Textbook DeLong: the m x n psi matrix, its row / column means and the AUROC."""
    x = preds[target == 1].double().numpy()
    y = preds[target == 0].double().numpy()
    psi = (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])
    return float(psi.mean()), psi.mean(1), psi.mean(0)


def test_interval_class_matches_the_psi_matrix() -> None:
    preds, target, _ = _data(180, seed=2)
    metric = VarlenAUROCInterval(level=0.9)
    _feed(metric, preds, target, batch=25)
    value, lower, upper, std = metric.compute()
    a, v10, v01 = _psi_delong(preds, target)
    var = v10.var(ddof=1) / v10.size + v01.var(ddof=1) / v01.size
    z = NormalDist().inv_cdf(0.95)
    assert float(value) == pytest.approx(a, abs=1e-7)
    assert float(std) == pytest.approx(math.sqrt(var), rel=1e-9)
    assert float(lower) == pytest.approx(float(value) - z * math.sqrt(var), abs=1e-9)
    assert float(upper) == pytest.approx(float(value) + z * math.sqrt(var), abs=1e-9)
    with pytest.raises(ValueError, match="compute_sharded"):
        VarlenAUROCInterval(compute_sharded=True)


def test_comparison_class_matches_the_psi_matrix_with_ids_in_any_order() -> None:
    preds, target, _ = _data(150, seed=3)
    gen = torch.Generator().manual_seed(8)
    other = (preds + 0.3 * torch.rand(150, generator=gen, dtype=torch.float64)).clamp(max=1).round(decimals=2)
    perm = torch.randperm(150, generator=gen)
    metric = VarlenAUROCComparison()
    _feed(metric, torch.stack([preds, other], 1)[perm], target[perm], sample_ids=perm, batch=20)
    result = metric.compute()
    a, v10a, v01a = _psi_delong(preds, target)
    b, v10b, v01b = _psi_delong(other, target)
    var = np.var(v10a - v10b, ddof=1) / v10a.size + np.var(v01a - v01b, ddof=1) / v01a.size
    z = (a - b) / math.sqrt(var)
    assert float(result.difference) == pytest.approx(a - b, abs=1e-12)
    assert float(result.z) == pytest.approx(z, rel=1e-9)
    assert float(result.p_value) == pytest.approx(math.erfc(abs(z) / math.sqrt(2)), rel=1e-7)
    with pytest.raises(ValueError, match=r"\(N, 2\)"):
        metric.update(preds, target)


# ---------------------------------------------------------------------------------------------------- bootstrap


def test_poisson_multiplicities_have_mean_and_variance_one() -> None:
    m = poisson_multiplicities(torch.arange(200_000), seed=0, resample=3)
    assert float(m.mean()) == pytest.approx(1.0, abs=0.01)
    assert float(m.var()) == pytest.approx(1.0, abs=0.02)
    assert float((m == 0).double().mean()) == pytest.approx(math.exp(-1), abs=0.005)
    assert not torch.equal(m, poisson_multiplicities(torch.arange(200_000), seed=0, resample=4))


@pytest.mark.parametrize("kind", ["auroc", "ap"])
def test_bootstrap_matches_explicit_resamples_with_repeated_samples(kind: str) -> None:
    preds, target, _ = _data(90, seed=5)
    ids = torch.arange(90) * 7 + 3
    b_count = 40
    template = VarlenAUROC() if kind == "auroc" else VarlenAveragePrecision()
    boot = VarlenBootstrap(template, num_bootstraps=b_count, level=0.8, seed=9)
    _feed(boot, preds, target, sample_ids=ids, batch=13)
    value, lower, upper, std = boot.compute()
    score = roc_auc_score if kind == "auroc" else average_precision_score
    stats = []
    for b in range(b_count):
        mult = poisson_multiplicities(ids, 9, b).long()
        rp, rt = preds.repeat_interleave(mult), target.repeat_interleave(mult)  # every sample k times: no weights
        if rt.unique().numel() == 2:
            stats.append(score(rt.numpy(), rp.numpy()))
    stats_arr = np.array(stats)
    assert float(value) == pytest.approx(score(target, preds), abs=1e-7)
    assert float(lower) == pytest.approx(np.quantile(stats_arr, 0.1), abs=1e-12)
    assert float(upper) == pytest.approx(np.quantile(stats_arr, 0.9), abs=1e-12)
    assert float(std) == pytest.approx(stats_arr.std(ddof=1), abs=1e-12)


def test_bootstrap_does_not_depend_on_batches_or_order_and_needs_keys() -> None:
    preds, target, _ = _data(120)
    ids = torch.arange(120)
    perm = torch.randperm(120, generator=torch.Generator().manual_seed(1))
    one = VarlenBootstrap(VarlenAUROC(), num_bootstraps=64)
    one.update(preds, target, sample_ids=ids)
    other = VarlenBootstrap(VarlenAUROC(), num_bootstraps=64)
    _feed(other, preds[perm], target[perm], sample_ids=ids[perm], batch=11)
    assert all(torch.equal(x, y) for x, y in zip(one.compute(), other.compute(), strict=True))
    with pytest.raises(ValueError, match="sample_ids=.*dataset_size"):
        VarlenBootstrap(VarlenAUROC()).update(preds, target)
    with pytest.raises(TypeError, match="VarlenAUROC and VarlenAveragePrecision"):
        VarlenBootstrap(VarlenBestF1())
    with pytest.raises(ValueError, match="exact mode"):
        VarlenBootstrap(VarlenAUROC(thresholds=10))


def test_new_classes_work_in_a_collection() -> None:
    preds, target, _ = _data(100)
    coll = VarlenCollection(
        {
            "interval": VarlenAUROCInterval(),
            "boot": VarlenBootstrap(VarlenAUROC(dataset_size=100), num_bootstraps=20),
            "auroc": VarlenAUROC(),
        },
        dataset_size=100,
    )
    _feed(coll, preds, target)
    out = coll.compute()
    assert torch.equal(out["interval"].value, out["auroc"])
    assert torch.equal(out["boot"].value, out["auroc"])
