"""Varlen on spawned gloo ranks: twelve torchmetrics metrics from six domains give their single-process value on the
de-duplicated data, for every way of sharding; every torchmetrics reduction syncs as torchmetrics reduces it.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from _data import rank_slice
from _dist import DistPool
from _sampler import evaluated_indices, sampler_indices
from _wrapped import CASES, N, call_args, columns, flat, reference
from torch import Tensor
from torchmetrics import Metric

from torchmetrics_varlen import Varlen

pytestmark = pytest.mark.distributed

# world, batch, shuffle, drop_last, shard ("sampler" or a contiguous split pattern), dedup, mixed float widths
CONFIGS = [
    (1, 5, False, False, "sampler", "size", False),
    (2, 4, False, False, "sampler", "size", False),
    (2, 3, True, False, "sampler", "ids", True),
    (3, 4, True, False, "sampler", "size", True),
    (3, 2, False, True, "sampler", "ids", False),
    (4, 3, True, True, "sampler", "size", False),
    (4, 2, True, False, "sampler", "ids", False),
    (3, 4, False, False, "first_empty", "none", False),
    (4, 5, False, False, "one_rank", "none", True),
    (4, 3, False, False, "uneven", "ids", False),
]


def _indices(rank: int, world: int, shard: str, shuffle: bool, drop_last: bool) -> list[int]:
    if shard == "sampler":
        return sampler_indices(N, world, rank, shuffle, drop_last)
    return list(range(N))[rank_slice(N, world, rank, shard)]


def case_catalogue(
    rank: int, world: int, batch: int, shuffle: bool, drop_last: bool, shard: str, dedup: str, mixed: bool
) -> dict[str, Any]:
    """Every metric of the catalogue, fed batch by batch (update, and forward on every other batch)."""
    data = columns()
    idx = _indices(rank, world, shard, shuffle, drop_last)
    dtype = torch.float64 if mixed and rank % 2 else torch.float32
    out: dict[str, Any] = {}
    for case in CASES:
        ids = dedup == "ids" and case.ids
        size = N if shard == "sampler" else None  # with ids: only the check for unseen samples
        metric = Varlen(case.build(), dataset_size=size, sync_timeout=30)
        for step, start in enumerate(range(0, len(idx), batch)):
            part = idx[start : start + batch]
            args, kwargs = call_args(case, data, part, dtype)
            if ids:
                kwargs["sample_ids"] = torch.tensor(part)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # batch values of tiny batches (nan correlations ...)
                if step % 2 and len(part) >= 3:
                    metric(*args, **kwargs)
                else:
                    metric.update(*args, **kwargs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = metric.compute()
        report = metric.sync_report
        assert report is not None
        out[case.name] = {
            "value": flat(value),
            "kept": report.kept,
            "warnings": [str(w.message) for w in caught if "never seen" in str(w.message)],
        }
    return out


@pytest.mark.parametrize(("world", "batch", "shuffle", "drop_last", "shard", "dedup", "mixed"), CONFIGS)
def test_every_metric_gives_its_single_process_value(
    pool: DistPool, world: int, batch: int, shuffle: bool, drop_last: bool, shard: str, dedup: str, mixed: bool
) -> None:
    """Padded, dropped, shuffled, uneven and empty shards, float32 next to float64: the value of the metric's own
    class on one process, on the samples the ranks evaluated, each once.
    """
    evaluated = evaluated_indices(N, world, shuffle, drop_last) if shard == "sampler" else list(range(N))
    expected = {case.name: reference(case, evaluated) for case in CASES}
    for got in pool.values(case_catalogue, world, batch, shuffle, drop_last, shard, dedup, mixed):
        for case in CASES:
            result = got[case.name]
            assert result["value"] == pytest.approx(expected[case.name], abs=case.abs_tol, nan_ok=True), case.name
            assert result["kept"] == len(evaluated), case.name
            missing = len(evaluated) < N  # the warning is raised on every rank
            assert bool(result["warnings"]) == missing, case.name


# ----------------------------------------------------------------------------- every reduction


def _sum_of_squares(stacked: Tensor) -> Tensor:
    return (stacked.double() ** 2).sum(0)


def _total_rows(elements: list[Tensor]) -> Tensor:
    return torch.tensor(sum(e.shape[0] for e in elements))


class AllReductions(Metric):
    """A metric with a state of every kind torchmetrics supports."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("summed", torch.zeros(2), dist_reduce_fx="sum")
        self.add_state("mean", torch.zeros(2), dist_reduce_fx="mean")
        self.add_state("maximum", torch.full((2,), -100.0), dist_reduce_fx="max")
        self.add_state("minimum", torch.full((2,), 100.0), dist_reduce_fx="min")
        self.add_state("stacked", torch.zeros(2), dist_reduce_fx=None)
        self.add_state("custom", torch.zeros(2), dist_reduce_fx=_sum_of_squares)
        self.add_state("rows", torch.zeros(0, 2), dist_reduce_fx="cat")
        self.add_state("list_cat", [], dist_reduce_fx="cat")
        self.add_state("list_none", [], dist_reduce_fx=None)
        self.add_state("list_custom", [], dist_reduce_fx=_total_rows)
        self.add_state("list_ragged", [], dist_reduce_fx=None)  # elements of different trailing shapes

    def update(self, x: Tensor) -> None:
        """Every state takes the batch its own way."""
        self.summed = self.summed + x.sum(0)
        self.mean = x.sum(0).float()
        self.maximum = torch.maximum(self.maximum, x.max(0).values)
        self.minimum = torch.minimum(self.minimum, x.min(0).values)
        self.stacked = self.stacked + x.sum(0)
        self.custom = self.custom + x.sum(0)
        self.rows = torch.cat([self.rows, x.float()])
        self.list_cat.append(x)
        self.list_none.append(x[0])
        self.list_custom.append(x)
        self.list_ragged.append(x.reshape(1, -1))

    def compute(self) -> dict[str, Any]:
        """The states themselves."""
        return {name: getattr(self, name) for name in self._defaults}


def _rank_data(rank: int) -> list[Tensor]:
    """Rank 1 holds nothing; rank 2 holds float16 batches (exact), the others float32."""
    if rank == 1:
        return []
    gen = torch.Generator().manual_seed(rank)
    dtype = torch.float16 if rank == 2 else torch.float32
    return [(torch.randint(-64, 64, (3 + b, 2), generator=gen) / 8).to(dtype) for b in range(2)]


def case_reductions(rank: int, world: int) -> dict[str, Any]:
    metric = Varlen(AllReductions(), sync_timeout=30)
    for x in _rank_data(rank):
        metric.update(x)
    value = metric.compute()
    return {
        k: [t.double().tolist() for t in v] if isinstance(v, list) else v.double().tolist() for k, v in value.items()
    }


def test_every_reduction_as_torchmetrics_reduces_it(pool: DistPool) -> None:
    """sum, mean, max, min, None and a callable see the ranks' stacked states (the empty rank's defaults included,
    as in torchmetrics); "cat" tensor and list states concatenate in rank order; None list states keep every rank's
    elements, whatever their shapes; float16 meets float32 as float32.
    """
    world = 3
    data = [_rank_data(r) for r in range(world)]
    per_rank = []
    for batches in data:
        x = torch.cat(batches).double() if batches else torch.zeros(0, 2, dtype=torch.float64)
        last = batches[-1].double().sum(0) if batches else torch.zeros(2, dtype=torch.float64)
        top = x.max(0).values if batches else torch.full((2,), -100.0, dtype=torch.float64)
        low = x.min(0).values if batches else torch.full((2,), 100.0, dtype=torch.float64)
        per_rank.append({"sum": x.sum(0), "last": last, "max": top, "min": low, "rows": x})
    stacked = torch.stack([r["sum"] for r in per_rank])
    all_rows = torch.cat([r["rows"] for r in per_rank])
    expected = {
        "summed": stacked.sum(0).tolist(),
        "mean": torch.stack([r["last"] for r in per_rank]).float().mean(0).double().tolist(),  # in the state dtype
        "maximum": torch.stack([r["max"] for r in per_rank]).max(0).values.tolist(),
        "minimum": torch.stack([r["min"] for r in per_rank]).min(0).values.tolist(),
        "stacked": stacked.tolist(),
        "custom": (stacked**2).sum(0).tolist(),
        "rows": all_rows.tolist(),
        "list_cat": all_rows.tolist(),
        "list_none": [b[0].double().tolist() for batches in data for b in batches],
        "list_custom": float(all_rows.shape[0]),
        "list_ragged": [b.double().reshape(1, -1).tolist() for batches in data for b in batches],
    }
    for got in pool.values(case_reductions, world):
        assert got == expected
