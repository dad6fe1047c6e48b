"""The sync invariant over randomized schedules (a small sample; ``nox -s property`` runs 200 and more).

Faults per rank and epoch (a skipped compute, a raise, a double compute, another order, an exit): every compute
either returns scikit-learn's value on the samples of its sync or raises MetricSyncError naming the metric within
``sync_timeout`` + 5 s, and every epoch in which all ranks behave is exact on every rank.
"""

from __future__ import annotations

import pytest
from _dist import DistPool
from _schedule import check, make_schedules, run_schedule

pytestmark = pytest.mark.distributed


def case_schedules(rank: int, world: int, schedules: list) -> list:
    return [run_schedule(rank, s) for s in schedules]


@pytest.mark.parametrize(("world", "wrapped"), [(2, False), (3, False), (2, True)])
def test_random_schedules_keep_the_invariant(pool: DistPool, world: int, wrapped: bool) -> None:
    """``wrapped``: torchmetrics' BinaryAUROC in Varlen, under the same faults."""
    schedules = make_schedules(3, world, seed=7, wrapped=wrapped)
    for schedule in schedules:
        # One case per schedule: a rank that exits ends its case, and the pool replaces it for the next one.
        outcomes = pool.run(case_schedules, world, [schedule], allow_failure=True, timeout=300)
        per_rank = [o if o.status != "ok" else type(o)(o.rank, o.status, o.value[0], o.error) for o in outcomes]
        check(schedule, per_rank)
