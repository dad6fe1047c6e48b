"""Multiclass and multilabel in one process: scikit-learn for exact values, torchmetrics for binned ones."""

from __future__ import annotations

import warnings

import pytest
import torch
from _float32 import f32, softmax
from sklearn.metrics import average_precision_score, roc_auc_score
from torchmetrics.functional.classification import (
    multiclass_auroc,
    multiclass_average_precision,
    multilabel_auroc,
    multilabel_average_precision,
)

from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision
from torchmetrics_varlen.functional import auroc, average_precision


def multiclass_data(n: int, c: int, seed: int, logits: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.arange(n) % c  # every class present
    target = target[torch.randperm(n, generator=gen)]
    raw = torch.randn(n, c, generator=gen, dtype=torch.float64) + 1.5 * torch.nn.functional.one_hot(target, c)
    raw = torch.round(raw * 4) / 4  # ties
    return (raw if logits else raw.softmax(1)).float(), target


def multilabel_data(n: int, labels: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n, labels), generator=gen)
    target[0], target[1] = 0, 1  # both classes in every label
    preds = (torch.rand(n, labels, generator=gen) * 0.7 + 0.3 * target).float()
    return torch.round(preds * 16) / 16, target


def _sk_multiclass(fn: object, preds: torch.Tensor, target: torch.Tensor, average: str) -> torch.Tensor:
    """scikit-learn's value in float64, rounded to float32 (the output dtype) at the end."""
    c = preds.shape[1]
    per = torch.tensor([fn(target == k, preds[:, k]) for k in range(c)], dtype=torch.float64)  # type: ignore[operator]
    if average == "none":
        return per.float()
    if average == "weighted":
        support = torch.bincount(target, minlength=c).double()
        return ((per * support).sum() / support.sum()).float()
    return per.mean().float()


def _sk_multilabel(fn: object, preds: torch.Tensor, target: torch.Tensor, average: str) -> torch.Tensor:
    """scikit-learn's value in float64, rounded to float32 (the output dtype) at the end."""
    if average == "micro":
        return torch.tensor(fn(target.flatten(), preds.flatten()), dtype=torch.float64).float()  # type: ignore[operator]
    per = torch.tensor([fn(target[:, k], preds[:, k]) for k in range(preds.shape[1])], dtype=torch.float64)  # type: ignore[operator]
    if average == "none":
        return per.float()
    if average == "weighted":
        support = target.sum(0).double()
        return ((per * support).sum() / support.sum()).float()
    return per.mean().float()


@pytest.mark.parametrize("average", ["macro", "weighted", "none"])
@pytest.mark.parametrize("logits", [False, True])
def test_multiclass_exact_equals_sklearn(average: str, logits: bool) -> None:
    """One-vs-rest per class against scikit-learn (on the softmaxed scores when logits are given)."""
    preds, target = multiclass_data(300, 4, 1, logits=logits)
    probs = softmax(preds) if logits else preds
    for ours, fn in [(auroc, roc_auc_score), (average_precision, average_precision_score)]:
        got = ours(preds, target, task="multiclass", num_classes=4, average=average)
        expected = _sk_multiclass(fn, probs.double(), target, average)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("average", ["micro", "macro", "weighted", "none"])
def test_multilabel_exact_equals_sklearn(average: str) -> None:
    preds, target = multilabel_data(200, 3, 2)
    for ours, fn in [(auroc, roc_auc_score), (average_precision, average_precision_score)]:
        got = ours(preds, target, task="multilabel", num_labels=3, average=average)
        torch.testing.assert_close(got, _sk_multilabel(fn, preds.double(), target, average), atol=1e-12, rtol=0)


@pytest.mark.parametrize("average", ["macro", "weighted", "none"])
@pytest.mark.parametrize("thresholds", [None, 9])
def test_multiclass_equals_torchmetrics(average: str, thresholds: int | None) -> None:
    """Torchmetrics' value on the same probabilities: the logits here sit on a grid of 0.25, so rows share values in
    other orders, and torchmetrics' float32 softmax (a sum in float32, in the row's order) splits scores that are
    equal, which the package's softmax (float64, rounded once) keeps tied; the normalisation itself is checked against
    scikit-learn in ``test_multiclass_exact_equals_sklearn``.
    """
    preds, target = multiclass_data(250, 5, 3, logits=True)
    probs = softmax(preds)
    for ours, theirs in [(auroc, multiclass_auroc), (average_precision, multiclass_average_precision)]:
        got = ours(preds, target, task="multiclass", num_classes=5, average=average, thresholds=thresholds)
        expected = theirs(probs, target, 5, average=average, thresholds=thresholds)  # type: ignore[operator]
        torch.testing.assert_close(got.float(), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("average", ["micro", "macro", "weighted", "none"])
@pytest.mark.parametrize("thresholds", [None, 9])
def test_multilabel_equals_torchmetrics_with_ignore_index(average: str, thresholds: int | None) -> None:
    preds, target = multilabel_data(150, 4, 4)
    target = target.clone()
    target[5::7, 1] = -100
    for ours, theirs in [(auroc, multilabel_auroc), (average_precision, multilabel_average_precision)]:
        got = ours(
            preds, target, task="multilabel", num_labels=4, average=average, thresholds=thresholds, ignore_index=-100
        )
        expected = theirs(preds, target, 4, average=average, thresholds=thresholds, ignore_index=-100)  # type: ignore[operator]
        torch.testing.assert_close(got.float(), expected, atol=1e-6, rtol=0)


def test_multiclass_extra_dims_and_ignore_index_token_level() -> None:
    """Token-level output (N, C, T) with padded positions carrying -100."""
    preds, target = multiclass_data(120, 3, 5)
    preds3 = preds.view(20, 6, 3).permute(0, 2, 1)  # (N, C, T)
    target3 = target.view(20, 6).clone()
    target3[:, 5] = -100
    got = auroc(preds3, target3, task="multiclass", num_classes=3, ignore_index=-100)
    keep = target3.reshape(-1) != -100
    expected = _sk_multiclass(roc_auc_score, preds.double()[keep], target[keep], "macro")
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


def test_absent_class_is_nan_and_left_out_of_the_average() -> None:
    preds, target = multiclass_data(90, 3, 6)
    target = torch.where(target == 2, torch.zeros_like(target), target)
    per = auroc(preds, target, task="multiclass", num_classes=3, average="none")
    assert torch.isnan(per[2])
    with pytest.warns(UserWarning, match=r"AUROC is undefined for column\(s\) \[2\]"):
        macro = auroc(preds, target, task="multiclass", num_classes=3)
    defined = [roc_auc_score(target == k, preds[:, k].double()) for k in (0, 1)]
    assert float(macro) == pytest.approx(f32(sum(defined) / 2), abs=1e-12)


@pytest.mark.parametrize(
    ("cls", "fn"), [(VarlenAUROC, roc_auc_score), (VarlenAveragePrecision, average_precision_score)]
)
def test_metric_classes_with_tasks_and_ids(cls: type, fn: object) -> None:
    """Multiclass with ids; multilabel with ``dataset_size`` counting rows, not labels: the 70 rows of
    ``dataset_size=70`` (one process never pads, 88ed689; 210 labels counted as samples would raise). Multilabel
    padding dropped on real ranks: test_breadth_distributed.
    """
    preds, target = multiclass_data(100, 4, 7)
    metric = cls(task="multiclass", num_classes=4, average="none")
    metric.update(preds[:60], target[:60], sample_ids=torch.arange(60))
    metric.update(preds[50:], target[50:], sample_ids=torch.arange(50, 100))
    torch.testing.assert_close(metric.compute(), _sk_multiclass(fn, preds.double(), target, "none"), atol=1e-6, rtol=0)
    ml_preds, ml_target = multilabel_data(80, 3, 8)
    ml = cls(task="multilabel", num_labels=3, dataset_size=70)
    ml.update(ml_preds[:40], ml_target[:40])
    ml.update(ml_preds[40:70], ml_target[40:70])
    expected = _sk_multilabel(fn, ml_preds[:70].double(), ml_target[:70], "macro")
    torch.testing.assert_close(ml.compute(), expected, atol=1e-12, rtol=0)
    assert ml.sync_report is not None
    assert (ml.sync_report.kept, ml.sync_report.missing) == (70, 0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"task": "multi"}, r"`task` to be one of \('binary', 'multiclass', 'multilabel'\), but got 'multi'"),
        ({"task": "multiclass"}, "`num_classes` to be an int >= 2 for task='multiclass', but got None"),
        ({"task": "multilabel", "num_labels": 0}, "`num_labels` to be an int >= 1 for task='multilabel', but got 0"),
        ({"task": "multiclass", "num_classes": 3, "average": "micro"}, "`average` to be one of"),
        ({"task": "multiclass", "num_classes": 3, "max_fpr": 0.5}, "only defined for task='binary'"),
    ],
)
def test_bad_task_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        VarlenAUROC(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("preds", "target", "match"),
    [
        (torch.rand(4, 2), torch.tensor([0, 1, 2, 0]), "`preds` of shape \\(N, 3, ...\\) for 3 classes"),
        (torch.rand(4, 3), torch.tensor([0, 1, 2]), "`target` of shape \\(4,\\)"),
        (torch.rand(4, 3), torch.tensor([0, 1, 3, 0]), r"class indices in \[0, 2\], but found values \[0, 1, 3\]"),
        (torch.full((2, 3), float("nan")), torch.tensor([0, 1]), "NaN or infinite"),
    ],
)
def test_bad_multiclass_batches(preds: torch.Tensor, target: torch.Tensor, match: str) -> None:
    metric = VarlenAUROC(task="multiclass", num_classes=3)
    with pytest.raises(ValueError, match=match):
        metric.update(preds, target)
    assert metric.preds == []


def test_multilabel_bad_label_values() -> None:
    metric = VarlenAveragePrecision(task="multilabel", num_labels=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"labels in \[0, 1\], but found values \[0, 1, 2\]"):
            metric.update(torch.rand(2, 2), torch.tensor([[0, 1], [2, 1]]))


def test_float_class_indices_are_accepted_and_other_floats_rejected() -> None:
    """Floating point targets holding whole class indices (and ignore_index) work as integer ones; 1.5 and NaN do
    not; complex targets are rejected by dtype.
    """
    preds, target = multiclass_data(60, 3, 10)
    target = target.clone()
    target[::7] = -1
    as_float = auroc(preds, target.float(), task="multiclass", num_classes=3, ignore_index=-1)
    torch.testing.assert_close(as_float, auroc(preds, target, task="multiclass", num_classes=3, ignore_index=-1))
    ml_preds, ml_target = multilabel_data(40, 3, 11)
    got = average_precision(ml_preds, ml_target.double(), task="multilabel", num_labels=3)
    torch.testing.assert_close(got, average_precision(ml_preds, ml_target, task="multilabel", num_labels=3))
    bad = target.float()
    bad[1] = 1.5
    with pytest.raises(ValueError, match=r"class indices in \[0, 2\] or ignore_index=-1, but found values .*1\.5"):
        auroc(preds, bad, task="multiclass", num_classes=3, ignore_index=-1)
    bad[1] = float("nan")
    with pytest.raises(ValueError, match=r"class indices in \[0, 2\] or ignore_index=-1, but found values .*nan"):
        auroc(preds, bad, task="multiclass", num_classes=3, ignore_index=-1)
    with pytest.raises(ValueError, match="Expected `target` to be an integer, bool or floating point tensor of labels"):
        auroc(ml_preds, ml_target.to(torch.complex64), task="multilabel", num_labels=3)
