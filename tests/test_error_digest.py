"""Error tables print a digest of long per-rank values: a mismatch of 300 thresholds is a short, readable error.

A rank's value in a table (a configuration field, a state's description, a rank's problem) prints as it is when
short; a long one prints as its first values, its size and a hash, so that two differing values visibly differ and
the whole message stays under 1,000 characters, with 4 ranks and several differing settings too.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from _data import scores_and_labels
from _dist import DistPool

from torchmetrics_varlen import MetricSyncError, VarlenAUROC, VarlenCollection, gather_varlen
from torchmetrics_varlen._dist.guard_errors import digest
from torchmetrics_varlen.classification import VarlenAveragePrecision

pytestmark = pytest.mark.distributed

TIMEOUT = 3.0
LIMIT = 1000  # characters of a whole message


def _thresholds(rank: int, kind: str) -> Any:
    if kind == "int":
        return 300 if rank == 0 else 200
    if kind == "tensor":  # 300 values each; rank 1's differ from rank 0's in one value only
        thr = torch.linspace(0, 1, 300)
        if rank == 1:
            thr[150] += 1e-3
        return thr
    return torch.linspace(0, 1, 300 + 100 * rank)  # "many": a different count on every rank


def case_thresholds_mismatch(rank: int, world: int, kind: str, collection: bool) -> dict[str, Any]:
    preds, target = scores_and_labels(40, 1)
    kwargs: dict[str, Any] = {"thresholds": _thresholds(rank, kind), "sync_timeout": TIMEOUT}
    if kind == "many":  # several differing settings at once
        kwargs["max_fpr"] = [None, 0.5, 0.25, 0.125][rank]
    metric: Any = VarlenAUROC(**kwargs)
    if collection:
        metric = VarlenCollection(
            {"auroc": metric, "ap": VarlenAveragePrecision(**{k: v for k, v in kwargs.items() if k != "max_fpr"})},
            sync_timeout=TIMEOUT,
        )
    lo, hi = rank * 40 // world, (rank + 1) * 40 // world
    metric.update(preds[lo:hi], target[lo:hi])
    try:
        metric.compute()
    except MetricSyncError as err:
        return {"error": str(err)}
    return {"value": "no error"}


@pytest.mark.parametrize("kind", ["int", "tensor"])
def test_thresholds_mismatch_is_short_and_tells_the_ranks_apart(pool: DistPool, kind: str) -> None:
    outcomes = pool.values(case_thresholds_mismatch, 2, kind, False)
    errors = [o["error"] for o in outcomes]  # raised on every rank
    assert errors[0] == errors[1]
    text = errors[0]
    assert len(text) < LIMIT, text
    assert "the ranks disagree on `thresholds` (config)" in text
    rows = {r: next(line for line in text.splitlines() if line.startswith(f"  rank {r}: ")) for r in (0, 1)}
    assert rows[0] != rows[1]
    assert "'thresholds': [0.0, " in rows[0]  # the first values as they are
    if kind == "int":
        assert "300 values" in rows[0]
        assert "200 values" in rows[1]
    else:
        assert "300 values" in rows[0]
        assert "300 values" in rows[1]
        hashes = [re.search(r"sha1 ([0-9a-f]{8})", rows[r]) for r in (0, 1)]
        assert hashes[0] is not None
        assert hashes[1] is not None
        assert hashes[0].group(1) != hashes[1].group(1)


def test_four_ranks_several_differing_settings_stay_short(pool: DistPool) -> None:
    for collection in (False, True):
        outcomes = pool.values(case_thresholds_mismatch, 4, "many", collection)
        text = outcomes[0]["error"]
        assert all(o["error"] == text for o in outcomes)
        assert len(text) < LIMIT, text
        assert "thresholds" in text
        assert "max_fpr" in text
        for r, count in enumerate((300, 400, 500, 600)):
            row = next(line for line in text.splitlines() if line.startswith(f"  rank {r}: "))
            assert f"{count} values" in row


def case_unsendable(rank: int, world: int, same: bool) -> str:
    dtypes = [torch.uint16, torch.uint32, torch.float8_e4m3fn, torch.uint64]
    x = torch.zeros(3, dtype=torch.uint16 if same else dtypes[rank])
    try:
        gather_varlen(x, sync_timeout=TIMEOUT)
    except MetricSyncError as err:
        return str(err)
    return "no error"


@pytest.mark.parametrize("same", [True, False])
def test_four_ranks_that_cannot_send_stay_short(pool: DistPool, same: bool) -> None:
    """Every rank's problem (about 200 characters each) in one message: equal problems share a line, and
    differing ones are cut so that the message stays under 1,000 characters, each rank's dtype still named.
    """
    texts = pool.values(case_unsendable, 4, same)
    assert all(t == texts[0] for t in texts)
    text = texts[0]
    assert len(text) < LIMIT, text
    assert "ranks 0, 1, 2 and 3 could not send their states" in text
    if same:
        assert "  ranks 0, 1, 2 and 3: state" in text
        assert "torch.uint16" in text
    else:
        for r, name in enumerate(("uint16", "uint32", "float8_e4m3fn", "uint64")):
            row = next(line for line in text.splitlines() if line.startswith(f"  rank {r}: "))
            assert name in row


# ----------------------------------------------------------------------------- the digest itself, one process


def test_short_values_print_as_they_are() -> None:
    for value in (None, 0.5, 10, "binary", [0.0, 0.5, 1.0], {"a": 1}, ["float32", [3]]):
        assert digest(value) == repr(value)


def test_long_values_print_first_values_count_range_and_hash() -> None:
    values = torch.linspace(0, 1, 300).tolist()
    text = digest(values)
    assert text.startswith("[0.0, 0.00334448, ")
    assert "300 values" in text
    assert "0.0 .. 1.0" in text
    assert len(text) <= 100
    other = list(values)
    other[150] += 1e-3
    assert digest(other) != text  # differ in the hash
    assert len(digest(values, limit=30)) <= 30 + 20  # the shortest form: count and hash
    assert "300 values" in digest(values, limit=30)


def test_long_text_and_nested_values_are_cut_with_their_size_and_hash() -> None:
    text = digest("x" * 5000)
    assert len(text) <= 100
    assert "5000 characters" in text
    nested = digest({"summed": {f"s{i}": ["float32", [i]] for i in range(100)}})
    assert len(nested) <= 100
    assert "sha1" in nested
