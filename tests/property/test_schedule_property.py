"""The sync invariant over at least 200 randomized schedules on spawned gloo ranks (``nox -s property``).

``VARLEN_SCHEDULES`` sets the number of schedules (default 200, split over W = 2 and W = 3), and a tenth as many
(at least 2 per W) in which some rank raises inside its update loop and more epochs follow; see
``tests/_schedule.py`` for what a schedule is and what is checked.
"""

from __future__ import annotations

import os

import pytest
from _dist import DistPool
from _schedule import check, make_schedules, run_schedule

pytestmark = [pytest.mark.property, pytest.mark.distributed]

COUNT = int(os.environ.get("VARLEN_SCHEDULES", "200"))
BATCH = 10  # schedules per exit: every batch ends with one schedule in which a rank exits


def case_schedule(rank: int, world: int, schedule: object) -> list:
    return run_schedule(rank, schedule)  # type: ignore[arg-type]


@pytest.mark.parametrize("world", [2, 3])
def test_invariant_over_random_schedules(pool: DistPool, world: int) -> None:
    count = -(-COUNT // 2)
    errors = 0
    schedules = [s for seed in range(-(-count // BATCH)) for s in make_schedules(BATCH, world, 100 + seed, 0.5)]
    for schedule in schedules[:count]:
        outcomes = pool.run(case_schedule, world, schedule, allow_failure=True, timeout=300)
        errors += check(schedule, outcomes)
    assert errors > 0  # the faults did provoke errors (the schedules are not all trivially clean)


@pytest.mark.parametrize("world", [2, 3])
def test_invariant_after_a_raise_inside_the_loop(pool: DistPool, world: int) -> None:
    """Every schedule has a ``loop`` fault: a rank raises while updating, skips its computes and runs ahead into the
    next epoch; the others' computes of that epoch fail, and the next clean epoch is exact on every rank.
    """
    count = max(2, -(-COUNT // 20))
    schedules = make_schedules(count, world, 300, 0.5, loop=True)
    assert {s.metrics for s in schedules} == {2, 3}
    errors = 0
    for schedule in schedules:
        outcomes = pool.run(case_schedule, world, schedule, allow_failure=True, timeout=300)
        errors += check(schedule, outcomes)
    assert errors > 0
