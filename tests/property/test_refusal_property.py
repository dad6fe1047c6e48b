"""Hypothesis: any schedule of good and refused batches, through ``update`` and ``forward``, on a metric or a
collection, leaves the value of the good batches alone: bit for bit what the same metrics give fed only those.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _float32 import f32
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision, VarlenBestF1, VarlenCollection

pytestmark = pytest.mark.property
SETTINGS = settings(max_examples=150, deadline=None)

MAKERS: dict[str, Any] = {
    "auroc": VarlenAUROC,
    "auroc bf16": lambda: VarlenAUROC(thresholds=torch.bfloat16),
    "auroc binned": lambda: VarlenAUROC(thresholds=11),
    "auroc ignore -1": lambda: VarlenAUROC(ignore_index=-1),
    "ap": VarlenAveragePrecision,
    "best f1": VarlenBestF1,
}
FAULTS = ("label 2", "label -1", "nan", "shape", "weights")


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


def _takes(make: Any, accepted: list[Any], args: Any, kwargs: Any) -> bool:
    metric = make()
    for batch_args, batch_kwargs in accepted:
        metric.update(*batch_args, **batch_kwargs)
    try:
        metric.update(*args, **kwargs)
    except (ValueError, TypeError):
        return False
    return True


# One-class data sets warn (as torchmetrics does) and compute their defined value: expected here, on both sides.
@pytest.mark.filterwarnings("ignore:No (positive|negative) samples:UserWarning")
@SETTINGS
@given(
    names=st.lists(st.sampled_from(sorted(MAKERS)), min_size=1, max_size=3, unique=True),
    steps=st.lists(
        st.tuples(st.sampled_from(("update", "forward")), st.integers(1, 40), st.sampled_from((None, *FAULTS))),
        min_size=1,
        max_size=8,
    ),
    collection=st.booleans(),
)
def test_refused_batches_leave_the_good_ones_alone(names: list[str], steps: list[Any], collection: bool) -> None:
    members = {name: MAKERS[name]() for name in names}
    metrics = VarlenCollection(members) if collection or len(names) > 1 else members[names[0]]
    accepted: list[Any] = []  # (args, kwargs) of the batches taken
    for seed, (call, size, fault) in enumerate(steps):
        preds, target = _batch(seed, size)
        args, kwargs = ((preds, target), {}) if fault is None else _faulty(preds, target, fault)
        step = metrics.update if call == "update" else metrics.forward
        # The batch is taken when every member alone takes it (a collection is all or nothing).
        if all(_takes(MAKERS[name], accepted, args, kwargs) for name in names):
            step(*args, **kwargs)
            accepted.append((args, kwargs))
        else:
            with pytest.raises((ValueError, TypeError)):
                step(*args, **kwargs)
    if not accepted:
        return
    values = metrics.compute() if isinstance(metrics, VarlenCollection) else {names[0]: metrics.compute()}
    for name in names:
        reference = MAKERS[name]()
        for batch_args, batch_kwargs in accepted:
            reference.update(*batch_args, **batch_kwargs)
        got, expected = values[name], reference.compute()
        pairs = zip(*((v if isinstance(v, tuple) else (v,)) for v in (got, expected)), strict=True)
        for a, b in pairs:
            assert torch.equal(a, b) or bool(a.isnan().all() and b.isnan().all()), (name, steps)
    if "auroc" in names:  # and the value itself is scikit-learn's on the batches taken
        preds = torch.cat([args[0] for args, _ in accepted]).double().numpy()
        target = torch.cat([args[1] for args, _ in accepted]).numpy()
        if 0 < target.sum() < target.size:
            assert float(values["auroc"]) == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-7), steps
