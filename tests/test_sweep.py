"""The CPU sweep of curves and best F1 over sorted keys (``functional/_sweep.py``): the same bits as the tensor path
(the one other devices and float64 scores take), a reference written here from the counts, and scikit-learn's values.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from _float32 import f32
from sklearn.metrics import precision_recall_curve as sk_pr_curve
from sklearn.metrics import roc_curve

from torchmetrics_varlen import VarlenBestF1, VarlenPrecisionRecallCurve, VarlenROC
from torchmetrics_varlen.functional import _sort, _sweep, best_f1, precision_recall_curve, roc

RAW = {"normalization": None}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _data(n: int, seed: int, levels: int | None, dtype: torch.dtype, logits: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` scores (probabilities: compact keys; logits of both signs: wide keys) with long runs of ties when
    ``levels`` is small, and 0/1 labels.
    """
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = torch.randn(n, generator=gen, dtype=torch.float64) + 0.8 * target
    if levels is not None:
        preds = torch.round(preds * levels) / levels
    if not logits:
        preds = preds.sigmoid()
    return preds.to(dtype), target


def _bits(t: torch.Tensor) -> torch.Tensor:
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.reshape(-1).view(ints)


def _assert_same_bits(ours: Any, theirs: Any) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype
        assert a.shape == b.shape
        assert torch.equal(_bits(a), _bits(b))


def _all_outputs(preds: torch.Tensor, target: torch.Tensor) -> tuple[Any, list[str]]:
    """ROC, PR curve and best F1 of raw scores, and the warnings they gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = (roc(preds, target, **RAW), precision_recall_curve(preds, target, **RAW), best_f1(preds, target, **RAW))
    return out, [str(w.message) for w in caught]


def _tensor_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Force the tensor path (``materialize`` + ``descending``): the one CUDA tensors take."""
    monkeypatch.setattr(_sweep, "usable", lambda col: False)


def _compare_with_tensor_path(monkeypatch: pytest.MonkeyPatch, preds: torch.Tensor, target: torch.Tensor) -> None:
    ours, our_warnings = _all_outputs(preds, target)
    with monkeypatch.context() as m:
        _tensor_path(m)
        theirs, their_warnings = _all_outputs(preds, target)
    for a, b in zip(ours, theirs, strict=True):
        _assert_same_bits(a, b)
    assert our_warnings == their_warnings


def _reference(preds: torch.Tensor, target: torch.Tensor) -> tuple[Any, Any, Any]:
    """ROC, PR curve and best F1 written here from the counts at every distinct score (``torch.unique``), with the
    arithmetic the package documents: integer counts, one float64 division, one rounding to float32.
    """
    scores = preds.double() + 0.0  # -0.0 -> +0.0
    values, inverse = torch.unique(scores, return_inverse=True)  # increasing
    pos_g = torch.zeros(values.numel(), dtype=torch.int64).index_add_(0, inverse, target.long())
    all_g = torch.bincount(inverse, minlength=values.numel())
    # at or above each distinct score, highest first
    tps, alls = pos_g.flip(0).cumsum(0), all_g.flip(0).cumsum(0)
    fps = alls - tps
    n_pos, n_neg = int(target.sum()), target.numel() - int(target.sum())
    zero = torch.zeros(1, dtype=torch.int64)
    fpr = torch.cat([zero, fps]).double() / n_neg if n_neg else torch.zeros(values.numel() + 1, dtype=torch.float64)
    tpr = torch.cat([zero, tps]).double() / n_pos if n_pos else torch.zeros(values.numel() + 1, dtype=torch.float64)
    thr = values.flip(0).to(preds.dtype)
    roc_ref = (fpr.float(), tpr.float(), torch.cat([thr.new_ones(1), thr]))
    precision = (tps.double() / alls.double()).flip(0)
    recall = (tps.double() / n_pos).flip(0) if n_pos else torch.ones(values.numel(), dtype=torch.float64)
    pr_ref = (
        torch.cat([precision, precision.new_ones(1)]).float(),
        torch.cat([recall, recall.new_zeros(1)]).float(),
        values.to(preds.dtype),
    )
    f1 = 2.0 * tps.double() / (alls + n_pos).double()
    best = int(torch.argmax(f1))
    return roc_ref, pr_ref, (f1[best].float(), thr[best])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("logits", [False, True])
@pytest.mark.parametrize(("n", "levels", "block"), [(1, None, 1), (2, None, 1), (300, 3, 7), (2000, None, 64)])
def test_sweep_gives_the_tensor_paths_bits(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, logits: bool, n: int, levels: int | None, block: int
) -> None:
    """Blocks far smaller than the data, runs of ties that cross many blocks (and blocks inside one run), compact
    keys (probabilities) and wide ones (logits), every packable dtype.
    """
    preds, target = _data(n, 5, levels, dtype, logits)
    problem = _sort.sort_problem(preds, target)
    assert _sweep.usable(problem)
    assert isinstance(problem, _sort.SortedKeys)
    assert logits or problem.compact
    monkeypatch.setattr(_sweep, "BLOCK", block)
    _compare_with_tensor_path(monkeypatch, preds, target)
    for ours, ref in zip(_all_outputs(preds, target)[0], _reference(preds, target), strict=True):
        _assert_same_bits(ours, ref)


@pytest.mark.parametrize(("block", "unit"), [(3, 48), (1 << 16, 1 << 16)])
def test_runs_of_ties_across_block_boundaries(monkeypatch: pytest.MonkeyPatch, block: int, unit: int) -> None:
    """Runs of equal scores longer than a block, of one class and of both, one starting exactly at a block edge
    (``unit``, a multiple of the block, scales the data: 3-key blocks need no 2**16-key runs to be crossed).
    """
    n = 3 * unit + 5
    preds = (torch.arange(n) // (unit + unit // 14)).float() / 8
    target = torch.zeros(n, dtype=torch.long)
    target[unit:] = 1  # the second run: negatives, then positives from a block edge on
    target[-10:] = torch.tensor([0, 1] * 5)
    monkeypatch.setattr(_sweep, "BLOCK", block)
    _compare_with_tensor_path(monkeypatch, preds, target)
    for ours, ref in zip(_all_outputs(preds, target)[0], _reference(preds, target), strict=True):
        _assert_same_bits(ours, ref)


@pytest.mark.parametrize("dtype", DTYPES)
def test_signed_zeros_are_one_threshold(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    preds = torch.tensor([0.0, -0.0, 0.25, -0.0, 0.0, 0.5, -0.0], dtype=dtype)
    target = torch.tensor([1, 0, 0, 1, 0, 1, 1])
    monkeypatch.setattr(_sweep, "BLOCK", 2)
    _compare_with_tensor_path(monkeypatch, preds, target)
    (fpr, tpr, thr), (_, _, pr_thr), (_, f1_thr) = _all_outputs(preds, target)[0]
    assert thr.tolist() == [1.0, 0.5, 0.25, 0.0]
    assert pr_thr.tolist() == [0.0, 0.25, 0.5]
    assert not torch.signbit(thr).any()
    assert not torch.signbit(pr_thr).any()
    assert not torch.signbit(f1_thr)
    sk_fpr, sk_tpr, _ = roc_curve(target, preds.double(), drop_intermediate=False)
    assert fpr.tolist() == f32(sk_fpr)
    assert tpr.tolist() == f32(sk_tpr)


@pytest.mark.parametrize("logits", [False, True])
@pytest.mark.parametrize("label", [0, 1])
def test_one_class_only(monkeypatch: pytest.MonkeyPatch, logits: bool, label: int) -> None:
    preds, _ = _data(500, 2, 4, torch.float32, logits)
    target = torch.full((500,), label)
    monkeypatch.setattr(_sweep, "BLOCK", 16)
    _compare_with_tensor_path(monkeypatch, preds, target)
    ((fpr, tpr, _), (precision, recall, _), (f1, f1_thr)), caught = _all_outputs(preds, target)
    assert len(caught) == (1 if label else 3)  # ROC's absent class; without positives also PR and best F1
    absent, present = (fpr, tpr) if label else (tpr, fpr)
    assert not absent.any()
    assert float(present[-1]) == 1.0
    if label:
        assert bool((precision == 1.0).all())
        assert float(recall[0]) == 1.0
        assert float(recall[-1]) == 0.0
        assert float(f1) == 1.0
        assert float(f1_thr) == float(preds.min())
    else:
        assert not precision[:-1].any()
        assert bool((recall[:-1] == 1.0).all())
        assert float(recall[-1]) == 0.0
        assert float(f1) == 0.0
        assert torch.isnan(f1_thr)
    for ours, ref in zip(_all_outputs(preds, target)[0][:2], _reference(preds, target)[:2], strict=True):
        _assert_same_bits(ours, ref)


def test_empty_input_does_not_take_the_sweep() -> None:
    empty = _sort.sort_problem(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert not _sweep.usable(empty)
    assert not _sweep.usable(_sort.sort_problem(torch.rand(5, dtype=torch.float64), torch.tensor([0, 1, 0, 1, 1])))
    with pytest.warns(UserWarning, match="No negative samples"), pytest.warns(UserWarning, match="No positive"):
        fpr, tpr, thr = roc(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert fpr.tolist() == [0.0]
    assert tpr.tolist() == [0.0]
    assert thr.tolist() == [1.0]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("levels", [None, 16])
def test_sweep_matches_sklearn(monkeypatch: pytest.MonkeyPatch, seed: int, levels: int | None) -> None:
    """float32 logits (wide keys) and probabilities (compact keys), blocks of 50 keys, against scikit-learn."""
    monkeypatch.setattr(_sweep, "BLOCK", 50)
    for logits in (False, True):
        preds, target = _data(3000, seed, levels, torch.float32, logits)
        reference = preds.double().numpy()
        fpr, tpr, thr = roc(preds, target, **RAW)
        sk_fpr, sk_tpr, sk_thr = roc_curve(target, reference, drop_intermediate=False)
        assert fpr.tolist() == pytest.approx(f32(sk_fpr), abs=1e-12)
        assert tpr.tolist() == pytest.approx(f32(sk_tpr), abs=1e-12)
        assert thr[1:].tolist() == sk_thr[1:].tolist()
        assert float(thr[0]) == 1.0
        precision, recall, pr_thr = precision_recall_curve(preds, target, **RAW)
        sk_p, sk_r, sk_t = sk_pr_curve(target, reference)
        tail = len(sk_t)  # scikit-learn stops at full recall
        assert pr_thr[-tail:].tolist() == sk_t.tolist()
        assert precision[-tail - 1 :].tolist() == pytest.approx(f32(sk_p), abs=1e-12)
        assert recall[-tail - 1 :].tolist() == pytest.approx(f32(sk_r), abs=1e-12)
        f1, f1_thr = best_f1(preds, target, **RAW)
        sk_f1 = 2 * sk_p[:-1] * sk_r[:-1] / (sk_p[:-1] + sk_r[:-1])
        assert float(f1) == pytest.approx(f32(sk_f1.max()), abs=1e-6)
        at = [i for i in range(tail) if abs(sk_f1[i] - sk_f1.max()) < 1e-12]
        assert float(f1_thr) == pytest.approx(float(sk_t[max(at)]), abs=0)


def test_classes_after_small_batches_give_the_functional_bits() -> None:
    """Many small stored batches (the keys of one problem encoded piece by piece) and one piece: the same bits."""
    preds, target = _data(20_000, 3, 64, torch.float32, logits=False)
    for cls, fn in ((VarlenROC, roc), (VarlenPrecisionRecallCurve, precision_recall_curve), (VarlenBestF1, best_f1)):
        metric = cls()
        for a in range(0, preds.numel(), 64):
            metric.update(preds[a : a + 64], target[a : a + 64])
        _assert_same_bits(metric.compute(), fn(preds, target))


@pytest.mark.parametrize("block", [1, 2, 3, 64])
def test_best_f1_ties_go_to_the_highest_threshold(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Equal best F1 at several thresholds (within a block and across blocks): the highest threshold wins."""
    monkeypatch.setattr(_sweep, "BLOCK", block)
    # highest first: F1 = 2/3 at 0.875 (TP 1, FP 0) and at 0.5 (TP 2, FP 2), less elsewhere
    preds = torch.tensor([0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125])
    target = torch.tensor([1, 0, 0, 1, 0, 0, 0])
    f1, thr = best_f1(preds, target)
    assert float(f1) == f32(2 / 3)
    assert float(thr) == 0.875
    gen = torch.Generator().manual_seed(11)
    ties = 0
    for _ in range(150):  # small data with few levels: exact ties of the best F1 are common
        target = torch.randint(0, 2, (12,), generator=gen)
        preds = torch.randint(0, 6, (12,), generator=gen).float() / 8
        ours = best_f1(preds, target)
        with monkeypatch.context() as m:
            _tensor_path(m)
            _assert_same_bits(ours, best_f1(preds, target))
        _assert_same_bits(ours, _reference(preds, target)[2])
        descending = torch.unique(preds).flip(0)
        tps = torch.stack([(target * (preds >= t)).sum() for t in descending]).double()
        f1s = 2 * tps / (torch.stack([(preds >= t).sum() for t in descending]) + target.sum()).double()
        ties += int((f1s == f1s.max()).sum()) > 1
    assert ties > 10
