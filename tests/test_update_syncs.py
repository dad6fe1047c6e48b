"""``update()`` does not wait for the device (issue 37, part 6): counted on CPU tensors that take the device path
(``force_device_path()``) with :class:`~_syncs.HostSyncCounter`, every host read per ``update()``: none with
``validate_args=False``, at most one (the fused range read that refuses a bad batch) with ``validate_args=True``, on
the first batch after construction or ``reset()`` as on every other, whatever the batch size. The values stay the
CPU path's (bit for bit) and scikit-learn's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from _syncs import HostSyncCounter
from sklearn.metrics import average_precision_score, roc_auc_score

import torchmetrics_varlen as tv
from torchmetrics_varlen.functional._device import force_device_path

SIZES = (1_000, 10_000, 100_000)
K = 4


def _binary(n: int, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    target = torch.randint(0, 2, (n,), generator=gen)
    logits = torch.randn(n, generator=gen) + target
    if kind == "probs":
        return torch.sigmoid(logits.double()).float(), target
    return (logits.bfloat16() if kind == "bf16" else logits), target


def _rows(n: int, task: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n + 1)
    if task == "multiclass":
        target = torch.randint(0, K, (n,), generator=gen)
        return torch.randn(n, K, generator=gen) + torch.nn.functional.one_hot(target, K), target
    target = torch.randint(0, 2, (n, K), generator=gen)
    return torch.randn(n, K, generator=gen) + target, target


CASES: dict[str, tuple[Callable[[bool], Any], Callable[[int], tuple[torch.Tensor, torch.Tensor]]]] = {
    "probabilities": (lambda v: tv.VarlenAUROC(validate_args=v), lambda n: _binary(n, "probs")),
    "float32 logits": (lambda v: tv.VarlenAUROC(validate_args=v), lambda n: _binary(n, "f32")),
    "bfloat16 logits": (lambda v: tv.VarlenAUROC(validate_args=v), lambda n: _binary(n, "bf16")),
    "dataset_size": (lambda v: tv.VarlenAUROC(validate_args=v, dataset_size=10**9), lambda n: _binary(n, "f32")),
    "16-bit mode": (lambda v: tv.VarlenAUROC(thresholds=torch.bfloat16, validate_args=v), lambda n: _binary(n, "f32")),
    "16-bit mode probabilities": (
        lambda v: tv.VarlenAUROC(thresholds=torch.float16, validate_args=v),
        lambda n: _binary(n, "probs"),
    ),
    "average precision": (lambda v: tv.VarlenAveragePrecision(validate_args=v), lambda n: _binary(n, "f32")),
    "multiclass": (
        lambda v: tv.VarlenMulticlassAUROC(num_classes=K, validate_args=v),
        lambda n: _rows(n, "multiclass"),
    ),
    "multiclass 16-bit": (
        lambda v: tv.VarlenMulticlassAUROC(num_classes=K, thresholds=torch.float16, validate_args=v),
        lambda n: _rows(n, "multiclass"),
    ),
    "multilabel": (
        lambda v: tv.VarlenMultilabelAUROC(num_labels=K, validate_args=v),
        lambda n: _rows(n, "multilabel"),
    ),
    "multilabel 16-bit": (
        lambda v: tv.VarlenMultilabelAUROC(num_labels=K, thresholds=torch.bfloat16, validate_args=v),
        lambda n: _rows(n, "multilabel"),
    ),
}


def _reads_per_update(make: Callable[[bool], Any], data: Any, validate: bool) -> list[int]:
    """Host reads of each of three updates: the first after construction, another, the first after ``reset()``."""
    metric = make(validate)
    reads = []
    with force_device_path():
        for step in range(3):
            if step == 2:
                metric.reset()
            with HostSyncCounter() as syncs:
                metric.update(*data)
            reads.append(syncs.total)
    return reads


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("validate", [False, True])
def test_update_reads_nothing_back_from_the_device(name: str, validate: bool) -> None:
    make, data = CASES[name]
    expected = 1 if validate else 0
    for n in SIZES:
        assert _reads_per_update(make, data(n), validate) == [expected] * 3, (name, n)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.filterwarnings("ignore:.*dataset_size=1000000000")  # 3,000 of them seen, as the test means
def test_device_path_values_equal_the_cpu_path(name: str) -> None:
    make, data = CASES[name]
    preds, target = data(3_000)
    values = []
    for forced in (False, True):
        metric = make(False)
        for start in range(0, 3_000, 512):  # batches of logits and of probabilities alike
            batch = slice(start, start + 512)
            if forced:
                with force_device_path():
                    metric.update(preds[batch], target[batch])
            else:
                metric.update(preds[batch], target[batch])
        values.append(metric.compute())
    assert torch.equal(values[0], values[1]), name


@pytest.mark.parametrize("kind", ["probs", "f32", "bf16"])
def test_device_path_equals_sklearn(kind: str) -> None:
    """The device path's sigmoid is the CPU path's (the float64 sigmoid rounded once): scikit-learn's AUROC / AP on
    the float32 scores, and the same bits as the CPU path for batches of any size (4,096+ too).
    """
    preds, target = _binary(20_000, kind)
    scores = preds.float() if kind == "probs" else torch.sigmoid(preds.double()).float()
    for cls, fn in ((tv.VarlenAUROC, roc_auc_score), (tv.VarlenAveragePrecision, average_precision_score)):
        cpu, device = cls(validate_args=False), cls(validate_args=False)
        for start in range(0, 20_000, 5_000):
            cpu.update(preds[start : start + 5_000], target[start : start + 5_000])
            with force_device_path():
                device.update(preds[start : start + 5_000], target[start : start + 5_000])
        value = device.compute()
        assert torch.equal(value, cpu.compute())
        assert float(value) == pytest.approx(fn(target.numpy(), scores.double().numpy()), abs=1e-6)


def test_mixed_batches_choose_the_sigmoid_per_batch() -> None:
    """The per-batch rule of torchmetrics, decided on the device: a batch inside [0, 1] is kept, one outside is
    normalised.
    """
    probs, target = _binary(1_000, "probs")
    logits = torch.logit(probs.double()).float()
    cpu, device = tv.VarlenAUROC(validate_args=False), tv.VarlenAUROC(validate_args=False)
    batches = [(probs[:500], target[:500]), (logits[500:], target[500:])]
    for batch in batches:
        cpu.update(*batch)
        with force_device_path():
            device.update(*batch)
    value = device.compute()
    assert torch.equal(value, cpu.compute())
    scores = torch.cat((probs[:500], torch.sigmoid(logits[500:].double()).float()))
    assert float(value) == pytest.approx(roc_auc_score(target.numpy(), scores.double().numpy()), abs=1e-6)
