"""Hypothesis: weighted curves of any tied, weighted data set keep the shape of a curve and equal scikit-learn's.

Each example draws a data set (a few score levels, so heavy ties; labels whose scores may be shifted, so the top
scores can hold one class only; weights from awkward decimals, 0, and any float in [1e-3, 1e3]), a task (binary,
multiclass with 3 classes, multilabel with 2 labels), a mode (exact, float16, bfloat16, binned) and a batch size.
The functional curves and the classes fed in those batches must give the same bits, scikit-learn's values on the
scores the curve is over, rates in [0, 1] that never decrease, exactly 0 before a class's first sample of positive
weight and exactly 1 at the end, precision exactly 1 where no negative weight is at or above the threshold (see
``tests/_weighted_curves.py``). A derandomised run of 25 examples is part of the default suite; ``nox -s property``
runs 150 (``WEIGHTED_CURVE_EXAMPLES`` overrides the count).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from _data import flat_tensors
from _weighted_curves import AWKWARD, check_binned, check_pr, check_roc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchmetrics_varlen as tv
from torchmetrics_varlen.functional import precision_recall_curve, roc

MODES: dict[str, Any] = {"exact": None, "float16": torch.float16, "bfloat16": torch.bfloat16, "binned": 9}
WIDTH = {"binary": 1, "multiclass": 3, "multilabel": 2}
WEIGHTS = st.one_of(st.sampled_from((*AWKWARD, 0.0)), st.floats(1e-3, 1e3))


@st.composite
def weighted_cases(draw: st.DrawFn) -> dict[str, Any]:
    task = draw(st.sampled_from(list(WIDTH)))
    width = WIDTH[task]
    n = draw(st.integers(3 if task == "multiclass" else 2, 40))
    levels = draw(st.integers(1, 12))
    shift = draw(st.integers(0, levels))  # positives score up to `shift` levels higher
    if task == "multiclass":
        labels = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        labels[:3] = [0, 1, 2]
        positive = [[k == label for k in range(3)] for label in labels]
    else:
        positive = [draw(st.lists(st.booleans(), min_size=width, max_size=width)) for _ in range(n)]
        positive[0], positive[1] = [False] * width, [True] * width
        labels = positive
    scores = [[min(levels, draw(st.integers(0, levels)) + shift * p) / levels for p in row] for row in positive]
    weight = draw(st.lists(WEIGHTS, min_size=n, max_size=n))
    weight[0], weight[1] = 0.3, 0.1  # both classes of every column keep a positive weight
    return {
        "task": task,
        "preds": scores,
        "target": labels,
        "weight": weight,
        "mode": draw(st.sampled_from(list(MODES))),
        "batch": draw(st.integers(1, n)),
    }


def _check(case: dict[str, Any]) -> None:
    task, mode = case["task"], case["mode"]
    width = WIDTH[task]
    preds = torch.tensor(case["preds"], dtype=torch.float64)
    target = torch.tensor(case["target"]).long()
    weight = torch.tensor(case["weight"], dtype=torch.float64)
    if task == "binary":
        preds, target = preds[:, 0], target[:, 0]
    thresholds = MODES[mode]
    kw: dict[str, Any] = {"task": task, "thresholds": thresholds}
    cls_kw: dict[str, Any] = {"task": task, "thresholds": thresholds}
    if task != "binary":
        key = "num_classes" if task == "multiclass" else "num_labels"
        kw[key] = cls_kw[key] = width
    curves = {
        "roc": roc(preds, target, sample_weight=weight, **kw),
        "pr": precision_recall_curve(preds, target, sample_weight=weight, **kw),
    }
    step = case["batch"]
    for name, cls in (("roc", tv.VarlenROC), ("pr", tv.VarlenPrecisionRecallCurve)):
        metric = cls(**cls_kw)
        for s in range(0, len(weight), step):
            metric.update(preds[s : s + step], target[s : s + step], sample_weight=weight[s : s + step])
        got, want = flat_tensors(metric.compute()), flat_tensors(curves[name])
        assert len(got) == len(want)
        # a single threshold comes back 0-dim from a class (torchmetrics' compute squeezes it), 1-D from the function;
        # binned precision is NaN where nothing is predicted positive
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            assert torch.allclose(g.reshape(-1), w.reshape(-1), rtol=0, atol=0, equal_nan=True)
    scores = preds if isinstance(thresholds, int) or thresholds is None else preds.to(thresholds).double()
    for k in range(width):
        column = scores if task == "binary" else scores[:, k]
        positives = (target == k) if task == "multiclass" else (target if task == "binary" else target[:, k]).bool()

        def pick(curve: Any, k: int = k) -> Any:
            if task == "binary":
                return curve
            return [c[k] for c in curve]

        if mode == "binned":
            grid = torch.linspace(0, 1, thresholds, dtype=torch.float32).double()
            check_binned(pick(curves["roc"]), pick(curves["pr"]), column, positives, weight, grid)
        else:
            check_roc(pick(curves["roc"]), column, positives, weight)
            check_pr(pick(curves["pr"]), column, positives, weight)


_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}


@settings(max_examples=25, derandomize=True, **_COMMON)
@given(case=weighted_cases())
def test_weighted_curves_small(case: dict[str, Any]) -> None:
    """The default suite's short run of the property below (the same examples every time)."""
    _check(case)


@pytest.mark.property
@settings(max_examples=int(os.environ.get("WEIGHTED_CURVE_EXAMPLES", "150")), **_COMMON)
@given(case=weighted_cases())
def test_weighted_curves(case: dict[str, Any]) -> None:
    """Any tied weighted data set, task, mode and batch size: scikit-learn's curve, with the shape of a curve."""
    _check(case)
