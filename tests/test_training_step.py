"""A training step hands the metric the model's outputs, which require grad: ``forward`` (and ``update``) take them
without a warning (the suite turns every warning into an error, so any warning fails here) and store them without
their autograd graph (kept until ``reset()``, it would hold every step's activations), and the values are
scikit-learn's on the detached scores, for every task and intake setting.

torch warns of a scalar read of a tensor that requires grad once per process, so only the first case to run could
catch it coming back: :class:`_NoHostReadOfGrad` fails every case on such a read instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from _float32 import expit, f32
from sklearn.metrics import roc_auc_score
from torch import Tensor
from torch.overrides import TorchFunctionMode

import torchmetrics_varlen as tv

SETTINGS: dict[str, Callable[[], Any]] = {
    "binary": tv.VarlenAUROC,
    "binary ignore_index": lambda: tv.VarlenAUROC(ignore_index=-1),
    "binary normalization=None": lambda: tv.VarlenAUROC(normalization=None),
    "binary 16-bit": lambda: tv.VarlenAUROC(thresholds=torch.bfloat16, normalization=None),
    "multiclass": lambda: tv.VarlenMulticlassAUROC(num_classes=3, average="macro"),
    "multiclass ignore_index": lambda: tv.VarlenMulticlassAUROC(num_classes=3, average="macro", ignore_index=-1),
    "multilabel": lambda: tv.VarlenMultilabelAUROC(num_labels=3, average="macro"),
    "collection": lambda: tv.VarlenCollection({"auroc": tv.VarlenAUROC(), "ap": tv.VarlenAveragePrecision()}),
}


class _NoHostReadOfGrad(TorchFunctionMode):
    """Fail on a read to the host (``float()``, ``int()``, ``item()``, ``tolist()``, ``numpy()``) of a tensor that
    requires grad: what torch's "Converting a tensor with requires_grad=True to a scalar" warning is about.
    """

    READS = frozenset({Tensor.item, Tensor.__float__, Tensor.__int__, Tensor.__index__, Tensor.tolist, Tensor.numpy})

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in self.READS and isinstance(args[0], Tensor) and args[0].requires_grad:
            msg = f"{func.__name__}() of a tensor that requires grad"
            raise AssertionError(msg)
        return func(*args, **(kwargs or {}))


def _data(name: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    if name.startswith("multiclass"):
        target = torch.randint(0, 3, (32,), generator=gen)
        return torch.randn(32, 3, generator=gen) * 3, target
    if name.startswith("multilabel"):
        return torch.randn(32, 3, generator=gen) * 3, torch.randint(0, 2, (32, 3), generator=gen)
    # logits k / 8: exact in bfloat16, so the 16-bit mode gives the exact value too
    return torch.randint(-24, 25, (32,), generator=gen) / 8, torch.randint(0, 2, (32,), generator=gen)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_outputs_that_require_grad_are_taken_without_a_warning(name: str) -> None:
    metric = SETTINGS[name]()
    weights = torch.nn.Parameter(torch.tensor(1.0))
    batches = [_data(name, seed) for seed in range(3)]
    for i, (logits, target) in enumerate(batches):
        outputs = logits * weights  # a model's output: requires grad
        with _NoHostReadOfGrad():
            if i == 1:
                metric(outputs, target)  # the training step's forward
            else:
                metric.update(outputs, target)
        members = metric.values() if isinstance(metric, tv.VarlenCollection) else [metric]
        stored = [p for m in members for p in getattr(m, "preds", [])]  # (the 16-bit mode keeps counts only)
        assert not any(p.requires_grad for p in stored)  # no autograd graph kept until reset()
    value = metric.compute()
    value = value["auroc"] if isinstance(value, dict) else value
    logits = torch.cat([b[0] for b in batches]).double()
    target = torch.cat([b[1] for b in batches])
    scores = logits if "normalization=None" in name or "16-bit" in name else expit(logits)
    if name.startswith("binary") or name == "collection":
        expected = roc_auc_score(target.numpy(), scores.numpy())
    else:
        probs = torch.softmax(logits, dim=1) if name.startswith("multiclass") else scores
        onehot = torch.nn.functional.one_hot(target, 3) if name.startswith("multiclass") else target
        expected = roc_auc_score(onehot.numpy(), probs.numpy(), average="macro")
    assert float(value) == pytest.approx(f32(expected), abs=1e-6)
