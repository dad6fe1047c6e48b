"""Drop-in conformance, single process: torchmetrics' own test conventions, run through both classes.

For every torchmetrics class that a Varlen class replaces, the inputs torchmetrics' test-suite feeds it
(probabilities, logits, extra dimensions, ``ignore_index``, binned thresholds as int / list / tensor, ``max_fpr``,
float 0/1 targets, float16 / float64 scores) go through both classes, batch by batch with ``forward`` and then
``compute``: the same values (1e-6), dtypes and shapes. Exact values are checked against scikit-learn too, on the
data normalised the way torchmetrics does (a batch with any score outside [0, 1] goes through a sigmoid, or a
softmax over the classes for multiclass). Both classes are scriptable, picklable and round-trip their state, and
every constructor parameter of the torchmetrics class exists on the Varlen class with the same default.

The multi-rank half is `tests/test_conformance_distributed.py`.
"""

from __future__ import annotations

import inspect
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from _float32 import expit, f32, softmax
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score, roc_curve
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.classification import (
    BinaryAUROC,
    BinaryAveragePrecision,
    BinaryPrecisionRecallCurve,
    BinaryROC,
    MulticlassAUROC,
    MulticlassAveragePrecision,
    MulticlassPrecisionRecallCurve,
    MulticlassROC,
    MultilabelAUROC,
    MultilabelAveragePrecision,
    MultilabelPrecisionRecallCurve,
    MultilabelROC,
)

from torchmetrics_varlen import (
    VarlenAUROC,
    VarlenAveragePrecision,
    VarlenBestF1,
    VarlenGroupAUROC,
    VarlenPrecisionRecallCurve,
    VarlenROC,
)

# torchmetrics' unittests sizes: batches of 32, 5 classes / labels, an extra dimension of 3.
NUM_BATCHES, BATCH_SIZE, NUM_CLASSES, EXTRA_DIM = 4, 32, 5, 3
SEEDS = [0, 1]
ATOL = 1e-6

PAIRS = {
    "auroc": (VarlenAUROC, BinaryAUROC),
    "ap": (VarlenAveragePrecision, BinaryAveragePrecision),
    "roc": (VarlenROC, BinaryROC),
    "pr": (VarlenPrecisionRecallCurve, BinaryPrecisionRecallCurve),
}
TASK_PAIRS = {
    ("auroc", "multiclass"): (VarlenAUROC, MulticlassAUROC),
    ("auroc", "multilabel"): (VarlenAUROC, MultilabelAUROC),
    ("ap", "multiclass"): (VarlenAveragePrecision, MulticlassAveragePrecision),
    ("ap", "multilabel"): (VarlenAveragePrecision, MultilabelAveragePrecision),
    ("roc", "multiclass"): (VarlenROC, MulticlassROC),
    ("roc", "multilabel"): (VarlenROC, MultilabelROC),
    ("pr", "multiclass"): (VarlenPrecisionRecallCurve, MulticlassPrecisionRecallCurve),
    ("pr", "multilabel"): (VarlenPrecisionRecallCurve, MultilabelPrecisionRecallCurve),
}
CASES = ["probs", "logits", "multidim_probs", "multidim_logits"]


# ------------------------------------------------------------------ inputs, as torchmetrics' tests build them


def _binary(case: str, seed: int) -> tuple[Tensor, Tensor]:
    """``(NUM_BATCHES, BATCH_SIZE[, EXTRA_DIM])`` scores and 0/1 labels; logits are ``logit(uniform)``."""
    gen = torch.Generator().manual_seed(seed)
    shape = (NUM_BATCHES, BATCH_SIZE, EXTRA_DIM) if case.startswith("multidim") else (NUM_BATCHES, BATCH_SIZE)
    preds = torch.rand(shape, generator=gen)
    if case.endswith("logits"):
        preds = torch.logit(preds)
    return preds, torch.randint(0, 2, shape, generator=gen)


def _multiclass(case: str, seed: int) -> tuple[Tensor, Tensor]:
    """``(B, N, C[, E])`` class scores (softmaxed probabilities or log-softmax logits) and class indices."""
    gen = torch.Generator().manual_seed(seed)
    extra = (EXTRA_DIM,) if case.startswith("multidim") else ()
    raw = torch.rand((NUM_BATCHES, BATCH_SIZE, NUM_CLASSES, *extra), generator=gen)
    preds = raw.log_softmax(2) if case.endswith("logits") else (raw * 3).softmax(2)
    return preds, torch.randint(0, NUM_CLASSES, (NUM_BATCHES, BATCH_SIZE, *extra), generator=gen)


def _multilabel(case: str, seed: int) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    extra = (EXTRA_DIM,) if case.startswith("multidim") else ()
    shape = (NUM_BATCHES, BATCH_SIZE, NUM_CLASSES, *extra)
    preds = torch.rand(shape, generator=gen)
    if case.endswith("logits"):
        preds = torch.logit(preds)
    return preds, torch.randint(0, 2, shape, generator=gen)


def _inject_ignore_index(target: Tensor, ignore_index: int, seed: int) -> Tensor:
    """About a tenth of the targets become ``ignore_index`` (as torchmetrics' ``inject_ignore_index``)."""
    target = target.clone()
    mask = torch.rand(target.shape, generator=torch.Generator().manual_seed(seed + 100)) < 0.1
    target[mask] = ignore_index
    return target


# ------------------------------------------------------------------ comparisons


def _assert_same(ours: Any, theirs: Any, what: str = "") -> None:
    """Same structure, dtypes, shapes and values (1e-6, NaN equal to NaN)."""
    if isinstance(theirs, (tuple, list)):
        assert isinstance(ours, type(theirs)), f"{what}: {type(ours).__name__} != {type(theirs).__name__}"
        assert len(ours) == len(theirs), what
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _assert_same(a, b, f"{what}[{i}]")
        return
    assert isinstance(ours, Tensor), what
    assert ours.dtype == theirs.dtype, f"{what}: dtype {ours.dtype} != {theirs.dtype}"
    assert ours.shape == theirs.shape, f"{what}: shape {tuple(ours.shape)} != {tuple(theirs.shape)}"
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0, equal_nan=True, msg=what)


def _run_both(
    ours: Metric,
    theirs: Metric,
    preds: Tensor,
    target: Tensor,
    target_theirs: Tensor | None = None,
    preds_theirs: Tensor | None = None,
) -> Any:
    """As torchmetrics' class test: ``forward`` on every batch (batch values compared), then ``compute``."""
    target_theirs = target if target_theirs is None else target_theirs
    preds_theirs = preds if preds_theirs is None else preds_theirs
    for i in range(preds.shape[0]):
        _assert_same(ours(preds[i], target[i]), theirs(preds_theirs[i], target_theirs[i]), f"forward of batch {i}")
    result = ours.compute()
    _assert_same(result, theirs.compute(), "compute")
    return result


def _normalised(preds: Tensor, target: Tensor, ignore_index: int | None) -> tuple[Tensor, Tensor]:
    """One binary batch as torchmetrics stores it: flattened, ignored positions dropped, logits sigmoided (by the
    package's one rule: the float64 sigmoid rounded once, where torch's float32 sigmoid moves a bit by position).
    """
    p, t = preds.reshape(-1), target.reshape(-1)
    if ignore_index is not None:
        p, t = p[t != ignore_index], t[t != ignore_index]
    if not bool(((p >= 0) & (p <= 1)).all()):
        p = expit(p)
    return p, t


def _sklearn_binary(name: str, preds: Tensor, target: Tensor, ignore_index: int | None, max_fpr: float | None) -> Any:
    """scikit-learn on every batch normalised by torchmetrics' rule, concatenated."""
    parts = [_normalised(preds[i], target[i], ignore_index) for i in range(preds.shape[0])]
    p = torch.cat([x for x, _ in parts]).double().numpy()
    t = torch.cat([y for _, y in parts]).numpy()
    if name == "auroc":
        return roc_auc_score(t, p, max_fpr=max_fpr)
    if name == "ap":
        return average_precision_score(t, p)
    if name == "roc":
        return roc_curve(t, p, drop_intermediate=False)
    return precision_recall_curve(t, p)


def _assert_sklearn(name: str, ours: Any, reference: Any) -> None:
    """Exact values: the float32 rounding of scikit-learn's; thresholds the very scores (torchmetrics' first ROC
    threshold is 1.0 where scikit-learn has inf).
    """
    if name in ("auroc", "ap"):
        assert float(ours) == pytest.approx(f32(reference), abs=1e-7)
        return
    if name == "roc":
        fpr, tpr, thr = ours
        sk_fpr, sk_tpr, sk_thr = reference
        assert fpr.tolist() == pytest.approx(f32(sk_fpr), abs=1e-7)
        assert tpr.tolist() == pytest.approx(f32(sk_tpr), abs=1e-7)
        assert float(thr[0]) == 1.0
        assert thr[1:].double().tolist() == pytest.approx(sk_thr[1:].tolist(), abs=0)
        return
    precision, recall, thr = ours
    sk_p, sk_r, sk_t = reference
    assert precision.tolist() == pytest.approx(f32(sk_p), abs=1e-7)
    assert recall.tolist() == pytest.approx(f32(sk_r), abs=1e-7)
    assert thr.double().tolist() == pytest.approx(sk_t.tolist(), abs=0)


# ------------------------------------------------------------------ binary: values, forward, dtypes, shapes


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ignore_index", [None, -1])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", list(PAIRS))
def test_binary_exact_as_torchmetrics_and_sklearn(name: str, case: str, ignore_index: int | None, seed: int) -> None:
    preds, target = _binary(case, seed)
    if ignore_index is not None:
        target = _inject_ignore_index(target, ignore_index, seed)
    ours_cls, theirs_cls = PAIRS[name]
    result = _run_both(ours_cls(ignore_index=ignore_index), theirs_cls(ignore_index=ignore_index), preds, target)
    _assert_sklearn(name, result, _sklearn_binary(name, preds, target, ignore_index, None))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ignore_index", [None, -1])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("max_fpr", [0.8, 0.5])
def test_binary_auroc_max_fpr(max_fpr: float, case: str, ignore_index: int | None, seed: int) -> None:
    preds, target = _binary(case, seed)
    if ignore_index is not None:
        target = _inject_ignore_index(target, ignore_index, seed)
    kwargs = {"max_fpr": max_fpr, "ignore_index": ignore_index}
    result = _run_both(VarlenAUROC(**kwargs), BinaryAUROC(**kwargs), preds, target)
    _assert_sklearn("auroc", result, _sklearn_binary("auroc", preds, target, ignore_index, max_fpr))


@pytest.mark.parametrize(
    "thresholds",
    [5, 100, [0.0, 0.3, 0.5, 0.7, 1.0], torch.linspace(0, 1, 10), torch.tensor([0.9, 0.1, 0.5])],
    ids=["int5", "int100", "list", "linspace", "unsorted-tensor"],
)
@pytest.mark.parametrize("case", ["probs", "multidim_logits"])
@pytest.mark.parametrize("name", list(PAIRS))
def test_binary_binned_thresholds(name: str, case: str, thresholds: int | list[float] | Tensor) -> None:
    preds, target = _binary(case, 3)
    target = _inject_ignore_index(target, -1, 3)
    ours_cls, theirs_cls = PAIRS[name]
    kwargs: dict[str, Any] = {"thresholds": thresholds, "ignore_index": -1}
    _run_both(ours_cls(**kwargs), theirs_cls(**kwargs), preds, target)
    if name == "auroc":
        _run_both(VarlenAUROC(max_fpr=0.5, **kwargs), BinaryAUROC(max_fpr=0.5, **kwargs), preds, target)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("case", ["probs", "logits"])
@pytest.mark.parametrize("name", list(PAIRS))
def test_binary_half_and_double_scores(name: str, case: str, dtype: torch.dtype) -> None:
    """As torchmetrics' precision test: values in float32 whatever the scores' dtype, thresholds in that dtype.

    Except 16-bit logits: torchmetrics rounds their sigmoid to 16 bits (a bfloat16 sigmoid gives 1.0 to every logit
    above about 5.5), which merges logits the model ranked apart; the package gives them float32 scores, so they are
    compared with torchmetrics fed the same logits in float32 (thresholds float32; scikit-learn on the logits:
    tests/test_sixteen_bit_logits.py).
    """
    preds, target = _binary(case, 4)
    ours_cls, theirs_cls = PAIRS[name]
    theirs = _sixteen_bit_logits_as_float32(preds.to(dtype), case)
    _run_both(ours_cls(), theirs_cls(), preds.to(dtype), target, preds_theirs=theirs)


def _sixteen_bit_logits_as_float32(preds: Tensor, case: str) -> Tensor:
    """What torchmetrics is fed for the package's ``preds``: 16-bit logits upcast to float32 (the same values, whose
    float32 sigmoid keeps their ranking as the package's does), anything else as it is.
    """
    sixteen = preds.dtype in (torch.float16, torch.bfloat16)
    return preds.float() if sixteen and case.endswith("logits") else preds


@pytest.mark.parametrize("name", list(PAIRS))
def test_float_targets(name: str) -> None:
    """Floating 0.0 / 1.0 targets: BinaryAUROC accepts them; every Varlen class does (the other torchmetrics classes
    reject them, so their reference gets the integer targets). Any other value is a ValueError naming it.
    """
    preds, target = _binary("logits", 5)
    target = _inject_ignore_index(target, -1, 5)
    ours_cls, theirs_cls = PAIRS[name]
    theirs_target = target.float() if name == "auroc" else target
    ours = ours_cls(ignore_index=-1)
    _run_both(ours, theirs_cls(ignore_index=-1), preds, target.float(), theirs_target)
    for bad, shown in [(0.5, r"\[0.0, 0.5, 1.0\]"), (float("nan"), "nan")]:
        wrong = target[0].float()
        wrong[3] = bad
        with pytest.raises(ValueError, match=rf"Expected `target` to hold only \{{0, 1\}} or ignore_index=-1.*{shown}"):
            ours.update(preds[0], wrong)


@pytest.mark.parametrize("normalization", [None, "sigmoid"])
@pytest.mark.parametrize("name", ["ap", "roc", "pr"])
def test_normalization_argument(name: str, normalization: str | None) -> None:
    """The ``normalization`` of torchmetrics' AP and curve classes: same default, same meaning."""
    preds, target = _binary("logits", 6)
    ours_cls, theirs_cls = PAIRS[name]
    _run_both(ours_cls(normalization=normalization), theirs_cls(normalization=normalization), preds, target)
    # "softmax" has no class dimension in the binary task: fine for probabilities, an error for logits (an
    # IndexError in torchmetrics, a ValueError here).
    probs, _ = _binary("probs", 6)
    _run_both(ours_cls(normalization="softmax"), theirs_cls(normalization="softmax"), probs, target)
    with pytest.raises(ValueError, match="Expected `normalization` to be 'sigmoid' or None for binary scores"):
        ours_cls(normalization="softmax").update(preds[0], target[0])
    with pytest.raises(ValueError, match="Expected argument `normalization` to be 'sigmoid', 'softmax' or None"):
        ours_cls(normalization="tanh")


def test_varlen_only_logits_stay_raw_with_normalization_none() -> None:
    """``normalization=None`` on VarlenAUROC (BinaryAUROC has no such argument): logits ranked as they are, so
    logits that a float32 sigmoid saturates into ties (18, 20, 25, 30 -> 1.0) stay distinct.
    """
    logits = torch.tensor([18.0, 20.0, -3.0, 25.0, 30.0])
    target = torch.tensor([0, 1, 0, 0, 1])
    raw = VarlenAUROC(normalization=None)
    raw.update(logits, target)
    assert float(raw.compute()) == pytest.approx(f32(roc_auc_score(target, logits)), abs=1e-7)
    default = VarlenAUROC()
    default.update(logits, target)
    assert float(default.compute()) == pytest.approx(float(BinaryAUROC()(logits, target)), abs=ATOL)


# ------------------------------------------------------------------ multiclass and multilabel


def _multiclass_reference(name: str, preds: Tensor, target: Tensor, average: str, ignore_index: int | None) -> Any:
    rows, labels = [], []
    for i in range(preds.shape[0]):
        p = preds[i].movedim(1, -1).reshape(-1, NUM_CLASSES)
        t = target[i].reshape(-1)
        if ignore_index is not None:
            p, t = p[t != ignore_index], t[t != ignore_index]
        if not bool(((p >= 0) & (p <= 1)).all()):
            p = softmax(p)
        rows.append(p)
        labels.append(t)
    p, t = torch.cat(rows).double().numpy(), torch.cat(labels).numpy()
    fn = roc_auc_score if name == "auroc" else average_precision_score
    per = np.array([fn(t == k, p[:, k]) for k in range(NUM_CLASSES)])
    if average == "none":
        return per
    if average == "weighted":
        support = np.array([(t == k).sum() for k in range(NUM_CLASSES)])
        return float((per * support).sum() / support.sum())
    return float(per.mean())


def _multilabel_reference(name: str, preds: Tensor, target: Tensor, average: str, ignore_index: int | None) -> Any:
    rows, labels = [], []
    for i in range(preds.shape[0]):
        p = preds[i].movedim(1, -1).reshape(-1, NUM_CLASSES)
        t = target[i].movedim(1, -1).reshape(-1, NUM_CLASSES)
        if not bool(((p >= 0) & (p <= 1)).all()):  # over the whole batch, ignored entries included
            p = p.sigmoid()
        rows.append(p)
        labels.append(t)
    p, t = torch.cat(rows).double().numpy(), torch.cat(labels).numpy()
    valid = t != ignore_index if ignore_index is not None else np.ones_like(t, dtype=bool)
    fn = roc_auc_score if name == "auroc" else average_precision_score
    if average == "micro":
        return fn(t[valid], p[valid])
    per = np.array([fn(t[valid[:, k], k], p[valid[:, k], k]) for k in range(NUM_CLASSES)])
    if average == "none":
        return per
    if average == "weighted":
        support = np.array([(t[:, k] == 1).sum() for k in range(NUM_CLASSES)])
        return float((per * support).sum() / support.sum())
    return float(per.mean())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ignore_index", [None, -1])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("average", ["macro", "weighted", "none"])
@pytest.mark.parametrize("name", ["auroc", "ap"])
def test_multiclass_values(name: str, average: str, case: str, ignore_index: int | None, seed: int) -> None:
    preds, target = _multiclass(case, seed)
    if ignore_index is not None:
        target = _inject_ignore_index(target, ignore_index, seed)
    ours_cls, theirs_cls = TASK_PAIRS[(name, "multiclass")]
    ours = ours_cls(task="multiclass", num_classes=NUM_CLASSES, average=average, ignore_index=ignore_index)
    theirs = theirs_cls(num_classes=NUM_CLASSES, average=average, ignore_index=ignore_index)
    result = _run_both(ours, theirs, preds, target)
    reference = _multiclass_reference(name, preds, target, average, ignore_index)
    assert result.tolist() == pytest.approx(f32(reference), abs=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ignore_index", [None, -1])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("average", ["micro", "macro", "weighted", "none"])
@pytest.mark.parametrize("name", ["auroc", "ap"])
def test_multilabel_values(name: str, average: str, case: str, ignore_index: int | None, seed: int) -> None:
    preds, target = _multilabel(case, seed)
    if ignore_index is not None:
        target = _inject_ignore_index(target, ignore_index, seed)
    ours_cls, theirs_cls = TASK_PAIRS[(name, "multilabel")]
    ours = ours_cls(task="multilabel", num_labels=NUM_CLASSES, average=average, ignore_index=ignore_index)
    theirs = theirs_cls(num_labels=NUM_CLASSES, average=average, ignore_index=ignore_index)
    result = _run_both(ours, theirs, preds, target)
    reference = _multilabel_reference(name, preds, target, average, ignore_index)
    assert result.tolist() == pytest.approx(f32(reference), abs=1e-7)


@pytest.mark.parametrize("thresholds", [None, 7, [0.1, 0.5, 0.9], torch.linspace(0, 1, 6)])
@pytest.mark.parametrize("case", ["probs", "multidim_logits"])
@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
@pytest.mark.parametrize("name", ["roc", "pr"])
def test_task_curves(name: str, task: str, case: str, thresholds: Any) -> None:
    """Curves per class / label: lists of tensors (exact) or ``(K, T)`` tensors (binned), as torchmetrics."""
    preds, target = (_multiclass if task == "multiclass" else _multilabel)(case, 7)
    target = _inject_ignore_index(target, -1, 7)
    ours_cls, theirs_cls = TASK_PAIRS[(name, task)]
    size = {"num_classes": NUM_CLASSES} if task == "multiclass" else {"num_labels": NUM_CLASSES}
    kwargs = {"thresholds": thresholds, "ignore_index": -1}
    _run_both(ours_cls(task=task, **size, **kwargs), theirs_cls(**size, **kwargs), preds, target)


@pytest.mark.parametrize("thresholds", [10, [0.2, 0.4, 0.6, 0.8], torch.linspace(0, 1, 5)])
@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
@pytest.mark.parametrize("name", ["auroc", "ap"])
def test_task_binned_values(name: str, task: str, thresholds: Any) -> None:
    preds, target = (_multiclass if task == "multiclass" else _multilabel)("logits", 8)
    ours_cls, theirs_cls = TASK_PAIRS[(name, task)]
    size = {"num_classes": NUM_CLASSES} if task == "multiclass" else {"num_labels": NUM_CLASSES}
    for average in ("macro", "weighted", "none"):
        ours = ours_cls(task=task, average=average, thresholds=thresholds, **size)
        _run_both(ours, theirs_cls(average=average, thresholds=thresholds, **size), preds, target)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_task_half_and_double_scores(task: str, dtype: torch.dtype) -> None:
    """16-bit logits: torchmetrics is fed them in float32 (see test_binary_half_and_double_scores: torchmetrics'
    16-bit sigmoid / softmax merges logits the package's float32 scores keep apart).
    """
    preds, target = (_multiclass if task == "multiclass" else _multilabel)("logits", 9)
    size = {"num_classes": NUM_CLASSES} if task == "multiclass" else {"num_labels": NUM_CLASSES}
    theirs = _sixteen_bit_logits_as_float32(preds.to(dtype), "logits")
    for name in ("auroc", "ap", "roc"):
        ours_cls, theirs_cls = TASK_PAIRS[(name, task)]
        _run_both(ours_cls(task=task, **size), theirs_cls(**size), preds.to(dtype), target, preds_theirs=theirs)


# ------------------------------------------------------------------ the class itself


def _script(metric: Metric) -> None:
    """``torch.jit.script(metric)``, as torchmetrics' class test runs it.

    Its deprecation warnings are not the metric's: torch 2.13 deprecates ``torch.jit.script`` itself, and scripting
    reads torchmetrics' deprecated ``Metric._update_called`` property (torchmetrics' own classes warn the same).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(metric)


ALL_VARLEN: list[Callable[[], Metric]] = [
    VarlenAUROC,
    lambda: VarlenAUROC(thresholds=10),
    lambda: VarlenAUROC(thresholds=torch.float16),
    lambda: VarlenAUROC(task="multiclass", num_classes=3, average="none"),
    VarlenAveragePrecision,
    lambda: VarlenAveragePrecision(task="multilabel", num_labels=3, thresholds=[0.1, 0.5]),
    VarlenROC,
    VarlenPrecisionRecallCurve,
    lambda: VarlenPrecisionRecallCurve(thresholds=torch.linspace(0, 1, 5)),
    VarlenBestF1,
    VarlenGroupAUROC,
]


@pytest.mark.parametrize("make", ALL_VARLEN)
def test_every_public_class_is_scriptable(make: Callable[[], Metric]) -> None:
    """Torchmetrics' class test scripts the metric first; a used metric scripts too."""
    metric = make()
    _script(metric)
    if isinstance(metric, VarlenGroupAUROC):
        metric.update(torch.rand(8), torch.arange(8) % 2, groups=torch.arange(8) // 4)
    elif isinstance(metric, VarlenBestF1) or metric.task == "binary":  # type: ignore[attr-defined]
        metric.update(torch.rand(8), torch.arange(8) % 2)
    _script(metric)


@pytest.mark.parametrize("name", list(PAIRS))
def test_torchmetrics_class_checks(name: str) -> None:
    """The rest of torchmetrics' ``_class_test`` on both classes: scriptable, protected attributes, clone, pickle,
    hashable, an empty ``state_dict()`` by default; then a persistent ``state_dict`` round trip.
    """
    ours_cls, theirs_cls = PAIRS[name]
    preds, target = _binary("multidim_logits", 10)
    for cls in (ours_cls, theirs_cls):
        metric = cls(dist_sync_on_step=False)
        _script(metric)
        with pytest.raises(RuntimeError):
            metric.is_differentiable = not metric.is_differentiable
        with pytest.raises(RuntimeError):
            metric.higher_is_better = not metric.higher_is_better
        clone = metric.clone()
        assert clone is not metric
        assert type(clone) is cls
        metric = pickle.loads(pickle.dumps(metric))
        metric.update(preds[0], target[0])
        assert hash(metric)
        assert metric.state_dict() == {}
    ours = ours_cls()
    ours.persistent(True)
    for i in range(2):
        ours.update(preds[i], target[i])
    loaded = ours_cls()
    loaded.persistent(True)
    loaded.load_state_dict(ours.state_dict())
    _assert_same(loaded.compute(), ours.compute(), "after load_state_dict")
    loaded.update(preds[2], target[2])
    ours.update(preds[2], target[2])
    _assert_same(loaded.compute(), ours.compute(), "after load_state_dict and one more update")
    theirs = theirs_cls()
    for i in range(3):
        theirs.update(preds[i], target[i])
    _assert_same(loaded.compute(), theirs.compute(), "against torchmetrics")


@pytest.mark.parametrize("name", list(PAIRS))
def test_constructor_accepts_every_torchmetrics_parameter_with_the_same_default(name: str) -> None:
    """Every parameter of the torchmetrics class exists with the same default; its positional parameters come
    first in the same order, so positional calls mean the same too.
    """
    ours_cls, theirs_cls = PAIRS[name]
    ours = inspect.signature(ours_cls.__init__).parameters
    theirs = inspect.signature(theirs_cls.__init__).parameters
    for param in theirs.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours.values())
            continue
        assert param.name in ours, f"{ours_cls.__name__} lacks `{param.name}` of {theirs_cls.__name__}"
        ours_default = ours[param.name].default
        assert ours_default == param.default, f"`{param.name}`: default {ours_default!r} != {param.default!r}"
    positional = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)
    theirs_positional = [p for p in theirs if theirs[p].kind in positional]
    ours_positional = [p for p in ours if ours[p].kind in positional]
    assert ours_positional[: len(theirs_positional)] == theirs_positional


def test_default_arguments_make_the_same_metric() -> None:
    """A migrating user's call, unchanged: same positional arguments, same values (no warning either)."""
    preds, target = _binary("probs", 11)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run_both(VarlenAUROC(0.5, None, -1, True), BinaryAUROC(0.5, None, -1, True), preds, target)
        for name in ("ap", "roc", "pr"):
            ours_cls, theirs_cls = PAIRS[name]
            _run_both(ours_cls(20, -1, False, "sigmoid"), theirs_cls(20, -1, False, "sigmoid"), preds, target)


def test_sigmoid_is_the_float32_nearest_where_torchmetrics_rounds_twice() -> None:
    """The one place the package's scores differ from torchmetrics' on purpose. torchmetrics' float32 sigmoid
    computes ``1 / (1 + exp(-x))`` in float32 (with one formula for the body of a tensor and another for its tail, so
    a logit's score moves by a bit with its position); the package scores every logit with the float32 nearest its
    float64 sigmoid. Logit 17 is where the two rules part: 1 + exp(-17) is 1.0 in float32, so torchmetrics ties it
    with every larger logit, while its sigmoid's nearest float32 is 1 - 2**-24. Below ~16.6 and above ~17.3 both
    rules saturate alike.
    """
    logits, target = torch.tensor([17.0, 20.0, -3.0, 25.0, 30.0]), torch.tensor([0, 1, 0, 0, 1])
    assert float(logits.sigmoid()[0]) == 1.0
    assert float(expit(logits)[0]) == 1 - 2**-24
    ours = VarlenAUROC()
    ours.update(logits, target)
    assert float(ours.compute()) == pytest.approx(f32(roc_auc_score(target, expit(logits).double())), abs=1e-7)
    assert float(ours.compute()) == pytest.approx(5 / 6, abs=1e-7)
    assert float(BinaryAUROC()(logits, target)) == pytest.approx(4 / 6, abs=1e-7)
