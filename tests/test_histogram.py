"""The 16-bit mode (thresholds=torch.float16 / torch.bfloat16): exact on the rounded scores, constant state."""

from __future__ import annotations

import pytest
import torch
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score

from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision, VarlenBestF1, VarlenPrecisionRecallCurve, VarlenROC
from torchmetrics_varlen.functional import auroc, average_precision, best_f1, precision_recall_curve, roc

DTYPES = [torch.float16, torch.bfloat16]
RAW = {"normalization": None}  # the 16-bit rounding of the logits themselves, not of their sigmoid


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, generator=gen) * 2
    target = (torch.rand(n, generator=gen) < torch.sigmoid(logits)).long()
    return logits, target


@pytest.mark.parametrize("dtype", DTYPES)
def test_histogram_equals_sklearn_and_the_sort_path_on_rounded_scores(dtype: torch.dtype) -> None:
    preds, target = _data(20000, 1)
    rounded = preds.to(dtype)
    for ours, fn in [(auroc, roc_auc_score), (average_precision, average_precision_score)]:
        value = ours(preds, target, thresholds=dtype, **RAW)
        assert float(value) == pytest.approx(f32(fn(target, rounded.double())), abs=1e-12)
        assert value.item() == ours(rounded, target, **RAW).item()  # bit for bit the sort-based value
    assert float(auroc(preds, target, thresholds=dtype, max_fpr=0.2, **RAW)) == pytest.approx(
        f32(roc_auc_score(target, rounded.double(), max_fpr=0.2)), abs=1e-12
    )
    for curve_fn in (roc, precision_recall_curve):
        ours_curve = curve_fn(preds, target, thresholds=dtype, **RAW)
        for a, b in zip(ours_curve, curve_fn(rounded, target, **RAW), strict=True):
            torch.testing.assert_close(a.double(), b.double(), atol=0, rtol=0)  # type: ignore[union-attr]
    f1, thr = best_f1(rounded, target, **RAW)
    assert float(f1) == float(best_f1(rounded.float(), target, **RAW)[0])
    assert thr.item() == best_f1(rounded.float(), target, **RAW)[1].item()


@pytest.mark.parametrize("dtype", DTYPES)
def test_histogram_multiclass_and_multilabel(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(2)
    preds = torch.rand(500, 4, generator=gen)
    target = torch.arange(500) % 4
    for average in ("macro", "weighted", "none"):
        got = auroc(preds, target, task="multiclass", num_classes=4, average=average, thresholds=dtype)
        expected = auroc(preds.to(dtype), target, task="multiclass", num_classes=4, average=average)
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    ml_target = torch.randint(0, 2, (500, 4), generator=gen)
    for average in ("micro", "macro", "none"):
        got = average_precision(preds, ml_target, task="multilabel", num_labels=4, average=average, thresholds=dtype)
        expected = average_precision(preds.to(dtype), ml_target, task="multilabel", num_labels=4, average=average)
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


def test_histogram_state_does_not_grow_with_n() -> None:
    metric = VarlenAUROC(thresholds=torch.bfloat16)
    preds, target = _data(1000, 3)
    metric.update(preds, target)
    size = metric.hist.numel()
    metric.update(*_data(100000, 4))
    assert metric.hist.numel() == size == 2 * 65536
    assert not hasattr(metric, "preds")


@pytest.mark.parametrize(
    "cls", [VarlenAUROC, VarlenAveragePrecision, VarlenROC, VarlenPrecisionRecallCurve, VarlenBestF1]
)
def test_histogram_metric_classes_equal_exact_on_rounded_scores_with_dataset_size(cls: type) -> None:
    """One process never pads (88ed689): the 2,900 rows of ``dataset_size=2900``, in batches of 700 (the last one
    short). Padding dropped in the histogram mode on real ranks: test_dedup_distributed
    (test_histogram_mode_with_sampler_padding).
    """
    preds, target = _data(3000, 5)
    preds, target = preds[:2900], target[:2900]
    hist_metric = cls(thresholds=torch.float16, dataset_size=2900, **RAW)
    exact_metric = cls(dataset_size=2900, **RAW)
    for start in range(0, 2900, 700):
        hist_metric.update(preds[start : start + 700], target[start : start + 700])
        exact_metric.update(preds[start : start + 700].half(), target[start : start + 700])
    a, b = hist_metric.compute(), exact_metric.compute()
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,), strict=True):
        torch.testing.assert_close(torch.as_tensor(x).double(), torch.as_tensor(y).double(), atol=0, rtol=0)


def test_histogram_rejects_ids_and_other_dtypes() -> None:
    metric = VarlenAUROC(thresholds=torch.float16)
    with pytest.raises(ValueError, match="`sample_ids` need the exact mode"):
        metric.update(torch.rand(2), torch.tensor([0, 1]), sample_ids=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="`thresholds` given as a dtype to be torch.float16 or torch.bfloat16"):
        VarlenAUROC(thresholds=torch.float32)
    with pytest.raises(ValueError, match="VarlenBestF1 to be None \\(exact\\) or torch.float16"):
        VarlenBestF1(thresholds=10)  # type: ignore[arg-type]
