"""Sync protocol v2: the seven ways the first protocol went wrong, each as a named scenario on spawned gloo ranks.

Every compute() either returns scikit-learn's value on the samples of that sync or raises MetricSyncError within
``sync_timeout`` + 5 s; and once every rank does the right thing again, the value is exact on every rank.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist
from _data import scores_and_labels
from _dist import DistPool
from _float32 import f32
from _sampler import sampler_indices
from sklearn.metrics import roc_auc_score

from torchmetrics_varlen import MetricSyncError, VarlenAUROC, VarlenROC

pytestmark = pytest.mark.distributed

TIMEOUT = 2.0
SLACK = 5.0
N = 60


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    preds, target = scores_and_labels(N, 11)
    return preds.float(), target


def _part(rank: int, world: int) -> slice:
    size = -(-N // world)
    return slice(rank * size, min(N, (rank + 1) * size))


def _truth(flip: bool = False) -> float:
    preds, target = _data()
    return f32(roc_auc_score((1 - target) if flip else target, preds.double()))


def _metric(rank: int, world: int, flip: bool = False, **kwargs: Any) -> VarlenAUROC:
    preds, target = _data()
    metric = VarlenAUROC(sync_timeout=TIMEOUT, **kwargs)
    part = _part(rank, world)
    metric.update(preds[part], (1 - target[part]) if flip else target[part])
    dist.barrier()  # every rank is ready (a freshly spawned worker imports for a while): only the scenario is late
    return metric


def _timed(fn: Any) -> dict[str, Any]:
    started = time.monotonic()
    try:
        value = fn()
    except MetricSyncError as err:
        return {"error": str(err), "missing": err.missing_ranks, "seconds": time.monotonic() - started}
    return {"value": float(value), "seconds": time.monotonic() - started}


# ----------------------------------------------------------------------------- rank-side functions


def case_error_then_recovery(rank: int, world: int, n_metrics: int) -> list[dict[str, Any]]:
    """Epoch 0: only rank 0 computes A (the classic mistake) and catches the error. Epochs 1-2: all ranks compute
    A then B, correctly.
    """
    out: list[dict[str, Any]] = []
    metrics = [_metric(rank, world, flip=bool(i)) for i in range(n_metrics)]
    for epoch in range(3):
        if epoch == 0:
            out.append(_timed(metrics[0].compute) if rank == 0 else {})
        else:
            for metric in metrics:
                metric.reset()
                preds, target = _data()
                part = _part(rank, world)
                metric.update(preds[part], (1 - target[part]) if metric is not metrics[0] else target[part])
                out.append(_timed(metric.compute))
        dist.barrier()
    return out


def case_two_groups_over_the_same_ranks(rank: int, world: int) -> list[dict[str, Any]]:
    """A on a side gloo group over every rank (as next to NCCL), B on the default group; both used correctly."""
    side = dist.new_group(list(range(world)), backend="gloo")
    out = []
    for _ in range(2):
        a = _metric(rank, world, process_group=side)
        b = _metric(rank, world, flip=True)
        out += [_timed(a.compute), _timed(b.compute)]
    return out


def case_swapped_order(rank: int, world: int) -> list[dict[str, Any]]:
    """Two same-argument metrics; rank 0 computes A then B, the others B then A. Then a correct epoch."""
    a, b = _metric(rank, world), _metric(rank, world, flip=True)
    first = [_timed(m.compute) for m in ((a, b) if rank == 0 else (b, a))]
    dist.barrier()
    for metric, flip in ((a, False), (b, True)):
        metric.reset()
        preds, target = _data()
        part = _part(rank, world)
        metric.update(preds[part], (1 - target[part]) if flip else target[part])
    return first + [_timed(a.compute), _timed(b.compute)]


def case_store_host_exits(rank: int, world: int) -> dict[str, Any] | None:
    """A job whose store lives in rank 0's process (env:// / mp.spawn); rank 0 exits before compute()."""
    from torchmetrics_varlen._compat import default_store

    pool_store = default_store()
    dist.destroy_process_group()
    if rank == 0:
        host = dist.TCPStore("127.0.0.1", 0, world, True, wait_for_workers=False)
        pool_store.set("host_port", str(host.port))
        store = host
    else:
        port = int(pool_store.get("host_port"))
        store = dist.TCPStore("127.0.0.1", port, world, False, timeout=datetime.timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    metric = _metric(rank, world)
    if rank == 0:
        time.sleep(0.5)  # the others are already waiting in the check-in
        os._exit(0)
    return _timed(metric.compute)


def case_peer_dies_after_check_in(rank: int, world: int, where: str) -> dict[str, Any] | None:
    """Rank 1 dies right after the check-in (before the data exchange), or, with compute_on_rank=1, while it
    computes the value the others wait for.
    """
    from torchmetrics_varlen._core import strategies as _strategy
    from torchmetrics_varlen._dist import transport

    if where == "exchange":
        metric = _metric(rank, world)
        if rank == 1:
            transport._gather_packed = lambda *args: os._exit(0)  # type: ignore[assignment]
    else:
        metric = _metric(rank, world, compute_on_rank=1)
        if rank == 1:
            _strategy.broadcast_value = lambda *args, **kwargs: os._exit(0)  # type: ignore[assignment]
    return _timed(metric.compute)


def case_value_travels_as_tensors(rank: int, world: int) -> dict[str, Any]:
    """compute_on_rank=1 with a curve (a tuple of tensors): no pickle on the way."""
    preds, target = _data()
    metric = VarlenROC(sync_timeout=TIMEOUT, compute_on_rank=1)
    part = _part(rank, world)
    metric.update(preds[part], target[part])
    dist.barrier()  # as in _metric: only the scenario may be late
    pickled = 0
    original = dist.broadcast_object_list

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal pickled
        pickled += 1
        return original(*args, **kwargs)

    dist.broadcast_object_list = counting
    try:
        fpr, tpr, thresholds = metric.compute()
    finally:
        dist.broadcast_object_list = original
    return {"pickled": pickled, "curve": [fpr.tolist(), tpr.tolist(), thresholds.tolist()], "kept": metric.sync_report}


def case_rejected_batch(rank: int, world: int, n: int) -> dict[str, Any]:
    """DistributedSampler padding with dataset_size; rank 1's second batch is bad (NaN) and the loop skips it."""
    preds, target = scores_and_labels(n, 5)
    idx = sampler_indices(n, world, rank, shuffle=True, drop_last=False)
    metric = VarlenAUROC(dataset_size=n, sync_timeout=TIMEOUT)
    rejected: list[int] = []
    for b, start in enumerate(range(0, len(idx), 4)):
        batch = idx[start : start + 4]
        scores = preds[batch].float()
        if rank == 1 and b == 1:
            scores[0] = float("nan")
        try:
            metric.update(scores, target[batch])
        except ValueError:
            rejected += batch
    value = float(metric.compute())
    return {"value": value, "rejected": rejected, "report": metric.sync_report}


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("n_metrics", [1, 2])
def test_1_one_caught_error_does_not_desync_the_group(pool: DistPool, n_metrics: int) -> None:
    truths = [_truth(), _truth(flip=True)][:n_metrics]
    for rank, out in enumerate(pool.values(case_error_then_recovery, 2, n_metrics)):
        if rank == 0:
            assert out[0]["missing"] == [1]
            assert out[0]["seconds"] < TIMEOUT + SLACK
        later = out[1:]
        assert [r.get("value") for r in later] == pytest.approx(truths * 2, abs=1e-7), later


def test_2_two_process_groups_over_the_same_ranks_never_share_keys(pool: DistPool) -> None:
    for out in pool.values(case_two_groups_over_the_same_ranks, 3):
        assert [r.get("value") for r in out] == pytest.approx([_truth(), _truth(flip=True)] * 2, abs=1e-7), out


def test_3_metrics_computed_in_a_different_order_never_pair(pool: DistPool) -> None:
    """Rank 0 computes A then B, rank 1 B then A: A never meets B. Each call gives its own metric's exact value
    (when both ranks happen to be in the same metric's sync: B, after rank 0 gave up on A) or an error naming the
    metric, in time; the next epoch, in the same order everywhere, is exact.
    """
    outcomes = pool.values(case_swapped_order, 2)
    errors = 0
    for rank, out in enumerate(outcomes):
        names = ("VarlenAUROC#0", "VarlenAUROC#1") if rank == 0 else ("VarlenAUROC#1", "VarlenAUROC#0")
        for result, name in zip(out[:2], names, strict=True):
            assert result["seconds"] < TIMEOUT + SLACK
            if "value" in result:
                assert result["value"] == pytest.approx(_truth(flip=name.endswith("1")), abs=1e-7), (rank, name)
            else:
                errors += 1
                assert f"'{name}'" in result["error"]
        assert [r.get("value") for r in out[2:]] == pytest.approx([_truth(), _truth(flip=True)], abs=1e-7)
    assert errors >= 2  # at least A's first call fails on both ranks


def test_4_the_store_host_exiting_is_reported_as_such(pool: DistPool) -> None:
    outcomes = pool.run(case_store_host_exits, 3, allow_failure=True)
    assert outcomes[0].status == "died", outcomes
    for o in outcomes[1:]:
        assert o.status == "ok", o.error
        assert "value" not in o.value
        assert "lost the connection to the process group's store" in o.value["error"]
        assert "global rank 0" in o.value["error"]
        assert o.value["seconds"] < TIMEOUT + SLACK


@pytest.mark.parametrize("where", ["exchange", "compute_on_rank"])
def test_5_a_peer_that_dies_after_the_check_in_is_named(pool: DistPool, where: str) -> None:
    outcomes = pool.run(case_peer_dies_after_check_in, 3, where, allow_failure=True, pg_timeout=60)
    assert outcomes[1].status == "died", outcomes
    for o in (outcomes[0], outcomes[2]):
        assert o.status == "ok", o.error
        assert "value" not in o.value
        assert o.value["missing"] == [1], o.value["error"]
        assert "rank 1 stopped responding" in o.value["error"]
        assert o.value["seconds"] < TIMEOUT + SLACK


def test_5_compute_on_rank_sends_its_value_as_tensors(pool: DistPool) -> None:
    outcomes = pool.values(case_value_travels_as_tensors, 3)
    assert all(o["pickled"] == 0 for o in outcomes)
    assert all(o["curve"] == outcomes[1]["curve"] for o in outcomes)
    assert all(o["kept"] == outcomes[1]["kept"] for o in outcomes)
    assert outcomes[0]["kept"].kept == N


def test_6_a_rejected_batch_keeps_the_sampler_positions(pool: DistPool) -> None:
    n, world = 23, 3  # 24 positions: one padding row
    preds, target = scores_and_labels(n, 5)
    outcomes = pool.values(case_rejected_batch, world, n)
    rejected = set(outcomes[1]["rejected"])
    assert len(rejected) == 4
    kept = [i for i in range(n) if i not in rejected]
    expected = f32(roc_auc_score(target[kept], preds[kept].float().double()))
    for out in outcomes:
        assert out["value"] == pytest.approx(expected, abs=1e-7)
        report = out["report"]
        assert report.rejected == 4
        assert report.kept == n - 4
        assert report.duplicates_dropped == 1  # the padding row, dropped by position
        assert report.missing == 4  # the rejected samples were never evaluated
