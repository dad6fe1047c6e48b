"""The multiclass / multilabel classes: torchmetrics' signatures, the ``task=`` wrapper's types, and the curves'
``average`` (micro and macro), single process, against torchmetrics 1.9 and scikit-learn.
"""

from __future__ import annotations

import inspect
import pickle
import warnings
from typing import Any

import pytest
import torch
from _float32 import f32
from sklearn.metrics import roc_auc_score
from torchmetrics import classification as tm

import torchmetrics_varlen as tv
from torchmetrics_varlen.functional import precision_recall_curve, roc

PAIRS = {
    tv.VarlenMulticlassAUROC: tm.MulticlassAUROC,
    tv.VarlenMultilabelAUROC: tm.MultilabelAUROC,
    tv.VarlenMulticlassAveragePrecision: tm.MulticlassAveragePrecision,
    tv.VarlenMultilabelAveragePrecision: tm.MultilabelAveragePrecision,
    tv.VarlenMulticlassROC: tm.MulticlassROC,
    tv.VarlenMultilabelROC: tm.MultilabelROC,
    tv.VarlenMulticlassPrecisionRecallCurve: tm.MulticlassPrecisionRecallCurve,
    tv.VarlenMultilabelPrecisionRecallCurve: tm.MultilabelPrecisionRecallCurve,
}
WRAPPERS = [
    (tv.VarlenAUROC, tm.AUROC),
    (tv.VarlenAveragePrecision, tm.AveragePrecision),
    (tv.VarlenROC, tm.ROC),
    (tv.VarlenPrecisionRecallCurve, tm.PrecisionRecallCurve),
]
SIZE = {"multiclass": {"num_classes": 4}, "multilabel": {"num_labels": 4}}


def _assert_same(ours: Any, theirs: Any) -> None:
    if isinstance(theirs, (tuple, list)):
        assert type(ours) is type(theirs)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            _assert_same(a, b)
        return
    assert ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0, equal_nan=True)


def _data(task: str, seed: int, logits: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    preds = torch.rand(60, 4, generator=gen)
    if task == "multiclass":
        preds = preds.log_softmax(1) if logits else preds.softmax(1)
        return preds, torch.randint(0, 4, (60,), generator=gen)
    return (torch.logit(preds) if logits else preds), torch.randint(0, 2, (60, 4), generator=gen)


@pytest.mark.parametrize("ours", list(PAIRS), ids=lambda c: c.__name__)
def test_signature_is_torchmetrics(ours: type) -> None:
    """Every parameter of the torchmetrics class, same default, same positional order (``**kwargs`` too)."""
    theirs = inspect.signature(PAIRS[ours].__init__).parameters
    mine = inspect.signature(ours.__init__).parameters
    for name, param in theirs.items():
        assert name in mine, f"{ours.__name__} lacks `{name}`"
        assert mine[name].default == param.default, f"`{name}`: {mine[name].default!r} != {param.default!r}"
        assert mine[name].kind == param.kind, name
    positional = [n for n, p in theirs.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert [n for n, p in mine.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD] == positional


@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel"])
@pytest.mark.parametrize(("wrapper", "theirs"), WRAPPERS, ids=lambda c: c.__name__)
def test_task_wrapper_returns_the_task_class(wrapper: type, theirs: type, task: str) -> None:
    """``VarlenAUROC(task=...)`` is the task class, and ``isinstance`` answers as for torchmetrics' wrappers."""
    size = SIZE.get(task, {})
    ours_metric, theirs_metric = wrapper(task=task, **size), theirs(task=task, **size)
    family = wrapper.__name__.removeprefix("Varlen")
    expected = {"binary": wrapper, **{t: getattr(tv, f"Varlen{t.title()}{family}") for t in SIZE}}
    assert type(ours_metric) is expected[task]
    assert type(theirs_metric).__name__ == f"{task.title()}{theirs.__name__}"
    if task != "binary":  # the wrapper is not a base of the task classes, in both libraries
        assert isinstance(ours_metric, wrapper) is isinstance(theirs_metric, theirs) is False
    clone = pickle.loads(pickle.dumps(ours_metric))
    assert type(clone) is type(ours_metric)


def test_task_wrapper_maps_arguments_by_name() -> None:
    """Positional arguments of the binary signature keep their meaning; the task class gets them by name."""
    metric = tv.VarlenAUROC(None, 10, -1, True, task="multiclass", num_classes=3, average="weighted")
    assert isinstance(metric, tv.VarlenMulticlassAUROC)
    assert metric.thresholds is not None
    assert metric.thresholds.numel() == 10
    assert (metric.ignore_index, metric.average, metric.num_classes) == (-1, "weighted", 3)
    metric = tv.VarlenROC(task="multiclass", num_classes=3, average="micro", dataset_size=7, sync_timeout=5)
    assert (type(metric), metric.average, metric.dataset_size, metric.sync_timeout) == (
        tv.VarlenMulticlassROC,
        "micro",
        7,
        5,
    )


@pytest.mark.parametrize("logits", [False, True])
@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_task_classes_as_torchmetrics(task: str, logits: bool) -> None:
    preds, target = _data(task, 1, logits)
    for ours_cls, theirs_cls in PAIRS.items():
        if task not in ours_cls.__name__.lower():
            continue
        averages: list[Any] = [None]
        if "AUROC" in ours_cls.__name__ or "Average" in ours_cls.__name__:
            averages = ["macro", "weighted", "none"] + (["micro"] if task == "multilabel" else [])
        elif task == "multiclass":
            averages = [None, "micro", "macro"]
        for average in averages:
            for thresholds in (None, 11):
                kwargs = {"average": average} if average is not None else {}
                ours = ours_cls(**SIZE[task], thresholds=thresholds, **kwargs)
                if thresholds is not None and average == "micro" and task == "multiclass":
                    # torchmetrics 1.9's binned micro curves fail (a (T, C) state meets a (T,) one): the reference is
                    # its binary curve of the one-hot flattening, which is what micro means.
                    one_hot = torch.nn.functional.one_hot(target, 4)
                    probs = preds.softmax(1) if logits else preds
                    binary = tm.BinaryROC if "ROC" in ours_cls.__name__ else tm.BinaryPrecisionRecallCurve
                    _assert_same(ours(preds, target), binary(thresholds=thresholds)(probs.flatten(), one_hot.flatten()))
                    continue
                theirs = theirs_cls(**SIZE[task], thresholds=thresholds, **kwargs)
                for half in (slice(0, 30), slice(30, 60)):
                    _assert_same(ours(preds[half], target[half]), theirs(preds[half], target[half]))
                _assert_same(ours.compute(), theirs.compute())


def test_functional_curve_averages_as_torchmetrics() -> None:
    preds, target = _data("multiclass", 2)
    for average in ("micro", "macro"):
        _assert_same(
            roc(preds, target, task="multiclass", num_classes=4, average=average),
            tm.MulticlassROC(4, average=average)(preds, target),
        )
        _assert_same(
            precision_recall_curve(preds, target, task="multiclass", num_classes=4, average=average),
            tm.MulticlassPrecisionRecallCurve(4, average=average)(preds, target),
        )
    with pytest.raises(ValueError, match="`average` to be one of \\(None,\\) for task='multilabel'"):
        roc(*_data("multilabel", 2), task="multilabel", num_labels=4, average="micro")  # type: ignore[arg-type]


def test_micro_roc_is_the_one_hot_binary_curve() -> None:
    """``average="micro"``: every one-vs-rest entry as one problem (scikit-learn on the one-hot flattening)."""
    preds, target = _data("multiclass", 3)
    metric = tv.VarlenMulticlassAUROC(4)
    metric.update(preds, target)
    one_hot = torch.nn.functional.one_hot(target, 4).flatten()
    fpr, tpr, _ = tv.VarlenMulticlassROC(4, average="micro")(preds, target)
    assert float(torch.trapezoid(tpr.double(), fpr.double())) == pytest.approx(
        roc_auc_score(one_hot, preds.flatten().double()), abs=1e-6
    )
    assert float(metric.compute()) == pytest.approx(
        f32(sum(roc_auc_score(target == k, preds[:, k].double()) for k in range(4)) / 4), abs=1e-7
    )


def test_compute_on_rank_is_checked_without_a_process_group_too() -> None:
    """One process is rank 0 of 1: ``compute_on_rank=5`` fails at compute() as it does on a 2-rank group."""
    metric = tv.VarlenAUROC(compute_on_rank=5)
    metric.update(torch.tensor([0.1, 0.9]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"`compute_on_rank` of VarlenAUROC to be None or a rank between 0 and 0"):
        metric.compute()
    with pytest.raises(ValueError, match=r"compute_on_rank=5 but no process group is initialised"):
        metric.compute()
    ok = tv.VarlenAUROC(compute_on_rank=0)
    ok.update(torch.tensor([0.1, 0.9]), torch.tensor([0, 1]))
    assert float(ok.compute()) == 1.0


@pytest.mark.parametrize("cls", [tv.VarlenROC, tv.VarlenBestF1, tv.VarlenGroupAUROC, tv.VarlenMulticlassROC])
def test_compute_sharded_only_where_it_works(cls: type) -> None:
    args = (3,) if cls is tv.VarlenMulticlassROC else ()
    with pytest.raises(ValueError, match="`compute_sharded` to be False for Varlen.*only AUROC and average precision"):
        cls(*args, compute_sharded=True)
    assert tv.VarlenMulticlassAUROC(3, compute_sharded=True).compute_sharded


@pytest.mark.parametrize("cls", list(PAIRS), ids=lambda c: c.__name__)
def test_task_classes_are_scriptable(cls: type) -> None:
    metric = cls(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(metric)
    assert metric.mode.kind == "exact"
    assert cls(3, thresholds=5).mode.kind == "binned"
    assert cls(3, thresholds=torch.bfloat16).mode == type(metric.mode)("histogram", torch.bfloat16)
