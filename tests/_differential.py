"""The differential check: W ranks fed through a real ``DistributedSampler`` against one process and the outside
reference (scikit-learn; torchmetrics' binned classes for the binned mode).

A :class:`Spec` is one example: a data set (size, seed), a sampler (W, shuffle, ``drop_last``), a batch size, a dedup
mode (``dataset_size=`` or the sampler's indices as ``sample_ids``), a sync path (gather to all, ``compute_on_rank=0``,
``compute_sharded=True``), a mode (exact, 16-bit, binned), with or without weights, a family of metrics and optionally
a rank that makes no update at all. :func:`run_rank` is what every rank does (several specs can share one process
group); :func:`check` asserts that every rank returned, bit for bit, what the same classes return in one process fed
the evaluated samples at once, and that this value is the outside reference's.

Weights are quarter-integers ``k / 4`` (zeros included): every float64 sum of them is exact whatever the addition
order, so bitwise equality across W, batch sizes and sync paths is a fair demand of the weighted modes too, and a
weight ``k / 4`` is the sample repeated ``k`` times, which is how torchmetrics' binned classes (they take no weights)
give the weighted binned reference. Scores are probabilities in [0, 1] (no sigmoid), float32, on a grid (ties).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import torch
from _data import flat_tensors
from _float32 import f32
from _sampler import sampler_indices
from torch import Tensor

FAMILIES = ("binary", "multiclass", "multilabel", "collection", "wrapper")
MODES = ("exact", "float16", "bfloat16", "binned")
PATHS = ("all", "rank0", "sharded")
WIDTH = 3  # classes (multiclass) or labels (multilabel)
TOL = 1e-6
_SHARDABLE = ("auroc", "ap")  # the metrics that take compute_sharded=True


@dataclasses.dataclass(frozen=True)
class Spec:
    """One differential example (see the module docstring)."""

    world: int
    n: int
    family: str = "binary"
    mode: str = "exact"
    path: str = "all"
    dedup: str = "dataset_size"
    weighted: bool = False
    batch: int = 1
    shuffle: bool = False
    drop_last: bool = False
    idle: int | None = None  # a rank that makes no update at all
    seed: int = 0
    bins: int = 11  # thresholds=bins in the binned mode

    def __post_init__(self) -> None:
        assert self.family in FAMILIES, self.family
        assert self.mode in MODES, self.mode
        assert self.path in PATHS, self.path
        assert self.dedup in ("dataset_size", "sample_ids")
        assert self.mode == "exact" or self.dedup == "dataset_size", "sample_ids need the exact mode"
        assert self.path != "sharded" or self.mode == "exact", "compute_sharded needs the exact mode"
        assert self.family != "wrapper" or (self.mode in ("exact", "binned") and not self.weighted)


# ---------------------------------------------------------------------- data


def make_data(spec: Spec) -> tuple[Tensor, Tensor, Tensor]:
    """``(preds, target, weight)`` of the whole data set: float32 scores in [0, 1] on a grid of ``levels`` steps
    (ties; k / 8 and k / 64 are exact in both 16-bit formats, k / 1000 is not), labels correlated with them, and
    quarter-integer weights in [0, 2].
    """
    gen = torch.Generator().manual_seed(spec.seed)
    n, levels = spec.n, (8, 64, 1000)[spec.seed % 3]
    if spec.family == "multiclass":
        target = torch.randint(0, WIDTH, (n,), generator=gen)
        hot = torch.nn.functional.one_hot(target, WIDTH).double()
    elif spec.family == "multilabel":
        target = torch.randint(0, 2, (n, WIDTH), generator=gen)
        hot = target.double()
    else:
        target = torch.randint(0, 2, (n,), generator=gen)
        hot = target.double()
    noise = torch.rand(hot.shape, generator=gen, dtype=torch.float64)
    preds = (torch.round((0.75 * noise + 0.25 * hot) * levels) / levels).float()
    weight = torch.randint(0, 9, (n,), generator=gen).float() / 4
    return preds, target, weight


def _mode_kwargs(spec: Spec) -> dict[str, Any]:
    thresholds = {"exact": None, "float16": torch.float16, "bfloat16": torch.bfloat16, "binned": spec.bins}
    return {"thresholds": thresholds[spec.mode]}


# ---------------------------------------------------------------------- the metrics


def _package(spec: Spec, name: str, cls: Any, distributed: bool, member: bool, **kwargs: Any) -> Any:
    """A package metric of the spec's mode; on the ranks with the spec's dedup and sync keywords (``member``: inside
    a collection, which drops the padding itself).
    """
    kwargs.update(_mode_kwargs(spec))
    if distributed:
        kwargs["sync_timeout"] = 30
        if spec.dedup == "dataset_size" and not member:
            kwargs["dataset_size"] = spec.n
        if spec.path == "rank0":
            kwargs["compute_on_rank"] = 0
        if spec.path == "sharded" and name in _SHARDABLE:
            kwargs["compute_sharded"] = True
    return cls(**kwargs)


def _torchmetrics(spec: Spec, name: str) -> Any:
    """The torchmetrics metric that the wrapper family and the collection wrap."""
    from torchmetrics.classification import BinaryAccuracy, BinaryAUROC

    if name == "acc":
        return BinaryAccuracy()
    return BinaryAUROC(thresholds=spec.bins if spec.mode == "binned" else None)  # cat states, or one summed confmat


def metric_names(spec: Spec) -> tuple[str, ...]:
    """The metrics of the spec's family (ids cannot dedup the summed states of BinaryAccuracy or a binned AUROC)."""
    if spec.family == "binary":
        return ("auroc", "ap", "roc", "pr")
    if spec.family in ("multiclass", "multilabel"):
        return ("auroc", "ap")
    if spec.family == "collection":
        return ("auroc", "ap", "roc") + (("acc",) if spec.dedup == "dataset_size" else ())
    if spec.dedup == "sample_ids":
        return ("tm_auroc",)
    return ("acc", "tm_auroc")


def build(spec: Spec, distributed: bool) -> dict[str, Any]:
    """The spec's metrics (a collection counts as one, ``"collection"``), for the ranks or for one process."""
    import torchmetrics_varlen as tv

    classes: dict[str, Any] = {
        "multiclass": {"auroc": tv.VarlenMulticlassAUROC, "ap": tv.VarlenMulticlassAveragePrecision},
        "multilabel": {"auroc": tv.VarlenMultilabelAUROC, "ap": tv.VarlenMultilabelAveragePrecision},
    }.get(spec.family) or {
        "auroc": tv.VarlenAUROC,
        "ap": tv.VarlenAveragePrecision,
        "roc": tv.VarlenROC,
        "pr": tv.VarlenPrecisionRecallCurve,
    }
    task = {"multiclass": {"num_classes": WIDTH}, "multilabel": {"num_labels": WIDTH}}.get(spec.family, {})
    size = spec.n if distributed and spec.dedup == "dataset_size" else None
    if spec.family == "wrapper":
        return {name: tv.Varlen(_torchmetrics(spec, name), size, sync_timeout=30) for name in metric_names(spec)}
    member = spec.family == "collection"
    metrics = {
        name: _torchmetrics(spec, name)
        if name == "acc"
        else _package(spec, name, classes[name], distributed, member, **task)
        for name in metric_names(spec)
    }
    if member:
        return {"collection": tv.VarlenCollection(metrics, dataset_size=size, sync_timeout=30)}
    return metrics


def _feed(metrics: dict[str, Any], spec: Spec, rows: Tensor, data: tuple[Tensor, Tensor, Tensor], ids: bool) -> None:
    preds, target, weight = data
    for metric in metrics.values():
        kwargs: dict[str, Any] = {"sample_ids": rows} if ids else {}
        if spec.weighted:
            kwargs["sample_weight"] = weight[rows]
        metric.update(preds[rows], target[rows], **kwargs)


def _values(metrics: dict[str, Any]) -> dict[str, list[Any]]:
    """Every metric's value as a list of tensors, or the error its ``compute()`` raised (as ``"Type: message"``:
    torchmetrics' own ``BinaryAUROC`` cannot compute without a sample, in one process as on the ranks).
    """
    out: dict[str, list[Any]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one class only, samples never seen (drop_last, an idle rank), no data
        for name, metric in metrics.items():
            try:
                value = metric.compute()
            except ValueError as err:
                out[name] = [f"{type(err).__name__}: {err}"]
                continue
            if isinstance(value, dict):
                out.update({k: flat_tensors(v) for k, v in value.items()})
            else:
                out[name] = flat_tensors(value)
    return out


def run_rank(rank: int, world: int, spec: Spec) -> dict[str, list[Any]]:
    """What one rank does: its sampler's indices in batches of ``spec.batch`` (none on the idle rank), every metric
    updated with each batch, then every value.
    """
    assert world == spec.world
    data = make_data(spec)
    metrics = build(spec, distributed=True)
    indices = sampler_indices(spec.n, world, rank, spec.shuffle, spec.drop_last, seed=spec.seed)
    if rank != spec.idle:
        for start in range(0, len(indices), spec.batch):
            rows = torch.tensor(indices[start : start + spec.batch], dtype=torch.int64)
            _feed(metrics, spec, rows, data, spec.dedup == "sample_ids")
    return _values(metrics)


def case_specs(rank: int, world: int, specs: list[Spec]) -> list[dict[str, list[Any]]]:
    """Several specs of one world size in one process group (one after the other, each with its own metrics)."""
    return [run_rank(rank, world, spec) for spec in specs]


# ---------------------------------------------------------------------- the references


def evaluated(spec: Spec) -> list[int]:
    """The samples the ranks evaluate together: with ``dataset_size``, those at sampler positions ``j * W + r < n``
    of the ranks that updated (a copy in the padding is dropped even when the real one was on the idle rank); with
    ids, every distinct index the ranks that updated saw.
    """
    seen: set[int] = set()
    for rank in range(spec.world):
        if rank == spec.idle:
            continue
        indices = sampler_indices(spec.n, spec.world, rank, spec.shuffle, spec.drop_last, seed=spec.seed)
        if spec.dedup == "dataset_size":
            indices = [i for j, i in enumerate(indices) if j * spec.world + rank < spec.n]
        seen.update(indices)
    return sorted(seen)


def one_process(spec: Spec, rows: list[int]) -> dict[str, list[Any]]:
    """The same classes in one process (no process group, no dedup keywords) fed the evaluated samples at once."""
    metrics = build(spec, distributed=False)
    if rows:
        _feed(metrics, spec, torch.tensor(rows, dtype=torch.int64), make_data(spec), ids=False)
    return _values(metrics)


def _rounded(spec: Spec, preds: Tensor) -> np.ndarray:
    """The scores as the mode ranks them: float32 (the stored scores), or rounded once to the 16-bit dtype."""
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(spec.mode, torch.float32)
    return preds.to(dtype).double().numpy()


def _defined(target: np.ndarray, weight: np.ndarray) -> bool:
    """Whether every binary problem (a column of ``target``) has both classes with positive weight."""
    if not len(target):
        return False
    columns = target.reshape(len(target), -1)
    return all(weight[col == 1].sum() > 0 and weight[col == 0].sum() > 0 for col in columns.T)


def _sklearn(spec: Spec, name: str, preds: Tensor, target: Tensor, weight: Tensor) -> list[np.ndarray]:
    """The scikit-learn value of one metric."""
    from sklearn.metrics import (
        accuracy_score,
        average_precision_score,
        precision_recall_curve,
        roc_auc_score,
        roc_curve,
    )

    w = weight.double().numpy()
    y = target.numpy()
    if name == "acc":
        return [np.asarray(accuracy_score(y, preds.numpy() > 0.5))]
    p = _rounded(spec, preds)
    if spec.family == "multiclass":
        y = torch.nn.functional.one_hot(target, WIDTH).numpy()
    if name in ("auroc", "tm_auroc"):
        return [np.asarray(roc_auc_score(y, p, sample_weight=w, average="macro"))]
    if name == "ap":
        return [np.asarray(average_precision_score(y, p, sample_weight=w, average="macro"))]
    if name == "roc":
        fpr, tpr, thr = roc_curve(y, p, sample_weight=w, drop_intermediate=False)
        return [fpr, tpr, np.concatenate([[1.0], thr[1:]])]  # torchmetrics' first threshold is 1.0, not inf
    precision, recall, thr = precision_recall_curve(y, p, sample_weight=w, drop_intermediate=False)
    return [precision, recall, thr]


def _binned(spec: Spec, name: str, preds: Tensor, target: Tensor, weight: Tensor) -> list[Tensor]:
    """The torchmetrics binned class in one process, on every sample repeated ``4 * weight`` times."""
    from torchmetrics import classification as tm

    if name == "acc":
        metric: Any = tm.BinaryAccuracy()
    else:
        kind = {"auroc": "AUROC", "tm_auroc": "AUROC", "ap": "AveragePrecision", "roc": "ROC"}.get(name, "")
        task = {"multiclass": "Multiclass", "multilabel": "Multilabel"}.get(spec.family, "Binary")
        extra = {"Multiclass": {"num_classes": WIDTH}, "Multilabel": {"num_labels": WIDTH}}.get(task, {})
        if task != "Binary":
            extra["average"] = "macro"
        metric = getattr(tm, task + (kind or "PrecisionRecallCurve"))(thresholds=spec.bins, **extra)
    if spec.weighted and name != "acc":  # BinaryAccuracy takes no weights: the collection gives it none
        times = (weight * 4).round().long()
        preds, target = preds.repeat_interleave(times, dim=0), target.repeat_interleave(times, dim=0)
    metric.update(preds, target)
    return flat_tensors(metric.compute())


def outside(spec: Spec, rows: list[int]) -> dict[str, list[Any] | None]:
    """The outside reference of every metric on the evaluated samples (``None`` where a binary problem lacks a class
    of positive weight, or there is no sample).
    """
    preds, target, weight = make_data(spec)
    index = torch.tensor(rows, dtype=torch.int64)
    preds, target = preds[index], target[index]
    weight = weight[index] if spec.weighted else torch.ones(len(rows))
    hot = torch.nn.functional.one_hot(target, WIDTH) if spec.family == "multiclass" else target
    defined = _defined(hot.numpy(), weight.double().numpy())
    out: dict[str, list[Any] | None] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in metric_names(spec):
            if not rows or (not defined and name != "acc"):
                # scikit-learn raises or warns there, and the package leaves such a class out where torchmetrics
                # counts it as 0 (documented: functional/auroc.py): only the one-process check applies
                out[name] = None
            elif spec.mode == "binned":
                out[name] = _binned(spec, name, preds, target, weight)
            else:
                out[name] = _sklearn(spec, name, preds, target, weight)
    return out


# ---------------------------------------------------------------------- the check


def _same_bits(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str):  # an error, the same on both sides
        return bool(a == b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    nan = a.isnan()
    if not torch.equal(nan, b.isnan()):
        return False
    bits = {8: torch.int64, 4: torch.int32, 2: torch.int16}[a.element_size()]
    return torch.equal(a[~nan].view(bits), b[~nan].view(bits))


def check(spec: Spec, per_rank: list[dict[str, list[Any]]]) -> list[str]:
    """Every rank's values are the one-process values bit for bit, and those are the outside reference's; returns
    the metrics whose outside reference was defined (and checked).
    """
    rows = evaluated(spec)
    expected = one_process(spec, rows)
    for rank, got in enumerate(per_rank):
        assert got.keys() == expected.keys(), (spec, rank)
        for name, want in expected.items():
            same = len(got[name]) == len(want) and all(map(_same_bits, got[name], want))
            assert same, f"{spec}: rank {rank}'s {name} {got[name]} is not the one-process value {want}"
    compared = []
    for name, reference in outside(spec, rows).items():
        if reference is None:
            continue
        compared.append(name)
        ours = expected[name]
        assert len(ours) == len(reference), (spec, name)
        for k, (a, b) in enumerate(zip(ours, reference, strict=True)):
            a64 = a.double().numpy()
            b64 = np.asarray(b, dtype=np.float64)
            is_thresholds = name in ("roc", "pr") and k == 2
            want = b64 if is_thresholds or spec.mode == "binned" else np.asarray(f32(b64), dtype=np.float64)
            if is_thresholds and a64.shape == () and want.shape == (1,):
                a64 = a64.reshape(1)  # one threshold (every score tied): torchmetrics returns it 0-d, and so do we
            assert a64.shape == want.shape, f"{spec}: {name}[{k}] shape {a64.shape}, reference {want.shape}"
            tol = 0.0 if is_thresholds else TOL
            close = np.allclose(a64, want, rtol=0.0, atol=tol, equal_nan=True)
            assert close, f"{spec}: {name}[{k}] = {a64} but the reference gives {want}"
    return compared
