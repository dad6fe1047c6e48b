"""Sync identity v3: a late, extra or mid-epoch call never pairs states of different moments; a re-initialised group
on the same store never meets the old group's keys.

Every case runs on spawned gloo ranks with a short ``sync_timeout``. The data of (epoch, part, rank) differs, so a
value that combined one rank's states of one moment with another rank's of another would differ from scikit-learn's
value on the data each rank holds at that call, which is what every successful call is compared with.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
import torch.distributed as dist
from _dist import DistPool, harness_store, reinit_default_group
from _float32 import f32
from sklearn.metrics import roc_auc_score

from torchmetrics_varlen import MetricSyncError, Varlen, VarlenAUROC, VarlenCollection

pytestmark = pytest.mark.distributed

TIMEOUT = 2.0  # sync_timeout, seconds
LATE = TIMEOUT + 0.8  # how late the late rank is: past the others' timeout, well within their next one
SLACK = 5.0


def _batch(epoch: int, part: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s ``part``-th batch of ``epoch``: 6 + rank + 3 * part rows (epoch-specific scores)."""
    gen = torch.Generator().manual_seed(1000 * epoch + 100 * part + rank)
    n = 6 + rank + 3 * part
    target = torch.randint(0, 2, (n,), generator=gen)
    target[0], target[1] = 0, 1
    preds = (torch.randint(0, 32, (n,), generator=gen) / 32 * 0.7 + 0.3 * target).float()
    return preds, target


def _truth(batches: list[tuple[int, int, int]]) -> float:
    """scikit-learn's AUROC on the union of ``(epoch, part, rank)`` batches."""
    parts = [_batch(*b) for b in batches]
    preds = torch.cat([p for p, _ in parts]).double()
    target = torch.cat([t for _, t in parts])
    return f32(roc_auc_score(target.numpy(), preds.numpy()))


def _make(kind: str, **kwargs: Any) -> Any:
    if kind == "varlen":
        return VarlenAUROC(sync_timeout=TIMEOUT, **kwargs)
    if kind == "wrapped":
        from torchmetrics.classification import BinaryAUROC

        return Varlen(BinaryAUROC(**kwargs), sync_timeout=TIMEOUT)
    return VarlenCollection({"auroc": VarlenAUROC(**kwargs)}, sync_timeout=TIMEOUT)


def _value(kind: str, metric: Any) -> float:
    value = metric.compute()
    return float(value["auroc"] if kind == "collection" else value)


def _call(kind: str, metric: Any) -> dict[str, Any]:
    started = time.monotonic()
    try:
        return {"value": _value(kind, metric), "seconds": time.monotonic() - started}
    except MetricSyncError as err:
        return {"error": str(err), "missing": err.missing_ranks, "seconds": time.monotonic() - started}


def _states(kind: str, metric: Any) -> list[float]:
    """A digest of the rank's own states (sum of its scores and row count), to see that a failed call kept them."""
    inner = metric["auroc"] if kind == "collection" else metric
    held = inner.metric if kind == "wrapped" else inner
    preds = held.preds
    flat = torch.cat([p.reshape(-1) for p in preds]) if isinstance(preds, list) else preds.reshape(-1)
    return [float(flat.double().sum()), float(flat.numel())]


def _update(metric: Any, epoch: int, part: int, rank: int) -> None:
    metric.update(*_batch(epoch, part, rank))


# ----------------------------------------------------------------------------- rank-side functions


def case_late_with_reset(rank: int, world: int, kind: str, epochs: int) -> list[dict[str, Any]]:
    """The last rank is LATE seconds late for compute() in epoch 0; every rank resets each epoch."""
    metric = _make(kind)
    out = []
    for epoch in range(epochs):
        metric.reset()
        _update(metric, epoch, 0, rank)
        if epoch == 0:
            dist.barrier()  # only the first epoch starts together; later ones run free
        if epoch == 0 and rank == world - 1:
            time.sleep(LATE)
            before = _states(kind, metric)
            record = _call(kind, metric)
            record["kept"] = _states(kind, metric) == before
            out.append(record)
            continue
        out.append(_call(kind, metric))
    return out


def case_late_without_reset(rank: int, world: int, kind: str) -> list[dict[str, Any]]:
    """The last rank is late for the first compute(); then every rank updates again and computes (no reset)."""
    metric = _make(kind)
    _update(metric, 0, 0, rank)
    dist.barrier()
    if rank == world - 1:
        time.sleep(LATE)
    out = [_call(kind, metric)]
    for part in (1, 2):
        _update(metric, 0, part, rank)
        out.append(_call(kind, metric))
    return out


def case_extra_compute(rank: int, world: int, kind: str, reset: bool) -> list[dict[str, Any]]:
    """compute_with_cache=False; rank 0 calls compute() twice in epoch 0, the others once; then a second epoch (with
    ``reset``) or new updates (without).
    """
    metric = _make(kind, compute_with_cache=False)
    _update(metric, 0, 0, rank)
    dist.barrier()
    out = [_call(kind, metric)]
    if rank == 0:
        out.append(_call(kind, metric))
    if reset:
        metric.reset()
        _update(metric, 1, 0, rank)
    else:
        _update(metric, 0, 1, rank)
    out.append(_call(kind, metric))
    return out


def case_mid_epoch(rank: int, world: int, kind: str) -> list[dict[str, Any]]:
    """Rank 0 calls compute() after the first of its two batches, the others only at the end; two more epochs."""
    metric = _make(kind)
    out = []
    for epoch in range(3):
        metric.reset()
        if epoch == 0:
            dist.barrier()
        _update(metric, epoch, 0, rank)
        if epoch == 0 and rank == 0:
            mid = _call(kind, metric)
            if "value" in mid and kind == "varlen":
                mid["seen"] = list(metric.sync_report.seen_per_rank)
            out.append(mid)
        _update(metric, epoch, 1, rank)
        record = _call(kind, metric)
        if "value" in record and kind == "varlen":
            record["seen"] = list(metric.sync_report.seen_per_rank)
        out.append(record)
    return out


def _round(rank: int, world: int, kind: str, epoch: int) -> list[dict[str, Any]]:
    """Rank 0 alone calls compute() (an error, caught), then every rank resets, updates and computes."""
    metric = _make(kind)
    _update(metric, epoch, 0, rank)
    dist.barrier()
    out = [_call(kind, metric) if rank == 0 else {}]
    dist.barrier()  # as a training loop's collectives would: the epochs start together
    metric.reset()
    _update(metric, epoch, 1, rank)
    out.append(_call(kind, metric))
    return out


def case_reinit_same_store(rank: int, world: int, kind: str, rounds: int) -> list[Any]:
    """destroy_process_group() and init_process_group() on the same store, ``rounds`` times; every round creates its
    metric afresh (the same identity as the last round's) and leaves an abandoned and a completed sync behind.
    """
    store = harness_store()
    out: list[Any] = []
    for round_ in range(rounds):
        if round_:
            reinit_default_group(store, rank, world, f"{kind}/{round_}")
        out += _round(rank, world, kind, 10 * round_)
    return out


def case_two_jobs_on_one_store(rank: int, world: int, kind: str) -> list[Any]:
    """Two jobs one after the other on one store: the second's processes are fresh (simulated by forgetting every
    per-process counter), so only the store can tell them apart.
    """
    from torchmetrics_varlen._dist import checkin

    store = harness_store()
    out: list[Any] = []
    for job in range(2):
        if job:
            checkin._SCOPES.clear()  # a new process knows nothing of the old job
            reinit_default_group(store, rank, world, f"job/{kind}")
        checkin._scope().created.clear()  # and creates its metrics with the same identities as the old job
        out += _round(rank, world, kind, 20 + 10 * job)
    return out


# ----------------------------------------------------------------------------- tests

KINDS = ["varlen", "wrapped", "collection"]


def _exact(record: dict[str, Any], batches: list[tuple[int, int, int]], where: Any) -> None:
    assert "value" in record, (where, record)
    tol = 1e-6 if "wrapped" in str(where) else 1e-7
    assert record["value"] == pytest.approx(_truth(batches), abs=tol), (where, record)


@pytest.mark.parametrize("kind", KINDS)
def test_late_rank_with_reset_raises_and_every_later_epoch_is_exact(pool: DistPool, kind: str) -> None:
    world, epochs = 2, 3
    outcomes = pool.values(case_late_with_reset, world, kind, epochs, pg_timeout=60)
    first, late = outcomes[0][0], outcomes[1][0]
    assert first["missing"] == [1], first
    assert first["seconds"] < TIMEOUT + SLACK
    assert "value" not in late, late
    assert "arrived after the other ranks had stopped waiting" in late["error"]
    assert " s late, sync_timeout=2 s" in late["error"]
    assert "states were left as they were" in late["error"]
    assert late["kept"]
    assert late["seconds"] < TIMEOUT + SLACK
    for epoch in range(1, epochs):  # the very next epoch included
        for rank in range(world):
            _exact(outcomes[rank][epoch], [(epoch, 0, r) for r in range(world)], (kind, rank, epoch))


def test_late_rank_of_three_with_reset(pool: DistPool) -> None:
    world, epochs = 3, 2
    outcomes = pool.values(case_late_with_reset, world, "varlen", epochs, pg_timeout=60)
    assert outcomes[0][0]["missing"] == [2]
    assert outcomes[1][0]["missing"] == [2]
    assert "arrived after the other ranks had stopped waiting" in outcomes[2][0]["error"]
    for rank in range(world):
        _exact(outcomes[rank][1], [(1, 0, r) for r in range(world)], rank)


@pytest.mark.parametrize("kind", KINDS)
def test_late_rank_without_reset_never_mixes_moments(pool: DistPool, kind: str) -> None:
    world = 2
    outcomes = pool.values(case_late_without_reset, world, kind, pg_timeout=60)
    assert outcomes[0][0]["missing"] == [1]
    assert "arrived after the other ranks had stopped waiting" in outcomes[1][0]["error"]
    for rank in range(world):
        for call in (1, 2):  # the cumulative data each rank holds at that call
            _exact(outcomes[rank][call], [(0, p, r) for r in range(world) for p in range(call + 1)], (kind, call))


@pytest.mark.parametrize("reset", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_extra_compute_without_cache_fails_alone(pool: DistPool, kind: str, reset: bool) -> None:
    world = 2
    outcomes = pool.values(case_extra_compute, world, kind, reset, pg_timeout=60)
    second = [(1, 0, r) for r in range(world)] if reset else [(0, p, r) for r in range(world) for p in (0, 1)]
    for rank in range(world):
        out = outcomes[rank]
        _exact(out[0], [(0, 0, r) for r in range(world)], (kind, rank, "first"))
        _exact(out[-1], second, (kind, rank, "after"))
    extra = outcomes[0][1]
    assert "value" not in extra, extra
    assert "called again on the same states" in extra["error"]
    assert extra["seconds"] < TIMEOUT + SLACK


@pytest.mark.parametrize("kind", KINDS)
def test_compute_mid_epoch_on_one_rank(pool: DistPool, kind: str) -> None:
    """Rank 0's mid-epoch call pairs with rank 1's end-of-epoch call when rank 1 reaches it within the timeout (the
    ranks cannot tell this from uneven shards: the accounting shows rank 0's rows), or raises; rank 0's own
    end-of-epoch call then raises; every later epoch is exact on every rank.
    """
    world = 2
    outcomes = pool.values(case_mid_epoch, world, kind, pg_timeout=60)
    mid, end0 = outcomes[0][0], outcomes[0][1]
    end1 = outcomes[1][0]
    if "value" in mid:  # paired: the value of the data each rank held, and the accounting says which
        assert "value" in end1
        _exact(mid, [(0, 0, 0), (0, 0, 1), (0, 1, 1)], (kind, "mid"))
        _exact(end1, [(0, 0, 0), (0, 0, 1), (0, 1, 1)], (kind, "end1"))
        if kind == "varlen":  # the accounting: rank 0 gave its first batch only (6 rows), rank 1 both (7 + 10)
            assert mid["seen"] == end1["seen"] == [6, 17]
    else:
        assert "error" in end1
    assert "value" not in end0, end0  # rank 0's second sync of the epoch: the others had moved on
    assert end0["seconds"] < TIMEOUT + SLACK
    for epoch in (1, 2):
        for rank in range(world):
            record = outcomes[rank][epoch + (1 if rank == 0 else 0)]
            _exact(record, [(epoch, p, r) for r in range(world) for p in (0, 1)], (kind, rank, epoch))


@pytest.mark.parametrize("kind", KINDS)
def test_reinit_on_the_same_store_never_meets_old_keys(pool: DistPool, kind: str) -> None:
    world, rounds = 2, 3
    outcomes = pool.values(case_reinit_same_store, world, kind, rounds, pg_timeout=60)
    _check_rounds(outcomes, [10 * r for r in range(rounds)], kind)


def test_two_jobs_on_one_store_never_collide(pool: DistPool) -> None:
    outcomes = pool.values(case_two_jobs_on_one_store, 2, "varlen", pg_timeout=60)
    _check_rounds(outcomes, [20, 30], "varlen")


def _check_rounds(outcomes: list[Any], epochs: list[int], kind: str) -> None:
    world = len(outcomes)
    for i, epoch in enumerate(epochs):
        alone = outcomes[0][2 * i]
        assert alone.get("missing") == [1], (kind, i, alone)  # in the check-in, never after it
        assert "never arrived" in alone["error"]
        for rank in range(world):
            _exact(outcomes[rank][2 * i + 1], [(epoch, 1, r) for r in range(world)], (kind, rank, i))


# ----------------------------------------------------------------------------- two metrics


def case_two_metrics(rank: int, world: int, fault: str) -> list[dict[str, Any]]:
    """Metrics ``a`` and ``b`` computed in that order each epoch (reset between epochs); in epoch 1 one call misses
    (``late``: the last rank LATE seconds late for ``a``; ``extra``: rank 0 computes ``a`` twice without cache;
    ``mid``: rank 0 computes ``a`` after its first batch too). Records carry the metric's index.
    """
    metrics = [VarlenAUROC(sync_timeout=TIMEOUT, compute_with_cache=fault != "extra") for _ in range(2)]
    out: list[dict[str, Any]] = []
    for epoch in range(4):
        if epoch == 0:
            dist.barrier()
        for m, metric in enumerate(metrics):
            metric.reset()
            metric.update(*_batch(10 * epoch + m, 0, rank))
            if epoch == 1 and fault == "mid" and rank == 0 and m == 0:
                out.append({**_call("varlen", metric), "metric": m, "epoch": epoch, "fault": True})
            metric.update(*_batch(10 * epoch + m, 1, rank))
        for m, metric in enumerate(metrics):
            if epoch == 1 and m == 0 and fault == "late" and rank == world - 1:
                time.sleep(LATE)
            out.append({**_call("varlen", metric), "metric": m, "epoch": epoch})
            if epoch == 1 and m == 0 and fault == "extra" and rank == 0:
                out.append({**_call("varlen", metric), "metric": m, "epoch": epoch, "fault": True})
    return out


@pytest.mark.parametrize("fault", ["late", "extra", "mid"])
def test_one_missed_call_with_two_metrics_fails_alone(pool: DistPool, fault: str) -> None:
    """The missed call (and, when late, the calls that waited for it) fails; every other call of both metrics is
    exact, the other metric's call of the same epoch included: the rank that missed never waits for a sync that the
    others have left, so it is not late for the next one as well (a cascade that once failed every later sync).
    """
    world = 2
    outcomes = pool.values(case_two_metrics, world, fault, pg_timeout=60)
    for rank, records in enumerate(outcomes):
        for record in records:
            epoch, m = record["epoch"], record["metric"]
            if record.get("fault"):
                if fault == "extra":  # the extra call itself; a mid-epoch call may pair (see test above)
                    assert "value" not in record, record
                continue
            missed = fault in ("late", "mid") and epoch == 1 and m == 0
            if missed and (fault == "late" or rank == 0):
                assert "value" not in record, (rank, record)
                continue
            if missed:  # rank 1's end-of-epoch call of a: paired with rank 0's mid-epoch call, or an error
                continue
            _exact(record, [(10 * epoch + m, p, r) for r in range(world) for p in (0, 1)], (fault, rank, epoch, m))


def case_rank_local_metrics_first(rank: int, world: int, where: str) -> list[float]:
    """Before ``a`` and ``b`` (created on every rank), some ranks create a metric the others never create: rank 0 a
    ``sync_on_compute=False`` one (``local``), or ranks 1 and 2 one on their subgroup (``subgroup``).
    """
    sub = dist.new_group([1, 2]) if where == "subgroup" else None  # every rank takes part in new_group
    extra = None
    if where == "local" and rank == 0:
        extra = VarlenAUROC(sync_on_compute=False, sync_timeout=TIMEOUT)
    if where == "subgroup" and rank in (1, 2):
        extra = VarlenAUROC(process_group=sub, sync_timeout=TIMEOUT)
    a, b = VarlenAUROC(sync_timeout=TIMEOUT), VarlenAUROC(sync_timeout=TIMEOUT)
    values = []
    for m, metric in enumerate((a, b)):
        metric.update(*_batch(m, 0, rank))
        values.append(float(metric.compute()))
    if extra is not None:
        extra.update(*_batch(5, 0, rank))
        values.append(float(extra.compute()))
    return values


@pytest.mark.parametrize(("where", "world"), [("local", 2), ("subgroup", 3)])
def test_metrics_some_ranks_never_create_do_not_shift_the_others(pool: DistPool, where: str, world: int) -> None:
    outcomes = pool.values(case_rank_local_metrics_first, world, where, pg_timeout=60)
    for rank, values in enumerate(outcomes):
        for m in (0, 1):
            _exact({"value": values[m]}, [(m, 0, r) for r in range(world)], (where, rank, m))
        if where == "local" and rank == 0:
            _exact({"value": values[2]}, [(5, 0, 0)], (where, rank, "local"))
        if where == "subgroup" and rank:
            _exact({"value": values[2]}, [(5, 0, 1), (5, 0, 2)], (where, rank, "subgroup"))
