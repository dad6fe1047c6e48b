"""States made under ``torch.inference_mode()`` (Lightning's evaluation loop resets and syncs there) are inference
tensors, which only inference mode may write in place: a metric reset inside it takes batches outside it too (a
manual loop under ``no_grad`` after ``trainer.validate``), as torchmetrics' own list-state metrics do, and a refused
batch there is put back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from _float32 import f32
from sklearn.metrics import accuracy_score, roc_auc_score
from torchmetrics.classification import BinaryAccuracy

from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenCollection


def _batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(3):
        target = torch.randint(0, 2, (48,), generator=gen)
        out.append((torch.randint(0, 65, (48,), generator=gen) / 64, target))  # exact in bfloat16
    return out


MAKERS: dict[str, Callable[[], Any]] = {
    "exact": VarlenAUROC,
    "16-bit": lambda: VarlenAUROC(thresholds=torch.bfloat16),
    "weighted 16-bit": lambda: VarlenAUROC(thresholds=torch.bfloat16),
    "Varlen": lambda: Varlen(BinaryAccuracy()),
    "collection": lambda: VarlenCollection({"acc": BinaryAccuracy(), "auroc": VarlenAUROC(ignore_index=-1)}),
}


def _expected(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    preds = torch.cat([p for p, _ in batches]).numpy()
    target = torch.cat([t for _, t in batches]).numpy()
    return {
        "auroc": f32(roc_auc_score(target, preds)),
        "acc": f32(accuracy_score(target, preds > 0.5)),
    }  # torchmetrics: preds > threshold


def _values(kind: str, metric: Any) -> dict[str, float]:
    value = metric.compute()
    if kind == "collection":
        return {name: float(v) for name, v in value.items()}
    return {("acc" if kind == "Varlen" else "auroc"): float(value)}


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_metric_reset_in_inference_mode_takes_batches_outside_it(kind: str) -> None:
    metric = MAKERS[kind]()
    weights = {"sample_weight": torch.ones(48)} if kind == "weighted 16-bit" else {}
    first, second = _batches(0), _batches(1)
    with torch.inference_mode():  # a validation epoch: updated, computed and reset inside inference mode
        for batch in first:
            metric.update(*batch, **weights)
        values, expected = _values(kind, metric), _expected(first)
        assert values == pytest.approx({k: expected[k] for k in values}, abs=1e-7)
        metric.reset()
    with torch.no_grad():  # then a loop outside it, with one refused batch
        for i, batch in enumerate(second):
            metric.update(*batch, **weights)
            if i == 1:
                preds, target = batch
                with pytest.raises((ValueError, RuntimeError)):
                    metric.update(preds, torch.full_like(target, 2), **weights)
    values = _values(kind, metric)
    expected = _expected(second)
    assert values == pytest.approx({k: expected[k] for k in values}, abs=1e-7)
