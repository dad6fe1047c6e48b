"""Any tensor layout gives the value of its contiguous copy, on every sync path (issue 18, item 2), and nothing a
rank holds can break the process group (item 3): real gloo ranks, scikit-learn on the full data as reference.
"""

from __future__ import annotations

import datetime
import warnings
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from _dist import DistPool
from _layouts import LAYOUTS, PATHS, TARGETS, check, run_case
from scipy.stats import spearmanr
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import Tensor
from torchmetrics import Metric, SpearmanCorrCoef
from torchmetrics.utilities.data import dim_zero_cat

from torchmetrics_varlen import (
    MetricSyncError,
    Varlen,
    VarlenAUROC,
    VarlenAveragePrecision,
    VarlenCollection,
    gather_varlen,
)

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


# ----------------------------------------------------------------------------- one rank's input, then clean epochs


class RawCat(Metric):
    """Keeps every batch as it comes (dtype and layout untouched); computes their sum."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("x", default=[], dist_reduce_fx="cat")

    def update(self, x: Tensor) -> None:
        """Keep ``x`` as it is."""
        self.x.append(x)

    def compute(self) -> Tensor:
        """The sum of every kept value."""
        return dim_zero_cat(self.x).double().sum()


def _epoch_data(epoch: int, rank: int, world: int) -> tuple[Tensor, Tensor]:
    """This rank's logits (2 columns) and labels of one epoch; the full data is every rank's, in rank order."""
    gen = torch.Generator().manual_seed(1000 * epoch + rank)
    n = 17 + 5 * rank + epoch
    target = torch.randint(0, 2, (n,), generator=gen)
    logits = torch.randn(n, 2, generator=gen, dtype=torch.float64).float() + target[:, None] * torch.tensor([0, 1.0])
    return logits, target


def _epoch_reference(epoch: int, world: int) -> tuple[float, float, float]:
    parts = [_epoch_data(epoch, r, world) for r in range(world)]
    probs = torch.cat([torch.softmax(lg, -1)[:, 1].contiguous() for lg, _ in parts]).double().numpy()
    target = torch.cat([t for _, t in parts]).numpy()
    rho = float(spearmanr(probs, target.astype(np.float64)).statistic)
    return float(roc_auc_score(target, probs)), float(average_precision_score(target, probs)), rho


def _barrier() -> bool:
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=20), wait_all_ranks=True)
    return True


def _clean_epoch(epoch: int, rank: int, world: int, strided: bool) -> dict[str, Any]:
    """One epoch on every path; ``strided``: this rank feeds ``softmax(logits)[:, 1]`` (others a contiguous copy)."""
    logits, target = _epoch_data(epoch, rank, world)
    probs = torch.softmax(logits, -1)[:, 1]
    if not strided:
        probs = probs.contiguous()
    auroc = VarlenAUROC(sync_timeout=20)
    on_rank = VarlenAveragePrecision(compute_on_rank=world - 1, sync_timeout=20)
    both = VarlenCollection({"auroc": VarlenAUROC(), "ap": VarlenAveragePrecision()}, sync_timeout=20)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*will save all targets and predictions", category=UserWarning)
        rho = Varlen(SpearmanCorrCoef(), sync_timeout=20)
    for start in range(0, probs.shape[0], 6):
        p, t = probs[start : start + 6], target[start : start + 6]
        auroc.update(p, t)
        on_rank.update(p, t)
        both.update(p, t)
        rho.update(p, t.float())
    values = both.compute()
    gathered = gather_varlen(probs, sync_timeout=20)
    return {
        "auroc": float(auroc.compute()),
        "ap": float(on_rank.compute()),
        "collection": [float(values["auroc"]), float(values["ap"])],
        "spearman": float(rho.compute()),
        "gathered": gathered.tolist(),
    }


def _check_epoch(epoch: int, world: int, out: dict[str, Any]) -> None:
    auroc, ap, rho = _epoch_reference(epoch, world)
    assert out["auroc"] == pytest.approx(auroc, abs=1e-6)
    assert out["ap"] == pytest.approx(ap, abs=1e-6)
    assert out["collection"] == pytest.approx([auroc, ap], abs=1e-6)
    assert out["spearman"] == pytest.approx(rho, abs=1e-6)
    parts = [_epoch_data(epoch, r, world) for r in range(world)]
    assert out["gathered"] == torch.cat([torch.softmax(lg, -1)[:, 1].contiguous() for lg, _ in parts]).tolist()


def case_strided_on_one_rank(rank: int, world: int) -> list[Any]:
    """Epoch 0: only rank 1 feeds the strided column; epochs 1-2: every rank contiguous; then a barrier."""
    epochs = [_clean_epoch(epoch, rank, world, strided=epoch == 0 and rank == 1) for epoch in range(3)]
    return [*epochs, _barrier()]


def test_a_strided_column_on_one_rank_is_exact_and_later_epochs_too(pool: DistPool) -> None:
    """The reported failure: ``softmax(logits)[:, 1]`` on one rank broke compute() and every later collective."""
    world = 3
    for out in pool.values(case_strided_on_one_rank, world):
        for epoch in range(3):
            _check_epoch(epoch, world, out[epoch])
        assert out[3] is True


def _expect_sync_error(fn: Any) -> str:
    try:
        fn()
    except MetricSyncError as err:
        return str(err)
    return "no error"


def case_unsendable_on_one_rank(rank: int, world: int) -> dict[str, Any]:
    """A state / tensor no wire can carry on one rank: every rank raises before data moves; then clean epochs."""
    out: dict[str, Any] = {}
    raw = Varlen(RawCat(), sync_timeout=20)
    raw.update((torch.arange(5) + rank).to(torch.uint16 if rank == 1 else torch.int32))
    out["uint16 state"] = _expect_sync_error(raw.compute)
    odd = torch.zeros(3, dtype=torch.float8_e4m3fn) if rank == 2 else torch.zeros(3)
    out["float8 gather"] = _expect_sync_error(lambda: gather_varlen(odd, sync_timeout=20))
    scalar = torch.tensor(1.0) if rank == 0 else torch.ones(2)
    out["0-d gather"] = _expect_sync_error(lambda: gather_varlen(scalar, sync_timeout=20))
    out["epochs"] = [_clean_epoch(epoch, rank, world, strided=rank == 0) for epoch in range(2)]
    raw.reset()
    raw.update(torch.arange(5, dtype=torch.int32) + rank)
    raw.update(torch.arange(12, dtype=torch.int16).reshape(4, 3)[:, 1])  # strided, narrower: promoted to int32
    out["raw"] = float(raw.compute())
    wide = (torch.arange(4, dtype=torch.float64) + 10 * rank) * (1 + 1j)
    out["complex"] = gather_varlen(wide[::2], sync_timeout=20).tolist()
    out["barrier"] = _barrier()
    return out


def test_an_unsendable_input_on_one_rank_raises_on_every_rank_and_the_group_recovers(pool: DistPool) -> None:
    """A uint16 state in Varlen(metric), a float8 or 0-d gather_varlen on one rank: a MetricSyncError on every rank
    that names the rank and the reason (not a timeout), and the next epochs are exact on every path.
    """
    world = 3
    outcomes = pool.values(case_unsendable_on_one_rank, world)
    for out in outcomes:
        assert "rank 1 could not send its states" in out["uint16 state"], out["uint16 state"]
        assert "torch.uint16" in out["uint16 state"]
        assert "rank 2 could not send" in out["float8 gather"]
        assert "float8_e4m3fn" in out["float8 gather"]
        assert "rank 0 could not send" in out["0-d gather"]
        assert "0-d" in out["0-d gather"]
        for epoch in range(2):
            _check_epoch(epoch, world, out["epochs"][epoch])
        expected_raw = sum(
            float((torch.arange(5) + r).sum()) + float(torch.arange(12).reshape(4, 3)[:, 1].sum()) for r in range(world)
        )
        assert out["raw"] == expected_raw
        expected = [complex(v) for r in range(world) for v in ((torch.arange(4.0) + 10 * r) * (1 + 1j))[::2].tolist()]
        assert out["complex"] == expected
        assert out["barrier"] is True
