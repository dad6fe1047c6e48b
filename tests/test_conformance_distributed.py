"""Drop-in conformance, multi-rank: the class pairs of ``test_conformance.py`` on spawned gloo ranks.

Each Varlen class (binary, multiclass and multilabel AUROC, AP, ROC, PR curve) runs on W = 2 and 3 ranks with
equal shards and with the uneven, padded shards of a real ``DistributedSampler(drop_last=False, shuffle=True)``
(``dataset_size=`` drops its padding), exact and binned. Every rank's value equals (1e-6, same dtype and shape)
torchmetrics' class run single-process on the full data, and scikit-learn where it defines the value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from _dist import DistPool
from _float32 import expit, softmax
from _sampler import sampler_indices
from sklearn.metrics import average_precision_score, roc_auc_score
from torchmetrics import classification as tm

import torchmetrics_varlen as tv

pytestmark = pytest.mark.distributed

N = {"equal": 60, "uneven": 61}  # 61 over 2 or 3 ranks: uneven shards, and padding to drop
CLASSES = 3
FAMILIES = {"auroc": "AUROC", "ap": "AveragePrecision", "roc": "ROC", "pr": "PrecisionRecallCurve"}


def _data(task: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    if task == "binary":
        return torch.logit(torch.rand(n, generator=gen)), torch.randint(0, 2, (n,), generator=gen)
    if task == "multiclass":
        return torch.randn(n, CLASSES, generator=gen), torch.randint(0, CLASSES, (n,), generator=gen)
    return torch.rand(n, CLASSES, generator=gen), torch.randint(0, 2, (n, CLASSES), generator=gen)


def _pairs(thresholds: int | None) -> list[tuple[str, Any, Any]]:
    """``(key, make ours, make theirs)`` for the twelve class pairs."""
    out = []
    for family, suffix in FAMILIES.items():
        for task, size in (
            ("binary", {}),
            ("multiclass", {"num_classes": CLASSES}),
            ("multilabel", {"num_labels": CLASSES}),
        ):
            prefix = "" if task == "binary" else task.title()
            theirs_name = f"{'Binary' if task == 'binary' else task.title()}{suffix}"
            ours_cls, theirs_cls = getattr(tv, f"Varlen{prefix}{suffix}"), getattr(tm, theirs_name)
            kwargs = {**size, "thresholds": thresholds}
            out.append((f"{family}-{task}", (ours_cls, kwargs), (theirs_cls, kwargs)))
    return out


def _listed(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_listed(v) for v in value]
    return {"dtype": str(value.dtype), "value": value.tolist()}


def case_conformance(rank: int, world: int, split: str, thresholds: int | None) -> dict[str, Any]:
    n = N[split]
    if split == "equal":
        mine = list(range(rank, n, world))
    else:
        mine = sampler_indices(n, world, rank, shuffle=True, drop_last=False, seed=3)
    out = {}
    for key, (ours_cls, kwargs), _ in _pairs(thresholds):
        task = key.split("-")[1]
        preds, target = _data(task, n)
        metric = ours_cls(**kwargs, dataset_size=n, sync_timeout=30)
        for part in (mine[: len(mine) // 2], mine[len(mine) // 2 :]):  # two batches per rank
            metric.update(preds[part], target[part])
        out[key] = _listed(metric.compute())
    return out


def _sklearn(key: str, preds: torch.Tensor, target: torch.Tensor) -> Any:
    family, task = key.split("-")
    fn = roc_auc_score if family == "auroc" else average_precision_score
    if task == "binary":
        return fn(target.numpy(), expit(preds).double().numpy())
    if task == "multiclass":
        probs = softmax(preds).double().numpy()
        return np.mean([fn((target == k).numpy(), probs[:, k]) for k in range(CLASSES)])
    return np.mean([fn(target[:, k].numpy(), preds[:, k].double().numpy()) for k in range(CLASSES)])


@pytest.mark.parametrize("thresholds", [None, 7])
@pytest.mark.parametrize("split", ["equal", "uneven"])
@pytest.mark.parametrize("world", [2, 3])
def test_every_pair_on_ranks_equals_torchmetrics_on_one_process(
    pool: DistPool, world: int, split: str, thresholds: int | None
) -> None:
    outcomes = pool.values(case_conformance, world, split, thresholds, timeout=240)
    n = N[split]
    for key, _, (theirs_cls, kwargs) in _pairs(thresholds):
        preds, target = _data(key.split("-")[1], n)
        expected = _listed(theirs_cls(**kwargs)(preds, target))
        for rank, out in enumerate(outcomes):
            _assert_close(out[key], expected, f"{key} on rank {rank} of {world}")
        if thresholds is None and key.split("-")[0] in ("auroc", "ap"):
            assert outcomes[0][key]["value"] == pytest.approx(_sklearn(key, preds, target), abs=1e-6), key


def _assert_close(ours: Any, theirs: Any, what: str) -> None:
    if isinstance(theirs, list):
        assert isinstance(ours, list), what
        assert len(ours) == len(theirs), what
        for a, b in zip(ours, theirs, strict=True):
            _assert_close(a, b, what)
        return
    assert ours["dtype"] == theirs["dtype"], what
    torch.testing.assert_close(
        torch.tensor(ours["value"]), torch.tensor(theirs["value"]), atol=1e-6, rtol=0, equal_nan=True, msg=what
    )
