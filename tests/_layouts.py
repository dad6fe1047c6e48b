"""Tensor layouts x sync paths: what ``tests/test_layouts.py`` and the layout property test feed and expect.

A case is a plain dict (it travels to the ranks by pickle): the metric kind, the data set's size and seed, how the
rows are split over the ranks, each rank's layout, the target and score dtypes, whether sample ids are given, the
batch size, and the sync paths to run. Every rank rebuilds the same data set, feeds its rows in the given layout, and
computes AUROC and AP on each path; the test process compares with scikit-learn on the full, contiguous data.

Each layout gives a tensor whose *values* equal the contiguous batch, laid out otherwise: a column of a wider tensor
(``probs[:, 1]``), a transpose, an ``expand``ed zero-stride tensor (a batch of identical rows), a storage offset, a
step slice ``[::2]``, and 0-d tensors (one sample per update, binary only). The other slots of the underlying storage
hold junk, so a layout read wrongly changes the value.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
from _data import rank_slice
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import Tensor

KINDS = ("binary", "multiclass", "multilabel")
LAYOUTS = ("contiguous", "column", "transpose", "expand", "offset", "step", "scalar")
PATHS = ("gather", "on_rank", "sharded", "hist16", "collection", "wrapper", "gather_varlen")
TARGETS = ("int64", "int32", "bool", "float")
SCORES = ("float32", "float64", "float16")
CLASSES = 3
_JUNK = 0.25  # a valid score and, rounded, a valid label: only the value can tell a misread


def dataset(kind: str, n: int, seed: int) -> tuple[Tensor, Tensor]:
    """``n`` rows drawn from a few distinct ones (so that batches of identical rows exist), scores ``k / 64``
    (exact in float16 and bfloat16) in [0, 1], every class / label with positives and negatives.
    """
    gen = torch.Generator().manual_seed(seed)
    width = () if kind == "binary" else (CLASSES,)
    distinct = max(2, n // 3)
    base_preds = torch.randint(0, 65, (distinct, *width), generator=gen).double() / 64
    if kind == "multiclass":
        base_target = torch.randint(0, CLASSES, (distinct,), generator=gen)
    else:
        base_target = torch.randint(0, 2, (distinct, *width), generator=gen)
    pick = torch.randint(0, distinct, (n,), generator=gen)
    preds, target = base_preds[pick].clone(), base_target[pick].clone()
    # Positives and negatives of every class / label, whatever the draw (n >= 2 * CLASSES for the others).
    if kind == "binary":
        target[:2] = torch.tensor([0, 1])
    elif kind == "multiclass":
        target[:CLASSES] = torch.arange(CLASSES)
    else:
        target[0], target[1] = 0, 1
    return preds, target


def min_rows(kind: str) -> int:
    """The smallest data set :func:`dataset` can make for ``kind``."""
    return 2 if kind != "multiclass" else CLASSES


def references(kind: str, preds: Tensor, target: Tensor) -> tuple[float, float]:
    """scikit-learn's AUROC and AP on the full, contiguous data (macro over classes / labels, one-vs-rest)."""
    p, t = preds.numpy(), target.numpy()
    if kind == "binary":
        return float(roc_auc_score(t, p)), float(average_precision_score(t, p))
    columns = [(t == c) if kind == "multiclass" else t[:, c] for c in range(CLASSES)]
    auroc = np.mean([roc_auc_score(col, p[:, c]) for c, col in enumerate(columns)])
    ap = np.mean([average_precision_score(col, p[:, c]) for c, col in enumerate(columns)])
    return float(auroc), float(ap)


def relaid(x: Tensor, layout: str) -> Tensor:
    """``x`` (a contiguous batch, at least 1-D) with the same values in ``layout`` (not ``expand`` / ``scalar``)."""
    junk = torch.full_like(x, _JUNK if x.is_floating_point() else 1)
    if layout == "column":  # probs[:, 1] of a wider tensor
        return torch.stack([junk, x], dim=-1)[..., 1]
    if layout == "transpose":
        if x.ndim == 1:
            return torch.stack([x, junk]).t()[:, 0]
        return x.t().contiguous().t()
    if layout == "offset":
        return torch.cat([torch.full((3, *x.shape[1:]), _JUNK).to(x.dtype), x])[3:]
    if layout == "step":  # t[::2]
        return torch.stack([x, junk], dim=1).reshape(2 * x.shape[0], *x.shape[1:])[::2]
    return x.clone()


def _typed(kind: str, target: Tensor, name: str) -> Tensor:
    if kind == "multiclass" and name in ("bool", "float"):
        return target  # class labels are integers
    return target.to(getattr(torch, name))


def batches(case: dict[str, Any], rank: int) -> list[tuple[Tensor, Tensor, Tensor]]:
    """This rank's updates ``(preds, target, ids)`` in its layout, and the rows they stand for (``ids``)."""
    kind, layout = case["kind"], case["layouts"][rank]
    preds, target = dataset(kind, case["n"], case["seed"])
    preds = preds.to(getattr(torch, case["scores"]))
    target = _typed(kind, target, case["target"])
    part = rank_slice(case["n"], case["world"], rank, case["split"])
    rows = list(range(part.start, part.stop))
    out = []
    if layout == "expand":  # runs of identical rows, each one row expanded (zero stride)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i in rows:
            key = (*np.atleast_1d(preds[i].double().numpy()), *np.atleast_1d(target[i].double().numpy()))
            groups.setdefault(key, []).append(i)
        for idx in groups.values():
            k, first = len(idx), idx[0]
            out.append(
                (
                    preds[first].expand(k, *preds.shape[1:]),
                    target[first].expand(k, *target.shape[1:]),
                    torch.tensor(idx),
                )
            )
        return out
    if layout == "scalar":  # one sample per update: 0-d tensors (binary), a one-row batch (the others)
        if kind == "binary":
            return [(preds[i], target[i], torch.tensor(i)) for i in rows]
        return [(preds[i : i + 1], target[i : i + 1], torch.tensor([i])) for i in rows]
    size = case["batch"]
    for start in range(0, len(rows), size):
        idx = rows[start : start + size]
        sl = slice(idx[0], idx[-1] + 1)
        out.append((relaid(preds[sl], layout), relaid(target[sl], layout), relaid(torch.tensor(idx), layout)))
    return out


def _metrics(kind: str, path: str, world: int) -> dict[str, Any]:
    from torchmetrics.classification import (
        BinaryAUROC,
        BinaryAveragePrecision,
        MulticlassAUROC,
        MulticlassAveragePrecision,
        MultilabelAUROC,
        MultilabelAveragePrecision,
    )

    from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenAveragePrecision, VarlenCollection

    task = {"task": kind, "num_classes": CLASSES} if kind == "multiclass" else {"task": kind}
    if kind == "multilabel":
        task = {"task": kind, "num_labels": CLASSES}
    if path == "wrapper":
        plain = {
            "binary": (BinaryAUROC(), BinaryAveragePrecision()),
            "multiclass": (MulticlassAUROC(CLASSES), MulticlassAveragePrecision(CLASSES)),
            "multilabel": (MultilabelAUROC(CLASSES), MultilabelAveragePrecision(CLASSES)),
        }[kind]
        return {"auroc": Varlen(plain[0], sync_timeout=30), "ap": Varlen(plain[1], sync_timeout=30)}
    extra: dict[str, Any] = {
        "gather": {},
        "on_rank": {"compute_on_rank": world - 1},
        "sharded": {"compute_sharded": True},
        "hist16": {"thresholds": torch.float16},
        "collection": {},
    }[path]
    pair = {
        "auroc": VarlenAUROC(**task, **extra, sync_timeout=30),
        "ap": VarlenAveragePrecision(**task, **extra, sync_timeout=30),
    }
    return {"both": VarlenCollection(pair)} if path == "collection" else pair


def run_case(rank: int, case: dict[str, Any]) -> dict[str, Any]:
    """Every path of ``case`` on this rank: ``{path: [auroc, ap]}``, and for ``gather_varlen`` the gathered rows."""
    from torchmetrics_varlen import gather_varlen

    world = case["world"]
    feed = batches(case, rank)
    out: dict[str, Any] = {}
    for path in case["paths"]:
        if path == "gather_varlen":
            out[path] = _gather_all(case, feed, gather_varlen)
            continue
        ids = case["ids"] and path != "hist16"
        metrics = _metrics(case["kind"], path, world)
        for preds, target, rows in feed:
            if path == "wrapper" and target.is_floating_point():
                target = target.long()  # torchmetrics' own classes take integer targets only (layout kept)
            for metric in metrics.values():
                if ids:
                    metric.update(preds, target, sample_ids=rows)
                else:
                    metric.update(preds, target)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*samples were evaluated|.*never seen", category=UserWarning)
            values = {name: metric.compute() for name, metric in metrics.items()}
        if path == "collection":
            both = values["both"]
            out[path] = [float(both["auroc"]), float(both["ap"])]
        else:
            out[path] = [float(values["auroc"]), float(values["ap"])]
    return out


def _gather_all(case: dict[str, Any], feed: list[tuple[Tensor, Tensor, Tensor]], gather: Any) -> list[Any]:
    """gather_varlen of every update's preds and targets (as many calls on every rank; empty when out of batches)."""
    counts = [len(batches(case, r)) for r in range(case["world"])]
    gathered = []
    for step in range(max(counts)):
        if step < len(feed):
            preds, target, _ = feed[step]
            if preds.ndim == 0:  # a 0-d sample: gathered as one row (a 0-d tensor is an error with other ranks)
                preds, target = preds.reshape(1), target.reshape(1)
        else:
            preds, target = _empty(case, "preds"), _empty(case, "target")
        gathered.append((gather(preds, sync_timeout=30).tolist(), gather(target, sync_timeout=30).tolist()))
    return gathered


def _empty(case: dict[str, Any], which: str) -> Tensor:
    kind = case["kind"]
    trailing = () if kind == "binary" or (kind == "multiclass" and which == "target") else (CLASSES,)
    if which == "preds":
        return torch.empty((0, *trailing), dtype=getattr(torch, case["scores"]))
    dtype = (
        torch.int64 if kind == "multiclass" and case["target"] in ("bool", "float") else getattr(torch, case["target"])
    )
    return torch.empty((0, *trailing), dtype=dtype)


def expected_gather(case: dict[str, Any]) -> list[Any]:
    """What every rank's :func:`_gather_all` must return: each step's contiguous rows, in rank order."""
    feeds = [batches(case, r) for r in range(case["world"])]
    steps = max(len(f) for f in feeds)
    out = []
    for step in range(steps):
        here = [f[step] for f in feeds if step < len(f)]
        preds = torch.cat([p.reshape(-1, *p.shape[1:]) if p.ndim else p.reshape(1) for p, _, _ in here])
        target = torch.cat([t.reshape(-1, *t.shape[1:]) if t.ndim else t.reshape(1) for _, t, _ in here])
        out.append((preds.tolist(), target.tolist()))
    return out


def check(case: dict[str, Any], values: list[dict[str, Any]]) -> None:
    """Every rank's value on every path is scikit-learn's on the full, contiguous data (abs 1e-6)."""
    preds, target = dataset(case["kind"], case["n"], case["seed"])
    auroc, ap = references(case["kind"], preds, target)
    for rank, out in enumerate(values):
        for path in case["paths"]:
            if path == "gather_varlen":
                assert out[path] == expected_gather(case), (rank, path)
                continue
            got_auroc, got_ap = out[path]
            assert math.isclose(got_auroc, auroc, abs_tol=1e-6), (rank, path, got_auroc, auroc, case)
            assert math.isclose(got_ap, ap, abs_tol=1e-6), (rank, path, got_ap, ap, case)
