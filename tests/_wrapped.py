"""The torchmetrics metrics the wrapper is tested with: data, how to call them, and the single-process reference."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

N = 23  # odd: DistributedSampler pads for W = 2, 3, 4
WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "past", "its", "warm", "red", "door"]


@dataclass(frozen=True)
class Case:
    """One metric: how to build it, its columns (update's positional then keyword arguments), what it supports."""

    name: str
    domain: str
    build: Callable[[], Metric]
    args: tuple[str, ...]
    kwargs: tuple[str, ...] = ()
    ids: bool = False  # list states growing one row per sample: `sample_ids` work
    abs_tol: float = 1e-6


def _build(cls_path: str, **kwargs: Any) -> Callable[[], Metric]:
    def build() -> Metric:
        module, name = cls_path.rsplit(".", 1)
        cls = getattr(__import__(module, fromlist=[name]), name)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Metric `\w+` will save all", category=UserWarning)
            return cls(**kwargs)  # type: ignore[no-any-return]

    return build


CASES = [
    Case(
        "BinaryRecallAtFixedPrecision",
        "classification",
        _build("torchmetrics.classification.BinaryRecallAtFixedPrecision", min_precision=0.5),
        ("probs", "binary"),
        ids=True,
    ),
    Case(
        "BinaryCalibrationError",
        "classification",
        _build("torchmetrics.classification.BinaryCalibrationError", n_bins=5),
        ("probs", "binary"),
        ids=True,
    ),
    Case("BinaryF1Score", "classification", _build("torchmetrics.classification.BinaryF1Score"), ("probs", "binary")),
    Case(
        "MulticlassAccuracy",
        "classification",
        _build("torchmetrics.classification.MulticlassAccuracy", num_classes=4),
        ("scores4", "class4"),
    ),
    Case(
        "RetrievalMAP",
        "retrieval",
        _build("torchmetrics.retrieval.RetrievalMAP"),
        ("probs", "binary"),
        ("indexes",),
        True,
    ),
    Case(
        "RetrievalNormalizedDCG",
        "retrieval",
        _build("torchmetrics.retrieval.RetrievalNormalizedDCG", top_k=3),
        ("probs", "binary"),
        ("indexes",),
        True,
    ),
    Case("SpearmanCorrCoef", "regression", _build("torchmetrics.regression.SpearmanCorrCoef"), ("x", "y"), ids=True),
    Case("PearsonCorrCoef", "regression", _build("torchmetrics.regression.PearsonCorrCoef"), ("x", "y"), abs_tol=1e-5),
    Case("R2Score", "regression", _build("torchmetrics.regression.R2Score"), ("x", "y"), abs_tol=1e-5),
    Case(
        "MutualInfoScore",
        "clustering",
        _build("torchmetrics.clustering.MutualInfoScore"),
        ("class3", "cluster3"),
        ids=True,
    ),
    Case("CramersV", "nominal", _build("torchmetrics.nominal.CramersV", num_classes=3), ("class3", "cluster3")),
    Case(
        "ROUGEScore",
        "text",
        _build("torchmetrics.text.ROUGEScore", rouge_keys=("rouge1", "rougeL")),
        ("hypothesis", "reference"),
        ids=True,
    ),
]
BY_NAME = {case.name: case for case in CASES}


def columns(n: int = N, seed: int = 0) -> dict[str, Any]:
    """Every column of the data set: float columns hold multiples of 1/256 (exact in float16, 32 and 64)."""
    gen = torch.Generator().manual_seed(seed)
    binary = torch.randint(0, 2, (n,), generator=gen)
    binary[:2] = torch.tensor([0, 1])
    distinct = torch.randperm(256, generator=gen)[:n].double() / 256  # no ties: rankings are unique
    words = torch.randint(0, len(WORDS), (2, n, 5), generator=gen)
    return {
        "probs": distinct / 2 + binary * 0.5,  # distinct: retrieval and curves see no ties
        "binary": binary,
        "scores4": torch.randint(0, 256, (n, 4), generator=gen).double() / 256,
        "class4": torch.randint(0, 4, (n,), generator=gen),
        "indexes": torch.randint(0, 5, (n,), generator=gen),
        "x": distinct,
        "y": (distinct * 0.5 + torch.randint(0, 64, (n,), generator=gen).double() / 256),
        "class3": torch.randint(0, 3, (n,), generator=gen),
        "cluster3": torch.randint(0, 3, (n,), generator=gen),
        "hypothesis": [" ".join(WORDS[w] for w in row) for row in words[0].tolist()],
        "reference": [" ".join(WORDS[w] for w in row) for row in words[1].tolist()],
    }


def take(column: Any, idx: list[int], dtype: torch.dtype = torch.float32) -> Any:
    """Rows ``idx`` of a column; floating tensors in ``dtype``."""
    if isinstance(column, Tensor):
        rows = column[torch.tensor(idx, dtype=torch.int64)] if idx else column[:0]
        return rows.to(dtype) if rows.is_floating_point() else rows
    return [column[i] for i in idx]


def call_args(case: Case, data: dict[str, Any], idx: list[int], dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """``(args, kwargs)`` of ``update`` for the samples ``idx``."""
    args = tuple(take(data[c], idx, dtype) for c in case.args)
    return args, {c: take(data[c], idx, dtype) for c in case.kwargs}


def flat(value: Any) -> list[float]:
    """A metric value (tensor, tuple, dict of them) as a flat list of floats, in a stable order."""
    if isinstance(value, dict):
        return [v for key in sorted(value) for v in flat(value[key])]
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in flat(item)]
    return [float(v) for v in torch.as_tensor(value).reshape(-1).tolist()]


def reference(case: Case, idx: list[int], n: int = N) -> list[float]:
    """The metric's own class, on one process, on the samples ``idx`` in index order, in one update."""
    metric = case.build()
    args, kwargs = call_args(case, columns(n), sorted(idx))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse invariant checks", category=UserWarning)  # MutualInfoScore
        metric.update(*args, **kwargs)
        return flat(metric.compute())
