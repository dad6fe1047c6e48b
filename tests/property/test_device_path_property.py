"""Hypothesis: the device path (``force_device_path``) gives the CPU path's AUROC and curves bit for bit, and its AP
to the float32 output, on drawn binary data: ties, every score width, logits (wide keys), -0.0, one class.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchmetrics_varlen.functional import auroc, average_precision, roc
from torchmetrics_varlen.functional._device import force_device_path

pytestmark = pytest.mark.property


@st.composite
def data(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, bool]:
    n = draw(st.integers(1, 300))
    levels = draw(st.sampled_from([2, 5, 50, 10**6]))
    logits = draw(st.booleans())
    dtype = draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    values = torch.randint(0, levels, (n,), generator=gen).double() / levels
    scores = (values * 8 - 4) if logits else values
    if draw(st.booleans()):
        scores[torch.randint(0, n, (max(1, n // 10),), generator=gen)] = -0.0 if not logits else 0.0
    target = torch.randint(0, 2, (n,), generator=gen)
    return scores.to(dtype), target, logits


@settings(max_examples=60, deadline=None)
@given(data())
def test_device_path_equals_cpu_path(case: tuple[torch.Tensor, torch.Tensor, bool]) -> None:
    preds, target, logits = case
    kw = {"task": "binary", "normalization": None if logits else "sigmoid"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = (auroc(preds, target, **kw), average_precision(preds, target, **kw), roc(preds, target, **kw))
        with force_device_path():
            dev = (auroc(preds, target, **kw), average_precision(preds, target, **kw), roc(preds, target, **kw))
    assert torch.equal(cpu[0], dev[0])
    assert torch.equal(cpu[1], dev[1])
    for a, b in zip(cpu[2], dev[2], strict=True):
        assert a.dtype == b.dtype
        assert torch.equal(a, b)
