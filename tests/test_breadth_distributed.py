"""Multiclass, multilabel, curves, group AUC and best F1 on real gloo ranks: padded, uneven and empty shards."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _data import split_lengths
from _dist import DistPool
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve
from sklearn.metrics import precision_recall_curve as sk_pr_curve
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from torchmetrics_varlen import (
    VarlenAUROC,
    VarlenAveragePrecision,
    VarlenBestF1,
    VarlenGroupAUROC,
    VarlenPrecisionRecallCurve,
    VarlenROC,
)

pytestmark = pytest.mark.distributed


def _dataset(n: int, seed: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    mc_target = torch.arange(n) % 3
    mc_preds = (torch.rand(n, 3, generator=gen) + torch.nn.functional.one_hot(mc_target, 3)).softmax(1)
    ml_target = torch.randint(0, 2, (n, 3), generator=gen)
    ml_target[:2] = torch.tensor([0, 1]).unsqueeze(1)
    ml_preds = torch.round((torch.rand(n, 3, generator=gen) * 0.6 + 0.4 * ml_target) * 32) / 32
    b_target = torch.randint(0, 2, (n,), generator=gen)
    b_preds = torch.round((torch.rand(n, generator=gen) * 0.7 + 0.3 * b_target) * 16) / 16
    groups = torch.randint(0, 6, (n,), generator=gen)
    return TensorDataset(mc_preds, mc_target, ml_preds, ml_target, b_preds, b_target, groups, torch.arange(n))


def _metrics(n: int, sampler: bool) -> dict[str, Any]:
    size = {"dataset_size": n} if sampler else {}
    return {
        "mc_auroc": VarlenAUROC(task="multiclass", num_classes=3, average="none", sync_timeout=20, **size),
        "mc_ap": VarlenAveragePrecision(task="multiclass", num_classes=3, average="weighted", sync_timeout=20, **size),
        "ml_auroc": VarlenAUROC(task="multilabel", num_labels=3, average="micro", sync_timeout=20, **size),
        "ml_ap": VarlenAveragePrecision(task="multilabel", num_labels=3, average="none", sync_timeout=20, **size),
        "gauc": VarlenGroupAUROC(sync_timeout=20, **size),
        "roc": VarlenROC(sync_timeout=20, **size),
        "pr": VarlenPrecisionRecallCurve(sync_timeout=20, **size),
        "f1": VarlenBestF1(sync_timeout=20, **size),
    }


def case_breadth(rank: int, world: int, n: int, seed: int, sampler: bool, use_ids: bool) -> dict[str, Any]:
    data = _dataset(n, seed)
    if sampler:
        indices = list(DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=seed))
    else:  # uneven split, the first rank empty
        lengths = split_lengths(n, world, "first_empty")
        indices = list(range(sum(lengths[:rank]), sum(lengths[: rank + 1])))
    metrics = _metrics(n, sampler and not use_ids)
    loader = DataLoader(torch.utils.data.Subset(data, indices), batch_size=4 + rank)
    for mc_p, mc_t, ml_p, ml_t, b_p, b_t, groups, ids in loader:
        extra = {"sample_ids": ids} if use_ids else {}
        metrics["mc_auroc"].update(mc_p, mc_t, **extra)
        metrics["mc_ap"].update(mc_p, mc_t, **extra)
        metrics["ml_auroc"].update(ml_p, ml_t, **extra)
        metrics["ml_ap"].update(ml_p, ml_t, **extra)
        metrics["gauc"].update(b_p, b_t, groups=groups, **extra)
        for key in ("roc", "pr", "f1"):
            metrics[key].update(b_p, b_t, **extra)
    out: dict[str, Any] = {}
    for key, metric in metrics.items():
        value = metric.compute()
        out[key] = [v.tolist() for v in value] if isinstance(value, tuple) else value.tolist()
    return out


@pytest.mark.parametrize(
    ("world", "n", "sampler", "use_ids"),
    [(2, 31, True, False), (3, 31, True, True), (4, 29, True, False), (3, 29, False, False), (4, 30, False, True)],
)
def test_breadth_across_ranks_equals_sklearn(pool: DistPool, world: int, n: int, sampler: bool, use_ids: bool) -> None:
    """Every metric of the package, on padded (DistributedSampler) or uneven-with-empty-rank shards, with dataset_size
    or sample ids: every rank gets scikit-learn's value on the full data set.
    """
    mc_p, mc_t, ml_p, ml_t, b_p, b_t, groups, _ = _dataset(n, 7).tensors
    mc_auroc = [roc_auc_score(mc_t == k, mc_p[:, k]) for k in range(3)]
    mc_ap_per = torch.tensor([average_precision_score(mc_t == k, mc_p[:, k]) for k in range(3)])
    support = torch.bincount(mc_t, minlength=3).double()
    mc_ap = float((mc_ap_per * support).sum() / support.sum())
    ml_auroc = roc_auc_score(ml_t.flatten(), ml_p.flatten())
    ml_ap = [average_precision_score(ml_t[:, k], ml_p[:, k]) for k in range(3)]
    valid = [g for g in groups.unique() if b_t[groups == g].unique().numel() == 2]
    weights = [int((groups == g).sum()) for g in valid]
    gauc = sum(w * roc_auc_score(b_t[groups == g], b_p[groups == g]) for g, w in zip(valid, weights, strict=True))
    gauc /= sum(weights)
    # Curves against scikit-learn: roc_curve without dropping points (its first threshold is inf, torchmetrics'
    # convention is 1.0); precision_recall_curve stops at full recall, so compare its tail; best F1 by brute force.
    sk_fpr, sk_tpr, sk_thr = roc_curve(b_t, b_p, drop_intermediate=False)
    sk_p, sk_r, sk_t = sk_pr_curve(b_t, b_p)
    f1 = 2 * sk_p[:-1] * sk_r[:-1] / (sk_p[:-1] + sk_r[:-1] + 1e-300)
    best = int(max(range(len(f1)), key=lambda i: (f1[i], sk_t[i])))
    for out in pool.values(case_breadth, world, n, 7, sampler, use_ids):
        assert out["mc_auroc"] == pytest.approx(mc_auroc, abs=1e-6)
        assert out["mc_ap"] == pytest.approx(mc_ap, abs=1e-6)
        assert out["ml_auroc"] == pytest.approx(f32(ml_auroc), abs=1e-12)
        assert out["ml_ap"] == pytest.approx(f32(ml_ap), abs=1e-12)
        assert out["gauc"] == pytest.approx(f32(gauc), abs=1e-12)
        fpr, tpr, thr = out["roc"]
        assert fpr == pytest.approx(f32(sk_fpr.tolist()), abs=1e-12)
        assert tpr == pytest.approx(f32(sk_tpr.tolist()), abs=1e-12)
        assert thr[1:] == pytest.approx(sk_thr[1:].tolist(), abs=1e-7)
        precision, recall, pr_thr = out["pr"]
        n_sk = len(sk_t)
        assert precision[-n_sk - 1 :] == pytest.approx(f32(sk_p.tolist()), abs=1e-12)
        assert recall[-n_sk - 1 :] == pytest.approx(f32(sk_r.tolist()), abs=1e-12)
        assert pr_thr[-n_sk:] == pytest.approx(sk_t.tolist(), abs=1e-7)
        assert out["f1"] == pytest.approx([f1[best], sk_t[best]], abs=1e-7)


def case_num_classes_mismatch(rank: int, world: int) -> str:
    from torchmetrics_varlen import MetricSyncError

    c = 3 + rank
    metric = VarlenAUROC(task="multiclass", num_classes=c, sync_timeout=5)
    metric.update(torch.rand(4, c).softmax(1), torch.arange(4) % c)
    try:
        metric.compute()
    except MetricSyncError as err:
        return str(err)
    return "no error"


def test_mismatched_num_classes_raises_on_every_rank_with_a_table(pool: DistPool) -> None:
    for text in pool.values(case_num_classes_mismatch, 3):
        assert "the ranks disagree on `num_classes` (config)" in text
        for rank in range(3):
            assert f"rank {rank}: {{" in text
            assert f"'num_classes': {3 + rank}" in text
