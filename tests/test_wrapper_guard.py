"""The guard holds for wrapped torchmetrics metrics and for VarlenCollection: a value or a MetricSyncError naming the
metric and the ranks within sync_timeout + a few seconds, never a hang; and the next correct epoch is exact.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist
from _dist import DistPool
from _wrapped import BY_NAME, N, call_args, columns, flat, reference
from torchmetrics.classification import BinaryF1Score
from torchmetrics.regression import CosineSimilarity
from torchmetrics.retrieval import RetrievalMAP

from torchmetrics_varlen import MetricSyncError, Varlen, VarlenAUROC, VarlenCollection

pytestmark = pytest.mark.distributed

TIMEOUT = 2.0
SLACK = 5.0
MAP = BY_NAME["RetrievalMAP"]


def _part(rank: int, world: int) -> list[int]:
    return list(range(N))[rank::world]


def _retrieval(rank: int, world: int, **kwargs: Any) -> Varlen:
    metric = Varlen(RetrievalMAP(**kwargs), sync_timeout=TIMEOUT)
    args, kw = call_args(MAP, columns(), _part(rank, world))
    metric.update(*args, **kw)
    return metric


def _timed(fn: Any) -> dict[str, Any]:
    started = time.monotonic()
    try:
        value = flat(fn())
    except MetricSyncError as err:
        return {"error": str(err), "missing": err.missing_ranks, "seconds": time.monotonic() - started}
    return {"value": value, "seconds": time.monotonic() - started}


# ----------------------------------------------------------------------------- rank-side functions


def case_rank_0_computes_then_everyone(rank: int, world: int, collection: bool) -> list[dict[str, Any]]:
    """Epoch 0: only rank 0 computes (the classic mistake) and catches the error. Epoch 1: every rank, correctly."""
    out = []
    metric: Any = (
        VarlenCollection({"map": RetrievalMAP(), "auroc": VarlenAUROC()}, sync_timeout=TIMEOUT)
        if collection
        else Varlen(RetrievalMAP(), sync_timeout=TIMEOUT)
    )
    for epoch in range(2):
        metric.reset()
        args, kw = call_args(MAP, columns(), _part(rank, world))
        metric.update(*args, **kw)
        dist.barrier()  # every rank is ready: only the scenario is late
        out.append(_timed(metric.compute) if epoch or rank == 0 else {})
        dist.barrier()
    return out


def case_rank_exits(rank: int, world: int) -> dict[str, Any]:
    metric = _retrieval(rank, world)
    dist.barrier()
    if rank == 1:
        os._exit(3)
    return _timed(metric.compute)


def case_config_mismatch(rank: int, world: int) -> dict[str, Any]:
    metric = Varlen(BinaryF1Score(threshold=0.7 if rank == 1 else 0.5), sync_timeout=TIMEOUT)
    metric.update(torch.tensor([0.2, 0.8]), torch.tensor([0, 1]))
    dist.barrier()  # a freshly spawned worker (after a test that killed one) imports for a while: not a late rank
    return _timed(metric.compute)


def case_shape_mismatch(rank: int, world: int) -> dict[str, Any]:
    """CosineSimilarity keeps (N, D) rows: D = 3 on rank 0, 4 elsewhere cannot be concatenated."""
    metric = Varlen(CosineSimilarity(), sync_timeout=TIMEOUT)
    width = 3 if rank == 0 else 4
    metric.update(torch.ones(2, width), torch.ones(2, width))
    dist.barrier()
    return _timed(metric.compute)


def case_error_after_sync_then_recovery(rank: int, world: int) -> list[Any]:
    """empty_target_action="error": a query without positives raises in compute, on every rank (the same data), after
    the sync. The states are this rank's again, and the next epoch is exact.
    """
    out: list[Any] = []
    metric = Varlen(RetrievalMAP(empty_target_action="error"), sync_timeout=TIMEOUT)
    metric.update(torch.tensor([0.5, 0.4]), torch.tensor([0, 0]), torch.tensor([7, 7]))
    dist.barrier()
    try:
        metric.compute()
    except ValueError as err:
        out.append(str(err))
    out.append(len(metric.metric.preds))  # this rank's one stored batch, not the gathered rows
    metric.reset()
    metric.update(*_one_query(rank))
    out.append(_timed(metric.compute))
    return out


def _one_query(rank: int) -> tuple[torch.Tensor, ...]:
    """Two documents of query 7 per rank, one relevant: no query without a positive."""
    return torch.tensor([0.9 - rank / 10, 0.05 + rank / 10]), torch.tensor([1, 0]), torch.tensor([7, 7])


def case_swapped_order(rank: int, world: int) -> list[dict[str, Any]]:
    """Two wrapped metrics of one class; rank 0 computes A then B, the others B then A. Then a correct epoch."""
    a, b = _retrieval(rank, world), _retrieval(rank, world, top_k=2)
    dist.barrier()
    first = [_timed(m.compute) for m in ((a, b) if rank == 0 else (b, a))]
    dist.barrier()
    return [*first, _timed(a.compute), _timed(b.compute)]


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("collection", [False, True])
def test_rank_0_alone_errors_in_time_and_the_next_epoch_is_exact(pool: DistPool, collection: bool) -> None:
    from sklearn.metrics import roc_auc_score

    outcomes = pool.values(case_rank_0_computes_then_everyone, 2, collection)
    first = outcomes[0][0]
    assert first["missing"] == [1]
    assert first["seconds"] < TIMEOUT + SLACK
    what = "VarlenCollection(auroc, map).compute()" if collection else "Varlen(RetrievalMAP).compute()"
    assert f"{what} on rank 0 waited 2 s" in first["error"]
    assert "rank 1 never arrived" in first["error"]
    data = columns()
    expected = reference(MAP, list(range(N)))
    if collection:
        auroc = roc_auc_score(data["binary"], data["probs"].float())
        expected = pytest.approx([auroc, *expected], abs=1e-6)  # values in key order: auroc, map
    for out in outcomes:
        assert out[1]["value"] == expected


def test_a_rank_that_exits_is_named(pool: DistPool) -> None:
    outcomes = pool.run(case_rank_exits, 3, allow_failure=True)
    assert outcomes[1].status == "died"
    for o in (outcomes[0], outcomes[2]):
        assert o.value["missing"] == [1]
        assert o.value["seconds"] < TIMEOUT + SLACK


def test_different_configurations_raise_on_every_rank(pool: DistPool) -> None:
    for result in pool.values(case_config_mismatch, 2):
        assert "value" not in result
        assert "Varlen(BinaryF1Score).compute()" in result["error"]
        assert "the ranks disagree on `threshold` (config)" in result["error"]
        assert "rank 0: {'threshold': 0.5}" in result["error"]
        assert "rank 1: {'threshold': 0.7}" in result["error"]


def test_rows_that_cannot_be_concatenated_raise_on_every_rank(pool: DistPool) -> None:
    for result in pool.values(case_shape_mismatch, 3):
        assert "value" not in result
        assert "state `preds` (reduced by concatenation) cannot be concatenated" in result["error"]
        assert "rank 0: trailing shapes [(3,)]" in result["error"]
        assert "rank 2: trailing shapes [(4,)]" in result["error"]


def test_an_error_after_the_sync_puts_the_states_back(pool: DistPool) -> None:
    single = RetrievalMAP(empty_target_action="error")
    for rank in range(3):
        single.update(*_one_query(rank))
    expected = flat(single.compute())
    for out in pool.values(case_error_after_sync_then_recovery, 3):
        assert "no positive target" in out[0]
        assert out[1] == 1
        assert out[2]["value"] == pytest.approx(expected, abs=1e-6)


def test_metrics_computed_in_different_orders_never_pair(pool: DistPool) -> None:
    full = list(range(N))
    top2 = RetrievalMAP(top_k=2)
    args, kw = call_args(MAP, columns(), full)
    top2.update(*args, **kw)
    expected = [reference(MAP, full), flat(top2.compute())]
    errors = 0
    for rank, out in enumerate(pool.values(case_swapped_order, 2)):
        order = (0, 1) if rank == 0 else (1, 0)
        for result, which in zip(out[:2], order, strict=True):
            assert result["seconds"] < TIMEOUT + SLACK
            if "value" in result:  # the other rank reached the same metric's sync in time: exact, never mixed up
                assert result["value"] == pytest.approx(expected[which], abs=1e-6)
            else:
                errors += 1
                assert f"'Varlen(RetrievalMAP)#{which}'" in result["error"]
        assert [out[2]["value"], out[3]["value"]] == [pytest.approx(e, abs=1e-6) for e in expected]
    assert errors >= 2  # at least the first call fails on both ranks
