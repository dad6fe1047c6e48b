"""Hypothesis: logits with heavy ties give one value, bit for bit, whatever the batch size and the world size.

Each example draws a multiset (a few distinct scores or rows of scores, repeated) of float16 / bfloat16 / float32 /
float64 logits or probabilities, labels, a world size W = 1-3, each rank's batch size and a sync path, deals the
samples to the ranks with a padded, shuffled ``DistributedSampler`` (``dataset_size=`` drops the padding) and
computes AUROC, AP, both curves and (binary, multilabel) the best F1 on every rank. Every rank's value must be
bitwise the value of the same metric fed the whole data set in one batch in one process, and equal to scikit-learn
on the float64 sigmoid / softmax of the scores rounded once to float32 (float64 for float64 logits;
``_float32.expit`` / ``softmax``; the 16-bit mode rounds those scores once more, to its dtype). torch's own CPU sigmoid
rounds an element by its place in the tensor, so before the package's position-free normalisation equal logits split
into two scores and the value moved with the batch size and W.

16-bit logits get float32 scores, so (binary, multilabel, outside the 16-bit mode) their AUROC, AP and curves are
also scikit-learn's on the logits themselves wherever a float32 tells their sigmoids apart: half of the 16-bit logit
cases draw from ``RESOLVED`` (every logit below 11, none within 0.01 of 0 and none in [0, 1], which a batch could
hold alone), where it always does, and are checked against scikit-learn on the logits cast to float64 as well.

A derandomised run is part of the default suite; ``nox -s property`` runs ``NORMALIZATION_EXAMPLES`` (40) random ones.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from _dist import DistPool
from _float32 import expit, f32, softmax
from _sampler import sampler_indices
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score, roc_curve

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}
# Logits outside [0, 1] (so that every batch is normalised, as one batch of all of them is), near saturation too.
# torch 2.13's CPU sigmoid gives these a different last bit in a tensor's vectorised body and in its tail (float32:
# -5.41, -4.53, -3.82; float64: -4.53, -3.08, -2.51, -1.94), a sure way to catch a position-dependent normalisation.
SENSITIVE = [-5.41, -4.53, -3.82, -3.08, -2.51, -1.94]
LOGITS = st.one_of(
    st.sampled_from(SENSITIVE),
    st.sampled_from([-36.0, -17.4, -9.75, -3.25, -1.5, -0.3, 1.25, 2.0, 3.3, 5.5, 16.6, 17.0, 17.4, 20.0]),
    st.floats(-20.0, -0.01),
    st.floats(1.01, 20.0),
)
# 16-bit logits whose float32 sigmoids are all distinct (above ~11.8 adjacent float16 logits, above ~13.9 bfloat16
# ones, can share a float32 sigmoid; around 0 a float32 step of 0.5 is 2.4e-7 of logit).
RESOLVED = st.one_of(
    st.sampled_from(SENSITIVE),
    st.sampled_from([-36.0, -9.75, -3.25, -1.5, -0.3, -0.02, 1.02, 1.25, 2.0, 3.3, 5.5, 7.0, 8.0, 10.9]),
    st.floats(-40.0, -0.01),
    st.floats(1.01, 11.0),  # none in [0, 1]: a batch of those alone would be read as probabilities (per-batch rule)
)
PROBS = st.one_of(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.7, 1.0]), st.floats(0.0, 1.0))
PATHS = ("gather", "on_rank", "sharded", "hist16")


def _tensor(values: list[Any], dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).to(dtype)


def _metrics(case: dict[str, Any], world: int, one_process: bool) -> dict[str, Any]:
    from torchmetrics_varlen import (
        VarlenAUROC,
        VarlenAveragePrecision,
        VarlenBestF1,
        VarlenPrecisionRecallCurve,
        VarlenROC,
    )

    kind, classes = case["kind"], case["classes"]
    task: dict[str, Any] = {"task": kind}
    if kind == "multiclass":
        task["num_classes"] = classes
    if kind == "multilabel":
        task["num_labels"] = classes
    common: dict[str, Any] = {**task, "sync_timeout": 30}
    if not one_process:
        common["dataset_size"] = case["n"]
    path = case["path"]
    sync = {"on_rank": {"compute_on_rank": world - 1}, "sharded": {"compute_sharded": True}}.get(path, {})
    if path == "on_rank":
        common.update(sync)  # every class takes it
    ranking = {**common, **(sync if path == "sharded" else {})}
    if path == "hist16":
        ranking["thresholds"] = torch.float16 if case["dtype"] == "float16" else torch.bfloat16
    average = {} if kind == "binary" else {"average": "macro"}
    out = {
        "auroc": VarlenAUROC(**ranking, **average),
        "ap": VarlenAveragePrecision(**ranking, **average),
        "roc": VarlenROC(**{k: v for k, v in ranking.items() if k != "compute_sharded"}),
        "pr": VarlenPrecisionRecallCurve(**{k: v for k, v in ranking.items() if k != "compute_sharded"}),
    }
    if kind != "multiclass":
        out["f1"] = VarlenBestF1(**{k: v for k, v in ranking.items() if k != "compute_sharded"})
    return out


def data(case: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole data set: ``n`` samples drawn (with repeats) from the case's few distinct scores or rows."""
    pool = _tensor(case["pool"], DTYPES[case["dtype"]])
    preds = pool[torch.tensor(case["picks"])]
    target = torch.tensor(case["labels"])
    return preds, target


def _values(metrics: dict[str, Any]) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*samples were evaluated|.*never seen", category=UserWarning)
        return {name: metric.compute() for name, metric in metrics.items()}


def case_normalization(rank: int, world: int, case: dict[str, Any]) -> dict[str, Any]:
    preds, target = data(case)
    mine = sampler_indices(case["n"], world, rank, shuffle=True, drop_last=False, seed=case["seed"])
    metrics = _metrics(case, world, one_process=False)
    batch = case["batches"][rank]
    for start in range(0, len(mine), batch):
        rows = torch.tensor(mine[start : start + batch], dtype=torch.long)
        for metric in metrics.values():
            metric.update(preds[rows], target[rows])
    return _values(metrics)


def _one_process(case: dict[str, Any]) -> dict[str, Any]:
    preds, target = data(case)
    metrics = _metrics(case, 1, one_process=True)
    for metric in metrics.values():
        metric.update(preds, target)
    return _values(metrics)


def _bitwise(ours: Any, theirs: Any, what: str) -> None:
    if isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs), what
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _bitwise(a, b, f"{what}[{i}]")
        return
    assert ours.dtype == theirs.dtype, what
    assert torch.equal(ours, theirs) or (bool(ours.isnan().all()) and bool(theirs.isnan().all())), (
        f"{what}: {ours} != {theirs}"
    )


def _scores(case: dict[str, Any], preds: torch.Tensor) -> torch.Tensor:
    """The reference normalisation (NumPy, float64, rounded once), then the 16-bit mode's rounding."""
    if case["input"] == "logits":
        preds = softmax(preds) if case["kind"] == "multiclass" else expit(preds)
    if case["path"] == "hist16":
        preds = preds.to(torch.float16 if case["dtype"] == "float16" else torch.bfloat16)
    return preds.double()


def _problems(case: dict[str, Any], scores: torch.Tensor | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """The binary problems of the case: its normalised scores, or ``scores`` (the logits themselves)."""
    preds, target = data(case)
    scores = _scores(case, preds) if scores is None else scores
    if case["kind"] == "binary":
        return [(target.numpy(), scores.numpy())]
    if case["kind"] == "multiclass":
        return [((target == k).numpy(), scores[:, k].numpy()) for k in range(case["classes"])]
    return [(target[:, k].numpy(), scores[:, k].numpy()) for k in range(case["classes"])]


def _check_sklearn(case: dict[str, Any], values: dict[str, Any]) -> None:
    _check_against(_problems(case), values)
    if _resolved(case):  # 16-bit logits a float32 sigmoid keeps apart: scikit-learn on the logits themselves
        preds, _ = data(case)
        _check_against(_problems(case, preds.double()), values)


def _resolved(case: dict[str, Any]) -> bool:
    """Whether the case's 16-bit logits are ranked as scikit-learn ranks the logits themselves (module docstring)."""
    if case["input"] != "logits" or case["dtype"] not in ("float16", "bfloat16") or case["path"] == "hist16":
        return False
    if case["kind"] == "multiclass":  # a softmax is not a per-logit map: tests/test_sixteen_bit_logits.py
        return False
    values = _tensor(case["pool"], DTYPES[case["dtype"]]).double()
    return bool(((values < 11) & (values.abs() >= 0.01)).all())


def _check_against(problems: list[tuple[np.ndarray, np.ndarray]], values: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn on a label with one class: not drawn, but never fatal
        auroc = np.mean([roc_auc_score(t, s) for t, s in problems])
        ap = np.mean([average_precision_score(t, s) for t, s in problems])
    assert float(values["auroc"]) == pytest.approx(f32(auroc), abs=1e-6)
    assert float(values["ap"]) == pytest.approx(f32(ap), abs=1e-6)
    curves = [values["roc"]] if len(problems) == 1 else list(zip(*values["roc"], strict=True))
    for (t, s), (fpr, tpr, _) in zip(problems, curves, strict=True):
        sk_fpr, sk_tpr, _ = roc_curve(t, s, drop_intermediate=False)
        assert fpr.tolist() == pytest.approx(f32(sk_fpr), abs=1e-6)
        assert tpr.tolist() == pytest.approx(f32(sk_tpr), abs=1e-6)
    curves = [values["pr"]] if len(problems) == 1 else list(zip(*values["pr"], strict=True))
    for (t, s), (precision, recall, _) in zip(problems, curves, strict=True):
        sk_p, sk_r, _ = precision_recall_curve(t, s)
        assert precision.tolist() == pytest.approx(f32(sk_p), abs=1e-6)
        assert recall.tolist() == pytest.approx(f32(sk_r), abs=1e-6)


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["binary", "binary", "multiclass", "multilabel"]))
    classes = 1 if kind == "binary" else draw(st.integers(2, 4))
    kind_input = draw(st.sampled_from(["logits", "logits", "logits", "probs"]))
    dtype = draw(st.sampled_from(["float32", "float32", "float64", "float64", "float16", "bfloat16"]))
    values = LOGITS if kind_input == "logits" else PROBS
    if kind_input == "logits" and dtype in ("float16", "bfloat16") and draw(st.booleans()):
        values = RESOLVED  # then checked against scikit-learn on the logits too
    row = values if kind == "binary" else st.lists(values, min_size=classes, max_size=classes)
    pool = draw(st.lists(row, min_size=2, max_size=6))
    n = draw(st.integers(2 * classes + 2, 120))
    picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=n, max_size=n))
    if kind == "multiclass":
        labels = list(range(classes)) + draw(
            st.lists(st.integers(0, classes - 1), min_size=n - classes, max_size=n - classes)
        )
    elif kind == "multilabel":
        both = [[0] * classes, [1] * classes]
        labels = both + draw(
            st.lists(st.lists(st.integers(0, 1), min_size=classes, max_size=classes), min_size=n - 2, max_size=n - 2)
        )
    else:
        labels = [0, 1] + draw(st.lists(st.integers(0, 1), min_size=n - 2, max_size=n - 2))
    world = draw(st.integers(1, 3))
    return {
        "kind": kind,
        "classes": classes,
        "input": kind_input,
        "dtype": dtype,
        "pool": pool,
        "picks": picks,
        "labels": labels,
        "n": n,
        "world": world,
        "seed": draw(st.integers(0, 2**16)),
        "batches": draw(st.lists(st.integers(1, 64), min_size=world, max_size=world)),
        "path": draw(st.sampled_from(PATHS)),
    }


def _run(pool: DistPool, case: dict[str, Any]) -> None:
    expected = _one_process(case)
    _check_sklearn(case, expected)
    for rank, got in enumerate(pool.values(case_normalization, case["world"], case)):
        for name in expected:
            _bitwise(got[name], expected[name], f"rank {rank} {name}")


_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]}


def _sixteen_bit_example(kind: str, dtype: str, pool: list[Any], path: str) -> dict[str, Any]:
    """A case of 16-bit logits above 5.5, where a 16-bit sigmoid merges them (bfloat16: 7, 8 and 10.9 all score
    1.0) and float32 scores do not: the value must be scikit-learn's on the logits.
    """
    n, width = 30, (1 if kind == "binary" else len(pool[0]))
    picks = [i % len(pool) for i in range(n)]
    flat = [float(v) for row in pool for v in (row if isinstance(row, list) else [row])]
    high = sorted(flat)[len(flat) // 2 :]  # the higher half of the logits: mostly positives
    labels: list[Any] = []
    for i, p in enumerate(picks):
        row = pool[p] if isinstance(pool[p], list) else [pool[p]]
        one = [int(v in high) ^ int(i % 5 == 0) for v in row]
        labels.append(one[0] if kind == "binary" else one)
    return {
        "kind": kind,
        "classes": width,
        "input": "logits",
        "dtype": dtype,
        "pool": pool,
        "picks": picks,
        "labels": labels,
        "n": n,
        "world": 2,
        "seed": 7,
        "batches": [4, 9],
        "path": path,
    }


@settings(max_examples=8, derandomize=True, **_COMMON)
@given(case=cases())
@example(case=_sixteen_bit_example("binary", "bfloat16", [5.5, 6.0, 7.0, 8.0, 10.9, -1.5], "gather"))
@example(
    case=_sixteen_bit_example(
        "multilabel", "float16", [[7.0, -3.25], [8.0, 10.9], [10.9, 6.0], [-0.3, 7.0], [5.5, 8.0]], "sharded"
    )
)
def test_tied_logits_give_one_value_small(pool: DistPool, case: dict[str, Any]) -> None:
    """The default suite's short run of the property below (the same examples every time)."""
    _run(pool, case)


@pytest.mark.property
@settings(max_examples=int(os.environ.get("NORMALIZATION_EXAMPLES", "40")), **_COMMON)
@given(case=cases())
def test_tied_logits_give_one_value(pool: DistPool, case: dict[str, Any]) -> None:
    """Any multiset of tied logits or probabilities, any dtype, batch sizes, W = 1-3 and sync path: one value, bit for
    bit, on every rank, equal to scikit-learn on the scores normalised once.
    """
    _run(pool, case)
