"""Hypothesis: any schedule of good and refused batches, through ``update`` and ``forward``, on a metric or a
collection (the package's metrics, and a torchmetrics metric in ``Varlen``, which refuses by its own rules), leaves
the value of the good batches alone: bit for bit what the same metrics give fed only those. Each batch comes as a
training step's outputs (they require grad), under ``no_grad`` or under ``inference_mode`` (Lightning's evaluation
loop), and the metric may have been reset under ``inference_mode`` first.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from _float32 import f32
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score
from torchmetrics.classification import BinaryAccuracy, BinaryAUROC

from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenAveragePrecision, VarlenBestF1, VarlenCollection

pytestmark = pytest.mark.property
SETTINGS = settings(max_examples=150, deadline=None)

MAKERS: dict[str, Any] = {
    "auroc": VarlenAUROC,
    "auroc bf16": lambda: VarlenAUROC(thresholds=torch.bfloat16),
    "auroc binned": lambda: VarlenAUROC(thresholds=11),
    "auroc ignore -1": lambda: VarlenAUROC(ignore_index=-1),
    "ap": VarlenAveragePrecision,
    "best f1": VarlenBestF1,
    "accuracy": lambda: Varlen(BinaryAccuracy()),  # refuses labels -1 and 2 itself (a RuntimeError), takes NaN
    "tm auroc ignore -1": lambda: Varlen(BinaryAUROC(ignore_index=-1)),  # list states, a piece per batch
}
REFUSALS = (ValueError, TypeError, RuntimeError, IndexError)  # (IndexError: torchmetrics on some 1-row batches)
FAULTS = ("label 2", "label -1", "nan", "shape", "weights")
GRAD_MODES = ("grad", "no_grad", "inference")  # how a batch arrives: a model's outputs, no_grad, inference_mode


def _batch(seed: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (size,), generator=gen)
    return torch.rand(size, generator=gen) * 0.7 + 0.3 * target, target


def _faulty(preds: torch.Tensor, target: torch.Tensor, fault: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    preds, target = preds.clone(), target.clone()
    if fault == "label 2":
        target[0] = 2
    elif fault == "label -1":
        target[0] = -1
    elif fault == "nan":
        preds[0] = float("nan")
    elif fault == "shape":
        target = target[:-1]
    else:  # weights: refused by best F1, and in an epoch that started without them (or with them, then without)
        return (preds, target), {"sample_weight": torch.ones(preds.shape[0])}
    return (preds, target), {}


def _arriving(args: tuple[Any, ...], grad_mode: str) -> tuple[tuple[Any, ...], Any]:
    """The batch's arguments as they arrive in ``grad_mode``, and the context to give them in."""
    if grad_mode == "no_grad":
        return args, torch.no_grad()
    if grad_mode == "inference":
        return args, torch.inference_mode()
    weight = torch.nn.Parameter(torch.tensor(1.0))  # the scores are a model's outputs: they require grad
    return (args[0] * weight, *args[1:]), contextlib.nullcontext()


def _fed(make: Any, accepted: list[Any], in_collection: bool) -> Any:
    metric = make()
    for batch_args, batch_kwargs in accepted:
        metric.update(*batch_args, **_given(metric, batch_kwargs, in_collection))
    return metric


def _given(metric: Any, kwargs: dict[str, Any], in_collection: bool) -> dict[str, Any]:
    """The keywords a metric gets: in a collection, those its ``update`` takes (``MetricCollection``'s rule)."""
    return metric._filter_kwargs(**kwargs) if in_collection else kwargs


def _takes(make: Any, accepted: list[Any], args: Any, kwargs: Any, in_collection: bool) -> bool:
    metric = _fed(make, accepted, in_collection)
    try:
        metric.update(*args, **_given(metric, kwargs, in_collection))
    except REFUSALS:
        return False
    return True


# One-class data sets warn (as torchmetrics does) and compute their defined value: expected here, on both sides.
@pytest.mark.filterwarnings("ignore:No (positive|negative) samples:UserWarning")
@SETTINGS
@given(
    names=st.lists(st.sampled_from(sorted(MAKERS)), min_size=1, max_size=3, unique=True),
    steps=st.lists(
        st.tuples(
            st.sampled_from(("update", "forward")),
            st.integers(1, 40),
            st.sampled_from((None, *FAULTS)),
            st.sampled_from(GRAD_MODES),
        ),
        min_size=1,
        max_size=8,
    ),
    collection=st.booleans(),
    reset_in_inference=st.booleans(),
)
# a package metric that takes the label -1, updated before the torchmetrics one that refuses it
@example(
    names=["auroc ignore -1", "accuracy"],
    steps=[
        ("update", 8, None, "grad"),
        ("update", 8, "label -1", "no_grad"),
        ("forward", 8, "label -1", "grad"),
        ("update", 8, None, "no_grad"),
    ],
    collection=True,
    reset_in_inference=False,
)
# a torchmetrics metric with list states that takes the label -1, updated before the package's AP that refuses it
@example(
    names=["tm auroc ignore -1", "ap"],
    steps=[
        ("update", 8, None, "no_grad"),
        ("update", 8, "label -1", "no_grad"),
        ("update", 8, None, "inference"),
        ("forward", 8, "label -1", "grad"),
    ],
    collection=True,
    reset_in_inference=False,
)
# reset in inference mode (inference tensors as states), then batches and a refusal outside it
@example(
    names=["auroc bf16", "auroc"],
    steps=[("update", 8, None, "grad"), ("update", 8, "nan", "no_grad"), ("forward", 8, None, "grad")],
    collection=True,
    reset_in_inference=True,
)
def test_refused_batches_leave_the_good_ones_alone(
    names: list[str], steps: list[Any], collection: bool, reset_in_inference: bool
) -> None:
    # keyed in the drawn order (a collection updates its members in the order of their keys)
    members = {f"{i}_{name}": MAKERS[name]() for i, name in enumerate(names)}
    in_collection = collection or len(names) > 1
    metrics = VarlenCollection(members) if in_collection else next(iter(members.values()))
    if reset_in_inference:
        with torch.inference_mode():
            metrics.reset()
    accepted: list[Any] = []  # (args, kwargs) of the batches taken (as plain tensors)
    for seed, (call, size, fault, grad_mode) in enumerate(steps):
        preds, target = _batch(seed, size)
        args, kwargs = ((preds, target), {}) if fault is None else _faulty(preds, target, fault)
        given, context = _arriving(args, grad_mode)
        step = metrics.update if call == "update" else metrics.forward
        # The batch is taken when every member alone takes it (a collection is all or nothing), and a collection
        # refuses a keyword that none of its members takes.
        taken = all(_takes(MAKERS[name], accepted, args, kwargs, in_collection) for name in names)
        if in_collection and kwargs:
            taken = taken and all(any(key in _given(m, kwargs, True) for m in members.values()) for key in kwargs)
        with context:
            if taken:
                step(*given, **kwargs)
                accepted.append((args, kwargs))
            else:
                with pytest.raises(REFUSALS):
                    step(*given, **kwargs)
    if not accepted:
        return
    references = {}
    for name in names:
        try:
            references[name] = _fed(MAKERS[name], accepted, in_collection).compute()
        except IndexError:  # torchmetrics' BinaryAUROC over no sample (every label ignored): so must ours fail
            with pytest.raises(IndexError):
                metrics.compute()
            return
    computed = metrics.compute() if isinstance(metrics, VarlenCollection) else {f"0_{names[0]}": metrics.compute()}
    values = {key.split("_", 1)[1]: value for key, value in computed.items()}
    for name in names:
        got, expected = values[name], references[name]
        pairs = zip(*((v if isinstance(v, tuple) else (v,)) for v in (got, expected)), strict=True)
        for a, b in pairs:
            assert torch.equal(a, b) or bool(a.isnan().all() and b.isnan().all()), (name, steps)
    if "auroc" in names:  # and the value itself is scikit-learn's on the batches taken
        preds = torch.cat([args[0] for args, _ in accepted]).double().numpy()
        target = torch.cat([args[1] for args, _ in accepted]).numpy()
        if 0 < target.sum() < target.size:
            assert float(values["auroc"]) == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-7), steps
