"""The metric classes in one process: drop-in equality with torchmetrics and scikit-learn, input handling."""

from __future__ import annotations

import pickle

import pytest
import torch
from _data import scores_and_labels
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score
from torchmetrics.classification import BinaryAUROC, BinaryAveragePrecision

from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

PAIRS = [(VarlenAUROC, BinaryAUROC), (VarlenAveragePrecision, BinaryAveragePrecision)]


def _batches(n: int, seed: int, sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    preds, target = scores_and_labels(n, seed)
    out, start = [], 0
    for size in sizes:
        out.append((preds[start : start + size].float(), target[start : start + size]))
        start += size
    return out


@pytest.mark.parametrize(("ours", "theirs"), PAIRS)
@pytest.mark.parametrize(
    "kwargs", [{}, {"thresholds": 13}, {"thresholds": [0.0, 0.25, 0.5, 1.0]}, {"ignore_index": -1}]
)
def test_same_values_as_torchmetrics(ours: type, theirs: type, kwargs: dict[str, object]) -> None:
    """Same constructor arguments, same update sequence, same value as the torchmetrics class."""
    a, b = ours(**kwargs), theirs(**kwargs)
    for preds, target in _batches(300, 1, [1, 7, 64, 100, 128]):
        a.update(preds, target)
        b.update(preds, target)
    assert float(a.compute()) == pytest.approx(float(b.compute()), abs=1e-6)


@pytest.mark.parametrize("max_fpr", [0.1, 0.5])
def test_max_fpr_same_as_torchmetrics_and_sklearn(max_fpr: float) -> None:
    a, b = VarlenAUROC(max_fpr=max_fpr), BinaryAUROC(max_fpr=max_fpr)
    preds, target = scores_and_labels(500, 2)
    a.update(preds.float(), target)
    b.update(preds.float(), target)
    assert float(a.compute()) == pytest.approx(float(b.compute()), abs=1e-6)
    assert float(a.compute()) == pytest.approx(f32(roc_auc_score(target, preds, max_fpr=max_fpr)), abs=1e-12)


@pytest.mark.parametrize(
    ("ours", "reference"), [(VarlenAUROC, roc_auc_score), (VarlenAveragePrecision, average_precision_score)]
)
def test_2d_batches_and_ignore_index(ours: type, reference: object) -> None:
    """Token-level output: 2-D batches flattened, padded positions (-100) ignored."""
    preds, target = scores_and_labels(120, 3)
    target = target.clone()
    target[5::9] = -100
    metric = ours(ignore_index=-100)
    metric.update(preds[:40].view(4, 10), target[:40].view(4, 10))
    metric.update(preds[40:].view(8, 10), target[40:].view(8, 10))
    keep = target != -100
    assert float(metric.compute()) == pytest.approx(f32(reference(target[keep], preds[keep])), abs=1e-12)  # type: ignore[operator]
    assert int(metric.num_samples) == int(keep.sum())


def test_forward_returns_batch_value_and_accumulates() -> None:
    metric = VarlenAUROC()
    batches = _batches(200, 4, [100, 100])
    first = metric(*batches[0])
    assert float(first) == pytest.approx(f32(roc_auc_score(batches[0][1], batches[0][0])), abs=1e-12)
    metric(*batches[1])
    preds = torch.cat([b[0] for b in batches])
    target = torch.cat([b[1] for b in batches])
    assert float(metric.compute()) == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-12)


def test_reset_and_compute_twice() -> None:
    metric = VarlenAveragePrecision()
    preds, target = scores_and_labels(50, 5)
    metric.update(preds, target)
    first = metric.compute()
    assert torch.equal(metric.compute(), first)
    metric.reset()
    metric.update(preds[:20], target[:20])
    assert float(metric.compute()) == pytest.approx(f32(average_precision_score(target[:20], preds[:20])), abs=1e-12)


@pytest.mark.parametrize(
    ("preds", "target", "match"),
    [
        (torch.tensor([0.2, float("nan")]), torch.tensor([0, 1]), "NaN or infinite"),
        (torch.tensor([0.2, 0.3]), torch.tensor([0, 3]), r"only \{0, 1\}"),
        (torch.tensor([0.2, 0.3]), torch.tensor([0, 1, 1]), "same shape"),
        (torch.tensor([1, 0]), torch.tensor([0, 1]), "floating point"),
    ],
)
def test_bad_batch_raises_and_leaves_state_unchanged(preds: torch.Tensor, target: torch.Tensor, match: str) -> None:
    metric = VarlenAUROC()
    good_p, good_t = scores_and_labels(10, 6)
    metric.update(good_p, good_t)
    before = ([p.clone() for p in metric.preds], [t.clone() for t in metric.target], int(metric.num_samples))
    with pytest.raises(ValueError, match=match):
        metric.update(preds, target)
    assert len(metric.preds) == len(before[0])
    assert all(torch.equal(a, b) for a, b in zip(metric.preds, before[0], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(metric.target, before[1], strict=True))
    assert int(metric.num_samples) == before[2]
    assert metric.update_count == 1


def test_metric_keywords_are_accepted() -> None:
    """Every torchmetrics.Metric keyword passes through."""
    metric = VarlenAUROC(compute_on_cpu=True, sync_on_compute=False, process_group=None, dist_sync_on_step=False)
    preds, target = scores_and_labels(30, 7)
    metric.update(preds, target)
    assert float(metric.compute()) == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_fpr": 2.0}, "`max_fpr`"),
        ({"thresholds": 1}, "`thresholds`"),
        (
            {"sync_timeout": 0},
            r"Expected argument `sync_timeout` to be a positive number of seconds or None, but got 0",
        ),
        ({"sync_timeout": -1.0}, "`sync_timeout`"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        VarlenAUROC(**kwargs)  # type: ignore[arg-type]


def test_pickle_and_state_dict_round_trip() -> None:
    metric = VarlenAUROC()
    preds, target = scores_and_labels(40, 8)
    metric.update(preds, target)
    clone = pickle.loads(pickle.dumps(metric))
    assert torch.equal(clone.compute(), metric.compute())
    metric.persistent(True)
    fresh = VarlenAUROC()
    fresh.persistent(True)
    fresh.load_state_dict(metric.state_dict())
    assert torch.equal(fresh.compute(), metric.compute())
