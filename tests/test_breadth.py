"""Curves, group AUC and best F1 in one process, against scikit-learn and torchmetrics."""

from __future__ import annotations

import warnings

import pytest
import torch
from _data import scores_and_labels
from _float32 import f32
from sklearn.metrics import precision_recall_curve as sk_pr_curve
from sklearn.metrics import roc_auc_score, roc_curve
from torchmetrics.functional.classification import (
    binary_precision_recall_curve,
    binary_roc,
    multiclass_roc,
    multilabel_precision_recall_curve,
)

from torchmetrics_varlen import VarlenBestF1, VarlenGroupAUROC, VarlenPrecisionRecallCurve, VarlenROC
from torchmetrics_varlen.functional import best_f1, group_auroc, precision_recall_curve, roc


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    expected = torch.as_tensor(b.copy() if hasattr(b, "copy") else b).double()
    torch.testing.assert_close(a.double(), expected, atol=1e-6, rtol=0, equal_nan=True)


@pytest.mark.parametrize("ties", [False, True])
def test_binary_roc_matches_sklearn_and_torchmetrics(ties: bool) -> None:
    preds, target = scores_and_labels(300, 1, ties=ties)
    fpr, tpr, thr = roc(preds, target)
    sk_fpr, sk_tpr, sk_thr = roc_curve(target, preds, drop_intermediate=False)
    _close(fpr, sk_fpr)
    _close(tpr, sk_tpr)
    _close(thr[1:], sk_thr[1:])  # the first threshold: 1.0 here (torchmetrics), inf in scikit-learn
    assert float(thr[0]) == 1.0
    for ours, theirs in zip(roc(preds.float(), target), binary_roc(preds.float(), target), strict=True):
        _close(ours, theirs)


@pytest.mark.parametrize("ties", [False, True])
def test_binary_pr_curve_matches_sklearn_and_torchmetrics(ties: bool) -> None:
    preds, target = scores_and_labels(300, 2, ties=ties)
    precision, recall, thr = precision_recall_curve(preds, target)
    sk_p, sk_r, sk_t = sk_pr_curve(target, preds)
    # scikit-learn stops at full recall; torchmetrics (and this package) keep the lower thresholds: compare the tail.
    n = len(sk_t)
    _close(thr[-n:], sk_t)
    _close(precision[-n - 1 :], sk_p)
    _close(recall[-n - 1 :], sk_r)
    for ours, theirs in zip(
        precision_recall_curve(preds.float(), target), binary_precision_recall_curve(preds.float(), target), strict=True
    ):
        _close(ours, theirs)


@pytest.mark.parametrize("thresholds", [None, 11])
def test_multiclass_and_multilabel_curves_match_torchmetrics(thresholds: int | None) -> None:
    gen = torch.Generator().manual_seed(3)
    preds = torch.rand(120, 3, generator=gen)
    target = torch.arange(120) % 3
    ours = roc(preds, target, task="multiclass", num_classes=3, thresholds=thresholds)
    theirs = multiclass_roc(preds, target, 3, thresholds=thresholds)
    for a, b in zip(ours, theirs, strict=True):
        if isinstance(a, list):
            for x, y in zip(a, b, strict=True):
                _close(x, y)
        else:
            _close(a, b)
    ml_target = torch.randint(0, 2, (120, 3), generator=gen)
    ours = precision_recall_curve(preds, ml_target, task="multilabel", num_labels=3, thresholds=thresholds)
    theirs = multilabel_precision_recall_curve(preds, ml_target, 3, thresholds=thresholds)
    for a, b in zip(ours, theirs, strict=True):
        for x, y in zip(a, b, strict=True):
            _close(x, y)


def test_curve_metrics_and_plot(tmp_path: object) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib as mpl

    mpl.use("Agg")
    preds, target = scores_and_labels(50, 4)
    for cls in (VarlenROC, VarlenPrecisionRecallCurve):
        metric = cls()
        metric.update(preds[:20], target[:20])
        metric.update(preds[20:], target[20:])
        fig, ax = metric.plot()
        assert ax.get_xlabel() in ("False positive rate", "Recall")
        assert fig is not None
    fpr, tpr, _ = VarlenROC(thresholds=5).forward(preds, target)
    assert fpr.shape == (5,)


def _group_reference(preds: torch.Tensor, target: torch.Tensor, groups: torch.Tensor, weighting: str) -> float:
    values, weights = [], []
    for g in groups.unique():
        mask = groups == g
        if target[mask].unique().numel() < 2:
            continue
        values.append(roc_auc_score(target[mask], preds[mask]))
        weights.append(int(mask.sum()) if weighting == "samples" else 1)
    return sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)


@pytest.mark.parametrize("weighting", ["samples", "uniform"])
@pytest.mark.parametrize("ties", [False, True])
def test_group_auroc_equals_per_group_sklearn_loop(weighting: str, ties: bool) -> None:
    preds, target = scores_and_labels(600, 5, ties=ties)
    groups = torch.randint(-3, 40, (600,), generator=torch.Generator().manual_seed(5)) * 1000
    expected = _group_reference(preds, target, groups, weighting)
    value = group_auroc(preds, target, groups, weighting=weighting)  # type: ignore[arg-type]
    assert float(value) == pytest.approx(f32(expected), abs=1e-12)  # type: ignore[arg-type]
    detail = group_auroc(preds, target, groups, weighting=weighting, return_per_group=True)  # type: ignore[arg-type]
    assert torch.equal(detail.groups, groups.unique())
    one_class = [int(g) for g in groups.unique() if target[groups == g].unique().numel() < 2]
    assert int(detail.num_skipped) == len(one_class)
    for g, value in zip(detail.groups.tolist(), detail.per_group.tolist(), strict=True):
        if g in one_class:
            assert value != value  # NaN
        else:
            mask = groups == g
            assert value == pytest.approx(f32(roc_auc_score(target[mask], preds[mask])), abs=1e-12)


def test_group_auroc_metric_with_row_groups_and_ids() -> None:
    preds, target = scores_and_labels(200, 6)
    groups = torch.arange(200) // 20
    metric = VarlenGroupAUROC(return_per_group=True)
    metric.update(preds[:120], target[:120], groups=groups[:120], sample_ids=torch.arange(120))
    metric.update(preds[100:], target[100:], groups=groups[100:], sample_ids=torch.arange(100, 200))
    result = metric.compute()
    assert float(result.value) == pytest.approx(f32(_group_reference(preds, target, groups, "samples")), abs=1e-12)
    with pytest.raises(ValueError, match="Expected `groups` to be an integer tensor"):
        metric.update(preds[:2], target[:2], groups=torch.tensor([0.5, 1.5]), sample_ids=torch.arange(2))


def test_group_auroc_without_any_two_class_group_is_nan() -> None:
    value = group_auroc(torch.tensor([0.1, 0.2]), torch.tensor([1, 1]), torch.tensor([0, 1]))
    assert torch.isnan(value)  # type: ignore[arg-type]


def _brute_best_f1(preds: torch.Tensor, target: torch.Tensor) -> tuple[float, float]:
    p, r, t = sk_pr_curve(target, preds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f1 = 2 * p[:-1] * r[:-1] / (p[:-1] + r[:-1])
    f1 = torch.nan_to_num(torch.tensor(f1), nan=0.0)
    best = float(f1.max())
    return best, float(max(t[i] for i in range(len(t)) if f1[i] == best))


@pytest.mark.parametrize(("n", "seed", "ties"), [(10, 1, False), (500, 2, False), (500, 3, True)])
def test_best_f1_equals_brute_force_over_sklearn_pr_curve(n: int, seed: int, ties: bool) -> None:
    preds, target = scores_and_labels(n, seed, ties=ties)
    f1, thr = best_f1(preds, target)
    exp_f1, exp_thr = _brute_best_f1(preds, target)
    assert float(f1) == pytest.approx(f32(exp_f1), abs=1e-12)
    assert float(thr) == pytest.approx(exp_thr, abs=1e-12)  # a score: in the scores' dtype (float64 here)
    hard = (preds >= thr).long()
    from sklearn.metrics import f1_score

    assert f1_score(target, hard) == pytest.approx(exp_f1, abs=1e-12)


def test_best_f1_multilabel_metric() -> None:
    gen = torch.Generator().manual_seed(9)
    preds = torch.round(torch.rand(200, 3, generator=gen) * 20) / 20
    target = torch.randint(0, 2, (200, 3), generator=gen)
    metric = VarlenBestF1(task="multilabel", num_labels=3)
    metric.update(preds, target)
    f1, thr = metric.compute()
    for k in range(3):
        exp_f1, exp_thr = _brute_best_f1(preds[:, k].double(), target[:, k])
        assert float(f1[k]) == pytest.approx(exp_f1, abs=1e-6)
        assert float(thr[k]) == pytest.approx(exp_thr, abs=1e-6)


def test_best_f1_without_positives_warns() -> None:
    with pytest.warns(UserWarning, match="No positive samples in targets: F1 is 0 at every threshold"):
        f1, thr = best_f1(torch.tensor([0.3, 0.6]), torch.tensor([0, 0]))
    assert float(f1) == 0.0
    assert torch.isnan(thr)


def test_best_f1_rejects_multiclass() -> None:
    with pytest.raises(ValueError, match="`task` to be 'binary' or 'multilabel', but got 'multiclass'"):
        VarlenBestF1(task="multiclass")
