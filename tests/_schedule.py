"""Randomized schedules of metric calls over ranks and epochs, and the check of the sync invariant on their outcome.

A schedule has W ranks, E epochs and M metrics (``VarlenAUROC`` with identical arguments: the hardest case, since
nothing but the protocol tells them apart; or, ``wrapped``, torchmetrics' ``BinaryAUROC`` in ``Varlen``). Every
epoch starts with a barrier (as a training epoch's collectives would) and every rank resets and updates every metric
with its own data, then computes the metrics in order.
Faults, per rank and epoch: skip one compute, raise before one compute (the loop catches it and goes on to the
next epoch), compute one metric twice (with an update in between), compute the metrics in reverse order, or exit
(last epoch only).

The data of (metric m, epoch e, rank r) has a row count that encodes (m, e), so the ``sync_report`` of every
successful compute tells which data each rank contributed; the check recomputes scikit-learn on exactly that.
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

FAULTS = ("skip", "raise", "twice", "reverse")
SLACK = 5.0


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

    @property
    def name(self) -> str:
        """The metrics' identity base: the errors name it."""
        return "Varlen(BinaryAUROC)" if self.wrapped else "VarlenAUROC"


def make_schedules(count: int, world: int, seed: int, timeout: float = 1.0, wrapped: bool = False) -> list[Schedule]:
    """``count`` schedules for ``world`` ranks; at most one of them, the last, lets a rank exit."""
    rng = random.Random(seed * 1000 + world)
    out = []
    for i in range(count):
        epochs, metrics = rng.randint(4, 6), rng.randint(2, 3)
        faults: dict[tuple[int, int], tuple[str, int]] = {}
        for epoch in range(epochs):
            for rank in range(world):
                if rng.random() < 0.2:
                    faults[epoch, rank] = (rng.choice(FAULTS), rng.randrange(metrics))
        if i == count - 1 and count > 1:
            faults[epochs - 1, rng.randrange(1, world)] = ("exit", rng.randrange(metrics))
        out.append(Schedule(seed * 1000 + i, world, epochs, metrics, timeout, faults, wrapped))
    return out


def rows_for(metric: int, epoch: int, rank: int, world: int, metrics: int) -> int:
    """The row count that encodes (metric, epoch) for ``rank``."""
    return 2 + rank + world * (epoch * metrics + metric)


def decode(rows: int, rank: int, world: int, metrics: int) -> tuple[int, int]:
    """``(metric, epoch)`` from a rank's row count."""
    epoch, metric = divmod((rows - 2 - rank) // world, metrics)
    return metric, epoch


def data(metric: int, epoch: int, rank: int, world: int, metrics: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = rows_for(metric, epoch, rank, world, metrics)
    gen = torch.Generator().manual_seed(1 + metric * 7919 + epoch * 104729 + rank * 15485863)
    target = torch.randint(0, 2, (n,), generator=gen)
    target[0], target[1] = 0, 1
    preds = (torch.randint(0, 64, (n,), generator=gen) / 64 * 0.75 + 0.25 * target).float()  # within [0, 1]
    return preds, target


def run_schedule(rank: int, schedule: Schedule) -> list[dict[str, Any]]:
    """Rank side: play the schedule; one record per compute() call."""
    from torchmetrics.classification import BinaryAUROC

    from torchmetrics_varlen import MetricSyncError, Varlen, VarlenAUROC

    world, m_count = schedule.world, schedule.metrics
    if schedule.wrapped:
        metrics: list[Any] = [Varlen(BinaryAUROC(), sync_timeout=schedule.timeout) for _ in range(m_count)]
    else:
        metrics = [VarlenAUROC(sync_timeout=schedule.timeout) for _ in range(m_count)]
    records: list[dict[str, Any]] = []
    for epoch in range(schedule.epochs):
        dist.barrier()
        for m, metric in enumerate(metrics):
            metric.reset()
            metric.update(*data(m, epoch, rank, world, m_count))
        kind, target_m = schedule.faults.get((epoch, rank), ("none", -1))
        order = list(range(m_count))[::-1] if kind == "reverse" else list(range(m_count))
        for m in order:
            if m == target_m and kind == "skip":
                continue
            if m == target_m and kind == "raise":
                break  # a user error before this compute; the loop catches it and moves on to the next epoch
            if m == target_m and kind == "exit":
                os._exit(0)
            for call in range(2 if m == target_m and kind == "twice" else 1):
                if call:
                    metrics[m].update(torch.zeros(0), torch.zeros(0, dtype=torch.long))  # new state: a new sync
                started = time.monotonic()
                record: dict[str, Any] = {"epoch": epoch, "metric": m, "rank": rank}
                try:
                    record["value"] = float(metrics[m].compute())
                    report = metrics[m].sync_report
                    record["seen"] = list(report.seen_per_rank) if report else None
                except MetricSyncError as err:
                    record["error"] = str(err)
                record["seconds"] = time.monotonic() - started
                records.append(record)
    return records


def check(schedule: Schedule, outcomes: list[Any]) -> int:
    """Assert the invariant on every rank's records; return the number of computes that raised."""
    world, m_count = schedule.world, schedule.metrics
    exits = {r for (_, r), (kind, _) in schedule.faults.items() if kind == "exit"}
    clean = {e for e in range(schedule.epochs) if not any((e, r) in schedule.faults for r in range(world))}
    errors = 0
    for rank, outcome in enumerate(outcomes):
        if rank in exits:
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
            assert all(m == rec["metric"] for m, _ in pairs), where  # never another metric's states
            if rec["epoch"] in clean:
                assert all(e == rec["epoch"] for _, e in pairs), where
            parts = [data(m, e, r, world, m_count) for r, (m, e) in enumerate(pairs)]
            preds = torch.cat([p for p, _ in parts]).double()
            target = torch.cat([t for _, t in parts])
            expected = f32(roc_auc_score(target.numpy(), preds.numpy()))
            assert abs(rec["value"] - expected) <= (1e-6 if schedule.wrapped else 1e-7), (where, expected)
    return errors
