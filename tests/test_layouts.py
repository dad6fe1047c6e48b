"""Any tensor layout gives the value of its contiguous copy, on every sync path (issue 18, item 2), and nothing a
rank holds can break the process group (item 3): real gloo ranks, scikit-learn on the full data as reference.
"""

from __future__ import annotations

from typing import Any

import pytest
from _dist import DistPool
from _layouts import LAYOUTS, PATHS, TARGETS, check, run_case

pytestmark = pytest.mark.distributed


def case_layouts(rank: int, world: int, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [run_case(rank, case) for case in cases]


def _cases(kind: str, world: int, n: int) -> list[dict[str, Any]]:
    """One case per layout: rank r holds layout ``LAYOUTS[(i + r) % 7]``, every path, rotating dtypes and ids."""
    out = []
    for i in range(len(LAYOUTS)):
        out.append(
            {
                "kind": kind,
                "n": n,
                "seed": 10 * i + world,
                "world": world,
                "split": ("uneven", "first_empty", "even")[i % 3],
                "layouts": [LAYOUTS[(i + r) % len(LAYOUTS)] for r in range(world)],
                "target": TARGETS[i % len(TARGETS)],
                "scores": ("float32", "float64", "float16")[i % 3],
                "ids": i % 2 == 1,
                "batch": 1 + i % 5,
                "paths": list(PATHS),
            }
        )
    return out


@pytest.mark.parametrize(("kind", "world", "n"), [("binary", 2, 41), ("multiclass", 3, 37), ("multilabel", 3, 29)])
def test_every_layout_is_exact_on_every_path(pool: DistPool, kind: str, world: int, n: int) -> None:
    """Column slices, transposes, expanded rows, offsets, step slices and 0-d samples, mixed across the ranks, through
    gather to all, compute_on_rank, compute_sharded, the 16-bit mode, VarlenCollection, Varlen(metric) and
    gather_varlen: every rank gets scikit-learn's AUROC and AP of the full data.
    """
    cases = _cases(kind, world, n)
    results = pool.values(case_layouts, world, cases)
    for i, case in enumerate(cases):
        check(case, [r[i] for r in results])
