"""Randomized schedules of metric calls over ranks and epochs, and the check of the sync invariant on their outcome.

A schedule has W ranks, E epochs and M metrics (``VarlenAUROC`` with identical arguments: the hardest case, since
nothing but the protocol tells them apart; or, ``wrapped``, torchmetrics' ``BinaryAUROC`` in ``Varlen``). Every
epoch starts with a barrier (as a training epoch's collectives would; not after a ``loop`` fault, see below) and every
rank resets every metric, updates it with its own data, then computes the metrics in order.
Faults, per rank and epoch: skip one compute, raise before one compute (the loop catches it and goes on to the
next epoch), compute one metric twice (with an update in between: ``twice``; without, ``again``: with
``compute_with_cache=False`` that is an extra sync), compute the metrics in reverse order, arrive ``late`` (longer
than ``sync_timeout``) for one compute, compute one metric ``mid``-epoch (after the first part of its data), or feed
one metric a ``strided`` view (no error expected: that epoch must be exact), or raise inside the update ``loop``
(while updating one metric: the rank skips every compute of the epoch and goes on to the next epoch, which starts
without a barrier, so that it runs ahead into the next epoch's first compute while the others still compute this
epoch's; the only fault of its epoch, never in the last one). In the last epoch only: ``exit`` before
a compute, or die (``killed``) or hang (``stuck``) in the middle of a data exchange. Per schedule: epochs at whose
start every rank destroys the default group and creates it again on the same store (``reinits``).

The data of (metric m, epoch e, rank r) has a row count that encodes (m, e), and its first part (what a ``mid``
compute holds) another, so the ``sync_report`` of every successful compute tells which data each rank contributed;
the check recomputes scikit-learn on exactly that, and requires every rank's data to be of the call's own epoch.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from _float32 import f32
from sklearn.metrics import roc_auc_score

FAULTS = ("skip", "raise", "twice", "reverse", "late", "again", "mid", "strided", "loop")
LAST_EPOCH_FAULTS = ("exit", "killed", "stuck")
HARMLESS = ("strided",)  # faults after which the epoch must still be exact everywhere
SLACK = 5.0
LOOP_TIMEOUT = 2.0  # the least sync_timeout of a schedule with a loop fault: the ranks are not aligned by a barrier


@dataclass(frozen=True)
class Schedule:
    """One randomized schedule: sizes, the sync timeout and the faults ``{(epoch, rank): (kind, metric)}``."""

    seed: int
    world: int
    epochs: int
    metrics: int
    timeout: float
    faults: dict[tuple[int, int], tuple[str, int]] = field(default_factory=dict)
    wrapped: bool = False  # Varlen(BinaryAUROC()) instead of VarlenAUROC
    cache: bool = True  # compute_with_cache
    reinits: frozenset[int] = frozenset()  # epochs that start with a new default group on the same store

    @property
    def name(self) -> str:
        """The metrics' identity base: the errors name it."""
        return "Varlen(BinaryAUROC)" if self.wrapped else "VarlenAUROC"


def make_schedules(
    count: int, world: int, seed: int, timeout: float = 1.0, wrapped: bool = False, loop: bool = False
) -> list[Schedule]:
    """``count`` schedules for ``world`` ranks; at most one of them, the last, lets a rank exit, die or hang.

    ``loop``: every schedule has a ``loop`` fault (a rank raises inside its update loop, then more epochs follow), with
    two metrics and three in turn.
    """
    rng = random.Random(seed * 1000 + world + (500 if loop else 0))
    out = []
    for i in range(count):
        epochs, metrics = rng.randint(4, 6), rng.randint(2, 3)
        if loop:
            metrics = 2 + i % 2  # two and three metrics alike
        faults: dict[tuple[int, int], tuple[str, int]] = {}
        for epoch in range(epochs):
            for rank in range(world):
                if rng.random() < 0.2:
                    faults[epoch, rank] = (rng.choice(FAULTS), rng.randrange(metrics))
        if loop:
            faults[rng.randrange(epochs - 1), rng.randrange(world)] = ("loop", rng.randrange(metrics))
        _isolate_loops(faults, epochs, world)
        if i == count - 1 and count > 1:
            faults[epochs - 1, rng.randrange(1, world)] = (rng.choice(LAST_EPOCH_FAULTS), rng.randrange(metrics))
        reinits = frozenset(e for e in range(1, epochs) if rng.random() < 0.15)
        cache = rng.random() < 0.5
        looped = any(kind == "loop" for kind, _ in faults.values())
        limit = max(timeout, LOOP_TIMEOUT) if looped else timeout
        out.append(Schedule(seed * 1000 + i, world, epochs, metrics, limit, faults, wrapped, cache, reinits))
    return out


def _isolate_loops(faults: dict[tuple[int, int], tuple[str, int]], epochs: int, world: int) -> None:
    """A ``loop`` fault is the only fault of its epoch (the others' would make them drift from the rank that runs
    ahead by more than ``sync_timeout``), and none is in the last epoch (no epoch follows it): it becomes a ``raise``.
    """
    for epoch in range(epochs):
        ranks = [r for r in range(world) if faults.get((epoch, r), ("none",))[0] == "loop"]
        if not ranks:
            continue
        if epoch == epochs - 1:
            for r in ranks:
                faults[epoch, r] = ("raise", faults[epoch, r][1])
            continue
        for r in range(world):
            if r != ranks[0]:
                faults.pop((epoch, r), None)


def rows_for(metric: int, epoch: int, rank: int, world: int, metrics: int, first_part: bool = False) -> int:
    """The row count that encodes (metric, epoch) for ``rank``: of all its data, or of its first part."""
    return 2 + rank + world * (2 * (epoch * metrics + metric) + (0 if first_part else 1))


def decode(rows: int, rank: int, world: int, metrics: int) -> tuple[int, int, bool]:
    """``(metric, epoch, first part only)`` from a rank's row count."""
    index, whole = divmod((rows - 2 - rank) // world, 2)
    epoch, metric = divmod(index, metrics)
    return metric, epoch, not whole


def data(
    metric: int, epoch: int, rank: int, world: int, metrics: int, first_part: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    n = rows_for(metric, epoch, rank, world, metrics)
    gen = torch.Generator().manual_seed(1 + metric * 7919 + epoch * 104729 + rank * 15485863)
    target = torch.randint(0, 2, (n,), generator=gen)
    target[0], target[1] = 0, 1
    preds = (torch.randint(0, 64, (n,), generator=gen) / 64 * 0.75 + 0.25 * target).float()  # within [0, 1]
    if first_part:
        cut = rows_for(metric, epoch, rank, world, metrics, first_part=True)
        return preds[:cut], target[:cut]
    return preds, target


def _strided(preds: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same values as views with a stride: the positive column of ``[1 - p, p]``, every other label."""
    wide = torch.stack([1 - preds, preds], dim=1)[:, 1]
    labels = torch.stack([target, target], dim=1).reshape(-1)[::2]
    return wide, labels


def _fault_in_exchange(kind: str, timeout: float) -> None:
    """This rank dies (``killed``) or hangs (``stuck``) in its first data broadcast, after it checked in (undone by
    :func:`run_schedule` when the schedule ends without reaching one: the pool's worker plays the next schedule).
    """
    from torchmetrics_varlen._dist import collectives

    def broken(*args: Any, **kwargs: Any) -> Any:
        if kind == "stuck":
            time.sleep(3 * timeout + 2 * SLACK)  # alive, silent, until the others are done with the schedule
        os._exit(0)

    collectives.broadcast = broken  # type: ignore[assignment]


def _metrics(schedule: Schedule) -> list[Any]:
    from torchmetrics.classification import BinaryAUROC

    from torchmetrics_varlen import Varlen, VarlenAUROC

    cache, timeout = schedule.cache, schedule.timeout
    if schedule.wrapped:
        return [Varlen(BinaryAUROC(compute_with_cache=cache), sync_timeout=timeout) for _ in range(schedule.metrics)]
    return [VarlenAUROC(sync_timeout=timeout, compute_with_cache=cache) for _ in range(schedule.metrics)]


def _call(metric: Any, m: int, epoch: int, rank: int) -> dict[str, Any]:
    """One compute(): its value and the rows each rank gave (``seen``), or its error; and how long it took."""
    from torchmetrics_varlen import MetricSyncError

    started = time.monotonic()
    record: dict[str, Any] = {"epoch": epoch, "metric": m, "rank": rank}
    try:
        record["value"] = float(metric.compute())
        report = metric.sync_report
        record["seen"] = list(report.seen_per_rank) if report else None
    except MetricSyncError as err:
        record["error"] = str(err)
    record["seconds"] = time.monotonic() - started
    return record


class LoopError(RuntimeError):
    """The error a ``loop`` fault raises inside the update loop (the user's ``except`` goes on to the next epoch)."""


def _updates(schedule: Schedule, metrics: list[Any], epoch: int, rank: int, records: list[dict[str, Any]]) -> None:
    """Reset every metric, then update each with this rank's data of the epoch (``mid``: compute between its two
    parts; ``loop``: raise :class:`LoopError` after its first part).
    """
    world, m_count = schedule.world, schedule.metrics
    kind, target_m = schedule.faults.get((epoch, rank), ("none", -1))
    for metric in metrics:
        metric.reset()
    for m, metric in enumerate(metrics):
        preds, target = data(m, epoch, rank, world, m_count)
        if m == target_m and kind == "loop":
            cut = rows_for(m, epoch, rank, world, m_count, first_part=True)
            metric.update(preds[:cut], target[:cut])
            raise LoopError
        if m == target_m and kind == "mid":
            cut = rows_for(m, epoch, rank, world, m_count, first_part=True)
            metric.update(preds[:cut], target[:cut])
            records.append(_call(metric, m, epoch, rank))  # mid-epoch, before the rest of this rank's data
            metric.update(preds[cut:], target[cut:])
        elif m == target_m and kind == "strided":
            metric.update(*_strided(preds, target))
        else:
            metric.update(preds, target)


def run_schedule(rank: int, schedule: Schedule) -> list[dict[str, Any]]:
    """Rank side: play the schedule; one record per compute() call."""
    from torchmetrics_varlen._dist import collectives

    broadcast = collectives.broadcast
    try:
        return _play(rank, schedule)
    finally:
        collectives.broadcast = broadcast  # type: ignore[assignment]


def _start_epoch(rank: int, schedule: Schedule, epoch: int) -> None:
    """A new default group (``reinits``), then a barrier, unless a rank raised in its loop in the previous epoch."""
    from _dist import harness_store, reinit_default_group

    if epoch in schedule.reinits:
        reinit_default_group(harness_store(), rank, schedule.world, f"schedule{schedule.seed}/{epoch}")
    if all(schedule.faults.get((epoch - 1, r), ("none",))[0] != "loop" for r in range(schedule.world)):
        dist.barrier()


def _play(rank: int, schedule: Schedule) -> list[dict[str, Any]]:
    metrics = _metrics(schedule)
    records: list[dict[str, Any]] = []
    for epoch in range(schedule.epochs):
        _start_epoch(rank, schedule, epoch)
        try:
            _updates(schedule, metrics, epoch, rank, records)
        except LoopError:
            continue  # the user's except: no compute in this epoch, on to the next one (whose reset() comes first)
        kind, target_m = schedule.faults.get((epoch, rank), ("none", -1))
        order = list(range(schedule.metrics))[::-1] if kind == "reverse" else list(range(schedule.metrics))
        for m in order:
            fault = kind if m == target_m else "none"
            if fault == "skip":
                continue
            if fault == "raise":
                break  # a user error before this compute; the loop catches it and moves on to the next epoch
            if fault == "exit":
                os._exit(0)
            if fault in ("killed", "stuck"):
                _fault_in_exchange(fault, schedule.timeout)
            if fault == "late":
                time.sleep(schedule.timeout + 0.3)  # the others gave up on this compute before it arrives
            records.append(_call(metrics[m], m, epoch, rank))
            if fault == "twice":
                metrics[m].update(torch.zeros(0), torch.zeros(0, dtype=torch.long))  # new state: a new sync
            if fault in ("twice", "again"):
                records.append(_call(metrics[m], m, epoch, rank))
    return records


def check(schedule: Schedule, outcomes: list[Any]) -> int:
    """Assert the invariant on every rank's records; return the number of computes that raised."""
    world, m_count = schedule.world, schedule.metrics
    exits = {r for (_, r), (kind, _) in schedule.faults.items() if kind == "exit"}
    # A rank that dies or hangs in a data exchange does so only if one of its syncs got that far (another order of
    # computes on the other ranks can end them all at the check-in): otherwise its records are checked like any.
    faulty = {r for (_, r), (kind, _) in schedule.faults.items() if kind in LAST_EPOCH_FAULTS}
    clean = {
        e
        for e in range(schedule.epochs)
        if all(schedule.faults.get((e, r), ("none",))[0] in ("none", *HARMLESS) for r in range(world))
    }
    errors = 0
    for rank, outcome in enumerate(outcomes):
        if rank in exits or (rank in faulty and outcome.status == "died"):
            assert outcome.status == "died", (schedule, rank, outcome.error)
            continue
        assert outcome.status == "ok", (schedule, rank, outcome.error)
        for rec in outcome.value:
            where = (schedule, rec)
            assert rec["seconds"] < schedule.timeout + SLACK, where
            if "error" in rec:
                errors += 1
                assert rec["epoch"] not in clean, where  # a clean epoch after any faults is exact everywhere
                assert f"'{schedule.name}#{rec['metric']}'" in rec["error"], where  # names the metric
                continue
            seen = rec["seen"]
            assert seen is not None, where
            assert len(seen) == world, where
            pairs = [decode(n, r, world, m_count) for r, n in enumerate(seen)]
            assert all(m == rec["metric"] for m, _, _ in pairs), where  # never another metric's states
            assert all(e == rec["epoch"] for _, e, _ in pairs), where  # never another moment's states
            if rec["epoch"] in clean:
                assert not any(first for _, _, first in pairs), where
            parts = [data(m, e, r, world, m_count, first) for r, (m, e, first) in enumerate(pairs)]
            preds = torch.cat([p for p, _ in parts]).double()
            target = torch.cat([t for _, t in parts])
            expected = f32(roc_auc_score(target.numpy(), preds.numpy()))
            assert abs(rec["value"] - expected) <= (1e-6 if schedule.wrapped else 1e-7), (where, expected)
    return errors
