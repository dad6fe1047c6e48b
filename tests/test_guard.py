"""The guard: every call pattern across ranks ends in a value or a clear error within the timeout, never a hang."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist
from _data import scores_and_labels
from _dist import DistPool
from _float32 import f32
from sklearn.metrics import roc_auc_score

from torchmetrics_varlen import MetricSyncError, VarlenAUROC, VarlenAveragePrecision, gather_varlen

pytestmark = pytest.mark.distributed

TIMEOUT = 3.0  # sync_timeout of the fault cases, seconds
SLACK = 5.0  # an error must arrive within TIMEOUT + SLACK


def _metric_with_data(rank: int, **kwargs: Any) -> VarlenAUROC:
    preds, target = scores_and_labels(40, 1)
    metric = VarlenAUROC(sync_timeout=TIMEOUT, **kwargs)
    metric.update(preds[rank * 10 : rank * 10 + 10], target[rank * 10 : rank * 10 + 10])
    return metric


def _timed_compute(metric: Any) -> dict[str, Any]:
    started = time.monotonic()
    try:
        value = float(metric.compute())
    except MetricSyncError as err:
        return {"error": str(err), "missing": err.missing_ranks, "seconds": time.monotonic() - started}
    return {"value": value, "seconds": time.monotonic() - started}


# ----------------------------------------------------------------------------- rank-side functions


def case_only_some_ranks_compute(rank: int, world: int, absent: list[int]) -> dict[str, Any] | None:
    metric = _metric_with_data(rank)
    if rank in absent:
        return None  # the classic mistake: `if rank == 0: metric.compute()`
    return _timed_compute(metric)


def case_rank_exits(rank: int, world: int) -> dict[str, Any]:
    metric = _metric_with_data(rank)
    if rank == 1:
        os._exit(3)
    return _timed_compute(metric)


def case_rank_raises(rank: int, world: int) -> dict[str, Any]:
    metric = _metric_with_data(rank)
    if rank == 1:
        msg = "a data loader error on rank 1"
        raise RuntimeError(msg)
    return _timed_compute(metric)


def case_barrier_meets_compute(rank: int, world: int) -> dict[str, Any]:
    """Rank 0 computes then waits at a barrier; rank 1 waits at the barrier first, then computes."""
    metric = _metric_with_data(rank)
    out: dict[str, Any] = {}
    if rank == 0:
        out["compute"] = _timed_compute(metric)
        dist.barrier()
    else:
        dist.barrier()
        out["compute"] = _timed_compute(metric)
    return out


def case_config_mismatch(rank: int, world: int, key: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"max_fpr": 0.5 if rank == 1 else None} if key == "max_fpr" else {}
    if key == "thresholds":
        kwargs["thresholds"] = 10 + rank
    if key == "class":
        metric: Any = (VarlenAveragePrecision if rank == 2 else VarlenAUROC)(sync_timeout=TIMEOUT)
        metric.update(torch.tensor([0.2, 0.7]), torch.tensor([0, 1]))
        return _timed_compute(metric)
    return _timed_compute(_metric_with_data(rank, **kwargs))


def case_gather_family_mismatch(rank: int, world: int) -> str:
    x = torch.arange(3, dtype=torch.float32 if rank == 0 else torch.int64)
    try:
        gather_varlen(x, sync_timeout=TIMEOUT)
    except MetricSyncError as err:
        return str(err)
    return "no error"


def case_gather_shape_mismatch(rank: int, world: int) -> str:
    try:
        gather_varlen(torch.zeros(2, 3 + rank), sync_timeout=TIMEOUT)
    except MetricSyncError as err:
        return str(err)
    return "no error"


def case_subgroup(rank: int, world: int, absent: int | None) -> dict[str, Any] | None:
    group = dist.new_group([1, 3])  # every rank must take part in creating it
    if rank not in (1, 3):
        return None
    metric = _metric_with_data(rank, process_group=group)
    if rank == absent:
        return None
    return _timed_compute(metric)


def case_life_cycle(rank: int, world: int) -> dict[str, Any]:
    preds, target = scores_and_labels(40, 1)
    part = slice(rank * 13, rank * 13 + 13)
    out: dict[str, Any] = {}
    # forward: batch value, no sync
    metric = VarlenAUROC(sync_timeout=TIMEOUT)
    out["forward"] = float(metric(preds[part], target[part]))
    out["global"] = float(metric.compute())
    out["cached"] = float(metric.compute())
    metric.reset()
    metric.update(preds[part][:5], target[part][:5])
    out["after_reset"] = float(metric.compute())
    # sync_on_compute=False: the local value
    local = VarlenAUROC(sync_on_compute=False, sync_timeout=TIMEOUT)
    local.update(preds[part], target[part])
    out["local"] = float(local.compute())
    # compute_on_cpu keeps list states on the CPU and still syncs
    on_cpu = VarlenAveragePrecision(compute_on_cpu=True, sync_timeout=TIMEOUT)
    on_cpu.update(preds[part], target[part])
    out["compute_on_cpu"] = float(on_cpu.compute())
    # states are local again after compute: updating continues the rank's own accumulation
    out["local_states_after_compute"] = int(metric.num_samples)
    return out


# ----------------------------------------------------------------------------- tests


def test_only_rank_0_computes_errors_within_timeout(pool: DistPool) -> None:
    """The seed bug: only rank 0 calls compute(). Rank 0 gets an error naming rank 1 within a few seconds."""
    outcomes = pool.values(case_only_some_ranks_compute, 2, [1])
    result = outcomes[0]
    assert "value" not in result
    assert result["missing"] == [1]
    assert result["seconds"] < TIMEOUT + SLACK
    assert "VarlenAUROC.compute() on rank 0 waited 3 s" in result["error"]
    assert "rank 1 never arrived" in result["error"]
    assert "Call VarlenAUROC.compute() (or log the metric) on every rank" in result["error"]


def test_rank_2_of_3_skips(pool: DistPool) -> None:
    outcomes = pool.values(case_only_some_ranks_compute, 3, [2])
    for result in outcomes[:2]:
        assert result["missing"] == [2]
        assert "rank 2 never arrived" in result["error"]
        assert result["seconds"] < TIMEOUT + SLACK


def test_rank_that_exits_makes_the_others_raise(pool: DistPool) -> None:
    outcomes = pool.run(case_rank_exits, 3, allow_failure=True)
    assert outcomes[1].status == "died"
    for o in (outcomes[0], outcomes[2]):
        assert o.status == "ok"
        assert o.value["missing"] == [1]
        assert o.value["seconds"] < TIMEOUT + SLACK


def test_rank_that_raises_before_compute_makes_the_others_raise(pool: DistPool) -> None:
    outcomes = pool.run(case_rank_raises, 2, allow_failure=True)
    assert outcomes[1].status == "error"
    assert "a data loader error on rank 1" in outcomes[1].error
    assert outcomes[0].value["missing"] == [1]
    assert outcomes[0].value["seconds"] < TIMEOUT + SLACK


def test_user_barrier_never_pairs_with_the_metric_sync(pool: DistPool) -> None:
    """A barrier on one rank while the other is in compute(): both ranks get a clear error, never a value."""
    outcomes = pool.values(case_barrier_meets_compute, 2, pg_timeout=30)
    first, late = outcomes[0]["compute"], outcomes[1]["compute"]
    assert first["missing"] == [1]
    assert first["seconds"] < TIMEOUT + SLACK
    assert "value" not in late
    assert "arrived after the other ranks had stopped waiting" in late["error"]


@pytest.mark.parametrize(
    ("key", "world", "expected"),
    [
        (
            "max_fpr",
            2,
            ["the ranks disagree on `max_fpr` (config)", "rank 0: {'max_fpr': None}", "rank 1: {'max_fpr': 0.5}"],
        ),
        (
            "thresholds",
            2,
            ["the ranks disagree on `thresholds` (config)", "rank 0: {'thresholds': [0.0, ", "rank 1: {"],
        ),
    ],
)
def test_configuration_mismatch_raises_on_every_rank(pool: DistPool, key: str, world: int, expected: list[str]) -> None:
    """The error names the fields that differ and each rank's value of them (not the whole configuration)."""
    for result in pool.values(case_config_mismatch, world, key):
        assert "value" not in result
        assert result["seconds"] < TIMEOUT + SLACK
        for text in expected:
            assert text in result["error"]
        assert "'average'" not in result["error"]  # fields that agree are not listed


def test_different_metric_classes_never_pair(pool: DistPool) -> None:
    """Ranks 0 and 1 compute a VarlenAUROC, rank 2 a VarlenAveragePrecision: different metrics are different
    syncs (the identity holds the class), so each side waits for the other and every rank raises in time.
    """
    outcomes = pool.values(case_config_mismatch, 3, "class")
    for rank, result in enumerate(outcomes):
        assert "value" not in result
        assert result["seconds"] < TIMEOUT + SLACK
        assert result["missing"] == ([2] if rank < 2 else [0, 1])
    assert "sync of 'VarlenAUROC#0', but rank 2 never arrived" in outcomes[0]["error"]
    assert "sync of 'VarlenAveragePrecision#0', but ranks 0 and 1 never arrived" in outcomes[2]["error"]


def test_gather_of_float_and_integer_tensors_raises_on_every_rank(pool: DistPool) -> None:
    for text in pool.values(case_gather_family_mismatch, 2):
        assert "differ in dtype family" in text
        assert "rank 0 (global 0): dtype torch.float32" in text
        assert "rank 1 (global 1): dtype torch.int64" in text


def test_gather_of_different_trailing_shapes_raises_on_every_rank(pool: DistPool) -> None:
    for text in pool.values(case_gather_shape_mismatch, 3):
        assert "differ in trailing shape" in text
        assert "trailing shape (5,)" in text


def test_subgroup_process_group(pool: DistPool) -> None:
    """A metric on a subgroup {1, 3} of 4 ranks syncs only those ranks' data."""
    preds, target = scores_and_labels(40, 1)
    idx = list(range(10, 20)) + list(range(30, 40))
    expected = roc_auc_score(target[idx], preds[idx])
    outcomes = pool.values(case_subgroup, 4, None)
    assert outcomes[0] is None
    assert outcomes[1]["value"] == pytest.approx(f32(expected), abs=1e-12)
    assert outcomes[3]["value"] == pytest.approx(f32(expected), abs=1e-12)


def test_subgroup_missing_rank_is_named_by_group_and_global_rank(pool: DistPool) -> None:
    outcomes = pool.values(case_subgroup, 4, 3)
    assert outcomes[1]["missing"] == [1]
    assert "rank 1 (global rank 3) never arrived" in outcomes[1]["error"]
    assert "on rank 0 (global rank 1)" in outcomes[1]["error"]


def test_life_cycle_under_ddp(pool: DistPool) -> None:
    """Forward (batch value, no sync), compute twice, reset, sync_on_compute=False, compute_on_cpu, unsync."""
    from sklearn.metrics import average_precision_score

    preds, target = scores_and_labels(40, 1)
    outcomes = pool.values(case_life_cycle, 3)
    union = slice(0, 39)
    for rank, out in enumerate(outcomes):
        part = slice(rank * 13, rank * 13 + 13)
        assert out["forward"] == pytest.approx(f32(roc_auc_score(target[part], preds[part])), abs=1e-12)
        assert out["global"] == pytest.approx(f32(roc_auc_score(target[union], preds[union])), abs=1e-12)
        assert out["cached"] == out["global"]
        first5 = [i for r in range(3) for i in range(r * 13, r * 13 + 5)]
        assert out["after_reset"] == pytest.approx(f32(roc_auc_score(target[first5], preds[first5])), abs=1e-12)
        assert out["local"] == pytest.approx(f32(roc_auc_score(target[part], preds[part])), abs=1e-12)
        union_ap = average_precision_score(target[union], preds[union])
        assert out["compute_on_cpu"] == pytest.approx(f32(union_ap), abs=1e-12)
        assert out["local_states_after_compute"] == 5
