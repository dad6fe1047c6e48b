"""Hypothesis: any tensor layout, on any sync path, at any world size, gives scikit-learn's value of the full data.

Each example draws a whole case in the test process (metric kind, data set, split over W = 1-3 ranks, each rank's
layout, target and score dtypes, sample ids or not, batch size, 1-3 sync paths) and runs it in one pool case; every
rank's AUROC and AP must equal scikit-learn's on the contiguous data (abs 1e-6), and ``gather_varlen`` must return
the contiguous rows. A small, derandomised run (10 examples) is part of the default suite; ``nox -s property`` (or
``pytest -m property tests/property``) runs 60 random ones. ``LAYOUT_EXAMPLES`` overrides the larger count.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from _dist import DistPool
from _layouts import KINDS, LAYOUTS, PATHS, SCORES, TARGETS, check, min_rows, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SPLITS = ("even", "uneven", "first_empty", "one_rank", "alternate_empty")


def case_layout(rank: int, world: int, case: dict[str, Any]) -> dict[str, Any]:
    return run_case(rank, case)


@st.composite
def layout_cases(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(KINDS))
    world = draw(st.integers(1, 3))
    return {
        "kind": kind,
        "n": draw(st.integers(min_rows(kind), 40)),
        "seed": draw(st.integers(0, 2**16)),
        "world": world,
        "split": draw(st.sampled_from(SPLITS)),
        "layouts": draw(st.lists(st.sampled_from(LAYOUTS), min_size=world, max_size=world)),
        "target": draw(st.sampled_from(TARGETS)),
        "scores": draw(st.sampled_from(SCORES)),
        "ids": draw(st.booleans()),
        "batch": draw(st.integers(1, 8)),
        "paths": draw(st.lists(st.sampled_from(PATHS), min_size=1, max_size=3, unique=True)),
    }


def _run(pool: DistPool, case: dict[str, Any]) -> None:
    check(case, pool.values(case_layout, case["world"], case))


_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}


@settings(max_examples=10, derandomize=True, **_COMMON)
@given(case=layout_cases())
def test_any_layout_on_any_path_small(pool: DistPool, case: dict[str, Any]) -> None:
    """The default suite's short run of the property below (the same examples every time)."""
    _run(pool, case)


@pytest.mark.property
@settings(max_examples=int(os.environ.get("LAYOUT_EXAMPLES", "60")), **_COMMON)
@given(case=layout_cases())
def test_any_layout_on_any_path(pool: DistPool, case: dict[str, Any]) -> None:
    """Any layout x path x W (1-3) x metric kind gives scikit-learn's AUROC and AP of the full, contiguous data."""
    _run(pool, case)
