"""The 16-bit mode in O(65,536) (issue 37, part 2): ``compute()`` is a fixed number of whole-histogram operations
whatever N (no loop over chunks of the counts), on the CPU path and the device path alike; ``update()`` counts in
place (no ``torch.bincount``); AUROC equals the exact AUROC of the rounded scores bit for bit on both paths, and
scikit-learn's; AP equals the exact path's float32 output.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from torch.overrides import TorchFunctionMode

import torchmetrics_varlen as tv
from torchmetrics_varlen.functional import auroc, average_precision
from torchmetrics_varlen.functional._device import force_device_path

DTYPES = [torch.float16, torch.bfloat16]
RAW = {"normalization": None}


class _Calls(TorchFunctionMode):
    """Every torch function called (by name), to compare the work of two runs."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def _data(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, generator=gen) * 2
    return logits, (torch.rand(n, generator=gen) < torch.sigmoid(logits)).long()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [20_000, 300_000])  # one chunk of the exact path, and several
def test_auroc_bit_for_bit_on_both_paths(dtype: torch.dtype, n: int) -> None:
    preds, target = _data(n, n)
    rounded = preds.to(dtype)
    exact = auroc(rounded, target, **RAW)
    exact_ap = average_precision(rounded, target, **RAW)
    sk = roc_auc_score(target.numpy(), rounded.double().numpy())
    sk_ap = average_precision_score(target.numpy(), rounded.double().numpy())
    for forced in (False, True):
        with force_device_path() if forced else _nothing():
            value = auroc(preds, target, thresholds=dtype, **RAW)
            ap = average_precision(preds, target, thresholds=dtype, **RAW)
            metric = tv.VarlenAUROC(thresholds=dtype, validate_args=False, **RAW)
            for start in range(0, n, 4_096):
                metric.update(preds[start : start + 4_096], target[start : start + 4_096])
            from_batches = metric.compute()
        assert value.item() == exact.item() == from_batches.item(), forced
        assert value.item() == pytest.approx(sk, abs=1e-6)
        assert ap.item() == exact_ap.item(), forced
        assert ap.item() == pytest.approx(sk_ap, abs=1e-6)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: Any) -> None:
        return None


@pytest.mark.parametrize("forced", [False, True])
def test_compute_work_does_not_grow_with_n(forced: bool) -> None:
    """The same torch calls for 40,000 and 2,000,000 samples (was about N / 65,536 chunk iterations); both batches
    are big enough to be counted by ``update()`` itself (none held).
    """
    calls = []
    for n in (40_000, 2_000_000):
        preds, target = _data(n, 1)
        metric = tv.VarlenAveragePrecision(thresholds=torch.bfloat16, **RAW)
        metric.update(preds, target)
        with force_device_path() if forced else _nothing(), _Calls() as seen:
            metric.compute()
        calls.append(seen.names)
    assert calls[0] == calls[1]
    assert len(calls[0]) < 200


def test_update_counts_in_place_without_bincount() -> None:
    preds, target = _data(100_000, 2)
    for cls, kwargs, data in (
        (tv.VarlenAUROC, {}, (preds, target)),
        (tv.VarlenMulticlassAUROC, {"num_classes": 4}, (preds.reshape(-1, 4), target[:25_000] % 4)),
        (
            tv.VarlenMultilabelAUROC,
            {"num_labels": 4, "ignore_index": -1},
            (preds.reshape(-1, 4), target.reshape(-1, 4)),
        ),
    ):
        metric = cls(thresholds=torch.float16, validate_args=False, **kwargs)
        for forced in (False, True):
            with force_device_path() if forced else _nothing(), _Calls() as seen:
                metric.update(*data)  # big enough to be counted at once (not held)
            assert "bincount" not in seen.names
            assert "index_add_" in seen.names or "scatter_add_" in seen.names


@pytest.mark.parametrize("dtype", DTYPES)
def test_multiclass_and_multilabel_on_the_device_path(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    preds = torch.rand(3_000, 4, generator=gen)
    target = torch.arange(3_000) % 4
    ml_target = torch.randint(0, 2, (3_000, 4), generator=gen)
    ml_target[::7, 1] = -1  # ignored entries (counted as 0 on the device path, dropped on the CPU path)
    for task, labels, extra in (("multiclass", target, {}), ("multilabel", ml_target, {"ignore_index": -1})):
        kwargs: dict[str, Any] = {"task": task, "num_classes": 4, "num_labels": 4, "average": "none", **extra}
        cpu = auroc(preds, labels, thresholds=dtype, **kwargs)
        with force_device_path():
            device = auroc(preds, labels, thresholds=dtype, **kwargs)
        exact = auroc(preds.to(dtype), labels, **kwargs)
        assert torch.equal(cpu, device), task
        assert torch.equal(cpu, exact), task
