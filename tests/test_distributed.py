"""Real multi-process syncs (gloo on 127.0.0.1): exact values on every rank for any split of the data."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _data import rank_slice, scores_and_labels
from _dist import DistPool, count_syncs
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score

from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision, gather_varlen

pytestmark = pytest.mark.distributed

METRICS = {"auroc": VarlenAUROC, "ap": VarlenAveragePrecision}


def _reference(name: str, preds: torch.Tensor, target: torch.Tensor, **kwargs: Any) -> float:
    if name == "auroc":
        return float(roc_auc_score(target.numpy(), preds.numpy(), **kwargs))
    return float(average_precision_score(target.numpy(), preds.numpy()))


# ----------------------------------------------------------------------------- rank-side functions (module level)


def case_split(
    rank: int, world: int, name: str, n: int, seed: int, pattern: str, batch: int, dtypes: list[str], kwargs: dict
) -> float:
    """Each rank updates its slice in batches of ``batch + rank`` (uneven update counts), in its own dtype."""
    preds, target = scores_and_labels(n, seed)
    part = rank_slice(n, world, rank, pattern)
    dtype = getattr(torch, dtypes[rank % len(dtypes)])
    metric = METRICS[name](sync_timeout=20, **kwargs)
    p, t = preds[part].to(dtype), target[part]
    step = batch + rank
    for start in range(0, p.numel(), step):
        metric.update(p[start : start + step], t[start : start + step])
    return float(metric.compute())


def case_2d(rank: int, world: int, name: str, seed: int) -> float:
    """Rank r sends 2-D batches of shape (3, r + 2): a different trailing shape on every rank."""
    preds, target = scores_and_labels(60, seed)
    start = sum(3 * (r + 2) for r in range(rank))
    width = rank + 2
    metric = METRICS[name](sync_timeout=20)
    metric.update(preds[start : start + 3 * width].view(3, width), target[start : start + 3 * width].view(3, width))
    return float(metric.compute())


def case_gather(rank: int, world: int, lengths: list[int], trailing: list[int], dtypes: list[str]) -> list[Any]:
    dtype = getattr(torch, dtypes[rank])
    x = torch.full((lengths[rank], *trailing), float(rank), dtype=torch.float64).to(dtype)
    if x.numel():
        x.view(lengths[rank], -1)[:, 0] = torch.arange(lengths[rank], dtype=dtype)
    out = gather_varlen(x, sync_timeout=20)
    return [str(out.dtype), list(out.shape), out.double().tolist()]


_COLLECTIVES = (
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_reduce",
    "broadcast",
    "barrier",
    "gather",
    "all_to_all",
)


def _count_collectives(fn: Any) -> int:
    """Run ``fn`` with every torch.distributed collective (and the package's own) counted; they still run."""
    return count_syncs(fn, _COLLECTIVES)[1]["collectives"]


def case_count(rank: int, world: int, n_states: int) -> dict[str, int]:
    from torchmetrics.classification import BinaryAUROC

    from torchmetrics_varlen._dist.exchange import SyncRequest, sync_states
    from torchmetrics_varlen._dist.group import GroupLayout

    preds, target = scores_and_labels(40, 0)
    part = slice(rank * 7, rank * 7 + 5 + rank)
    counts: dict[str, int] = {}
    for key, metric in {
        "ours_exact": VarlenAUROC(sync_timeout=20),
        "ours_binned": VarlenAUROC(thresholds=11, sync_timeout=20),
        "ours_16bit": VarlenAUROC(thresholds=torch.bfloat16, sync_timeout=20),
        "torchmetrics": BinaryAUROC(),
    }.items():
        metric.update(preds[part].float(), target[part])
        counts[key] = _count_collectives(metric.compute)
    states = {f"s{i}": [torch.arange(rank + i, dtype=torch.float32), torch.ones(2)] for i in range(n_states)}
    request = SyncRequest(GroupLayout.of(None), "states", {}, 20, "t", "")
    counts["states"] = _count_collectives(lambda: sync_states(request, states, {}, device=torch.device("cpu")))
    return counts


# ----------------------------------------------------------------------------- tests

SPLITS = [
    (1, "even"),
    (2, "even"),
    (2, "uneven"),
    (2, "first_empty"),
    (3, "uneven"),
    (3, "one_rank"),
    (3, "alternate_empty"),
    (4, "uneven"),
    (4, "first_empty"),
    (4, "one_rank"),
    (4, "alternate_empty"),
]


@pytest.mark.parametrize("name", ["auroc", "ap"])
@pytest.mark.parametrize(("world", "pattern"), SPLITS)
@pytest.mark.parametrize("n", [7, 101])
def test_split_equals_sklearn_on_union(pool: DistPool, name: str, world: int, pattern: str, n: int) -> None:
    """Uneven shards, uneven batch counts and empty ranks: every rank gets scikit-learn's value on all data."""
    preds, target = scores_and_labels(n, seed=n)
    expected = _reference(name, preds, target)
    got = pool.values(case_split, world, name, n, n, pattern, 3, ["float32"], {})
    assert got == pytest.approx(f32([expected] * world), abs=1e-12)


@pytest.mark.parametrize("name", ["auroc", "ap"])
@pytest.mark.parametrize(
    "dtypes", [["float32", "float64"], ["float16", "bfloat16"], ["bfloat16", "float32", "float16", "float64"]]
)
def test_mixed_float_dtypes_are_promoted(pool: DistPool, name: str, dtypes: list[str]) -> None:
    """float16 on one rank and bfloat16 / float32 / float64 on others: promoted, never reinterpreted."""
    world, n = len(dtypes), 90
    preds, target = scores_and_labels(n, seed=3)
    expected = _reference(name, preds, target)
    got = pool.values(case_split, world, name, n, 3, "uneven", 4, dtypes, {})
    assert got == pytest.approx(f32([expected] * world), abs=1e-12)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_max_fpr_across_ranks(pool: DistPool, world: int) -> None:
    """The partial AUC (McClish) is exact across ranks too."""
    preds, target = scores_and_labels(203, seed=5)
    expected = _reference("auroc", preds, target, max_fpr=0.3)
    got = pool.values(case_split, world, "auroc", 203, 5, "uneven", 5, ["float64"], {"max_fpr": 0.3})
    assert got == pytest.approx(f32([expected] * world), abs=1e-12)


@pytest.mark.parametrize("name", ["auroc", "ap"])
@pytest.mark.parametrize("world", [2, 4])
def test_binned_mode_across_ranks(pool: DistPool, name: str, world: int) -> None:
    """Binned mode sums confusion matrices: the value equals torchmetrics' binned value on all data."""
    from torchmetrics.functional.classification import binary_auroc, binary_average_precision

    preds, target = scores_and_labels(150, seed=8)
    ref = binary_auroc if name == "auroc" else binary_average_precision
    expected = float(ref(preds.float(), target, thresholds=17))
    got = pool.values(case_split, world, name, 150, 8, "first_empty", 6, ["float32"], {"thresholds": 17})
    assert got == pytest.approx([expected] * world, abs=1e-6)


@pytest.mark.parametrize("name", ["auroc", "ap"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_2d_batches_with_different_shapes_per_rank(pool: DistPool, name: str, world: int) -> None:
    """Any input shape is flattened, so ranks may send differently shaped batches."""
    total = sum(3 * (r + 2) for r in range(world))
    preds, target = scores_and_labels(60, seed=11)
    expected = _reference(name, preds[:total], target[:total])
    assert pool.values(case_2d, world, name, 11) == pytest.approx(f32([expected] * world), abs=1e-12)


@pytest.mark.parametrize("trailing", [[], [2], [2, 3]])
def test_gather_varlen_lengths_0_5_0_3(pool: DistPool, trailing: list[int]) -> None:
    """gather_varlen concatenates in rank order with empty ranks and trailing dimensions, on 4 ranks."""
    lengths = [0, 5, 0, 3]
    values = pool.values(case_gather, 4, lengths, trailing, ["float32"] * 4)
    expected = torch.cat([torch.full((m, *trailing), float(r), dtype=torch.float64) for r, m in enumerate(lengths)])
    expected.view(8, -1)[:, 0] = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2], dtype=torch.float64)
    for dtype, shape, data in values:
        assert dtype == "torch.float32"
        assert shape == [8, *trailing]
        assert torch.equal(torch.tensor(data, dtype=torch.float64), expected)


def test_gather_varlen_promotes_half_precision(pool: DistPool) -> None:
    """float16 on some ranks and bfloat16 on others gather as float32 with the values intact."""
    values = pool.values(case_gather, 4, [2, 0, 3, 1], [], ["float16", "bfloat16", "bfloat16", "float16"])
    for dtype, shape, data in values:
        assert (dtype, shape) == ("torch.float32", [6])
        assert data == [0.0, 1.0, 0.0, 1.0, 2.0, 0.0]


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_per_sync_do_not_depend_on_the_number_of_states(pool: DistPool, world: int) -> None:
    """On gloo a sync is one fixed-size metadata all-gather, then one broadcast per rank (every rank has rows here),
    for 1 or 6 states alike; the summed modes are the metadata all-gather plus one all-reduce. torchmetrics' own sync
    needs several collectives per state.
    """
    for n_states in (1, 6):
        counts = pool.values(case_count, world, n_states)
        for c in counts:
            assert c["ours_exact"] == 1 + world
            assert c["ours_binned"] == 1 + 1
            assert c["ours_16bit"] == 1 + 1  # one fixed-size all-reduce of the histograms
            assert c["states"] == 1 + world
            assert c["torchmetrics"] >= 4  # two list states, each at least a shape gather plus a data gather
