"""compute_sharded=True: a distributed sample sort; no rank holds every prediction, the value is the exact one."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from _data import rank_slice, scores_and_labels
from _dist import DistPool
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score

from torchmetrics_varlen import MetricSyncError, VarlenAUROC, VarlenAveragePrecision
from torchmetrics_varlen._core import sharded as _sharded

pytestmark = pytest.mark.distributed

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16}


def _spread(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores with few ties (float32-exact), correlated labels: logits, ranked raw (``normalization=None``)."""
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = (torch.randn(n, generator=gen) + target).float().double()
    return preds, target


def case_sharded(rank: int, world: int, n: int, seed: int, pattern: str, dtype: str, ties: bool) -> dict[str, Any]:
    preds, target = scores_and_labels(n, seed, ties=ties) if ties else _spread(n, seed)
    part = rank_slice(n, world, rank, pattern)
    local_sizes: list[int] = []
    original = _sharded.rank_sums

    def recording(col: Any, **kwargs: Any) -> Any:
        sums = original(col, **kwargs)
        local_sizes.append(sums.n_all)
        return sums

    _sharded.rank_sums = recording  # type: ignore[assignment]
    out: dict[str, Any] = {}
    try:
        for name, cls in (("auroc", VarlenAUROC), ("ap", VarlenAveragePrecision)):
            metric = cls(compute_sharded=True, sync_timeout=20, normalization=None)
            x, y = preds[part].to(DTYPES[dtype]), target[part]
            metric.update(x[: len(x) // 2], y[: len(y) // 2])
            metric.update(x[len(x) // 2 :], y[len(y) // 2 :])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # one class only on a rank is fine
                value = metric.compute()
            out[name] = value.item()
            out[name + "_cached"] = metric.compute().item() == value.item()
            report = metric.sync_report
            assert report is not None
            out[name + "_kept"] = report.kept
    finally:
        _sharded.rank_sums = original  # type: ignore[assignment]
    out["local_sizes"] = local_sizes
    return out


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize(
    ("pattern", "dtype", "ties"),
    [
        ("even", "float32", False),
        ("uneven", "float64", False),
        ("first_empty", "float16", True),
        ("one_rank", "float32", True),
        ("even", "float64", True),
    ],
)
def test_sharded_equals_sklearn_and_no_rank_holds_everything(
    pool: DistPool, world: int, pattern: str, dtype: str, ties: bool
) -> None:
    n, seed = 2001, 11
    preds, target = scores_and_labels(n, seed, ties=ties) if ties else _spread(n, seed)
    reference = preds.to(DTYPES[dtype]).double()
    outcomes = pool.values(case_sharded, world, n, seed, pattern, dtype, ties)
    expected_auroc = roc_auc_score(target, reference)
    expected_ap = average_precision_score(target, reference)
    for out in outcomes:
        assert out["auroc"] == pytest.approx(f32(expected_auroc), abs=1e-12)
        assert out["ap"] == pytest.approx(f32(expected_ap), abs=1e-12)
        assert out["auroc"] == outcomes[0]["auroc"]  # the same bits on every rank
        assert out["ap"] == outcomes[0]["ap"]
        assert out["auroc_cached"]
        assert out["ap_cached"]
        assert out["auroc_kept"] == out["ap_kept"] == n
    # Each rank evaluated one range of the scores: together every sample once.
    sizes = [out["local_sizes"] for out in outcomes]
    assert [sum(s[0] for s in sizes), sum(s[1] for s in sizes)] == [n, n]
    if world > 1 and not ties:
        # Splitters from samples of the scores: with few ties no rank gets much more than its share.
        assert max(s[0] for s in sizes) < 1.5 * n / world


def test_sharded_auroc_is_bitwise_the_single_process_value(pool: DistPool) -> None:
    """Consistency with this package's own single-process value (the integer area makes AUROC bit-exact)."""
    n, seed = 3000, 5
    preds, target = _spread(n, seed)
    single = VarlenAUROC(normalization=None)
    single.update(preds.float(), target)
    for world in (2, 3):
        for out in pool.values(case_sharded, world, n, seed, "uneven", "float32", False):
            assert out["auroc"] == single.compute().item()


def case_ids(rank: int, world: int, task: str) -> dict[str, Any]:
    n = 301
    gen = torch.Generator().manual_seed(3)
    if task == "multiclass":
        preds = torch.rand(n, 3, generator=gen)
        target = torch.randint(0, 3, (n,), generator=gen)
        kwargs: dict[str, Any] = {"task": "multiclass", "num_classes": 3}
    elif task == "multilabel":
        preds = torch.rand(n, 3, generator=gen)
        target = torch.randint(0, 2, (n, 3), generator=gen)
        kwargs = {"task": "multilabel", "num_labels": 3}
    else:
        preds, target = scores_and_labels(n, 3, ties=True)
        preds = preds.float()
        kwargs = {}
    # DistributedSampler order: rank r holds ids r, r + W, ... padded up to equal length with the first ids.
    per_rank = -(-n // world)
    ids = torch.arange(per_rank * world) % n
    mine = ids[rank::world]
    values: dict[str, Any] = {}
    averages = ["macro", "weighted", "none"] + (["micro"] if task == "multilabel" else [])
    for average in averages if task != "binary" else ["macro"]:
        for name, cls in (("auroc", VarlenAUROC), ("ap", VarlenAveragePrecision)):
            metric = cls(compute_sharded=True, sync_timeout=20, average=average, **kwargs)  # type: ignore[arg-type]
            metric.update(preds[mine], target[mine], sample_ids=mine)
            metric.update(preds[mine][:2], target[mine][:2], sample_ids=mine[:2])  # duplicates
            values[f"{name}-{average}"] = metric.compute().tolist()
            report = metric.sync_report
            assert report is not None
            values[f"{name}-{average}-kept"] = report.kept
    return values


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel"])
def test_sharded_with_sample_ids_drops_every_duplicate(pool: DistPool, world: int, task: str) -> None:
    from sklearn.preprocessing import label_binarize

    n = 301
    gen = torch.Generator().manual_seed(3)
    if task == "binary":
        preds, target = scores_and_labels(n, 3, ties=True)
        onehot, scores = target.numpy()[:, None], preds.float().double().numpy()[:, None]
    else:
        preds = torch.rand(n, 3, generator=gen)
        target = torch.randint(0, 3, (n,), generator=gen) if task == "multiclass" else None
        if target is None:
            target = torch.randint(0, 2, (n, 3), generator=gen)
            onehot = target.numpy()
        else:
            onehot = label_binarize(target.numpy(), classes=[0, 1, 2])
        scores = preds.double().numpy()
    per_class = {
        "auroc": [roc_auc_score(onehot[:, k], scores[:, k]) for k in range(onehot.shape[1])],
        "ap": [average_precision_score(onehot[:, k], scores[:, k]) for k in range(onehot.shape[1])],
    }
    support = onehot.sum(0)
    for out in pool.values(case_ids, world, task):
        for name, fn in (("auroc", roc_auc_score), ("ap", average_precision_score)):
            if task == "binary":
                assert out[f"{name}-macro"] == pytest.approx(f32(per_class[name][0]), abs=1e-12)
                assert out[f"{name}-macro-kept"] == n
                continue
            assert out[f"{name}-none"] == pytest.approx(f32(per_class[name]), abs=1e-12)
            macro = sum(per_class[name]) / 3
            weighted = sum(v * s for v, s in zip(per_class[name], support, strict=True)) / support.sum()
            assert out[f"{name}-macro"] == pytest.approx(f32(macro), abs=1e-12)
            assert out[f"{name}-weighted"] == pytest.approx(f32(weighted), abs=1e-12)
            if task == "multilabel":
                assert out[f"{name}-micro"] == pytest.approx(f32(fn(onehot.ravel(), scores.ravel())), abs=1e-12)
            assert out[f"{name}-macro-kept"] == n


def case_conflict(rank: int, world: int) -> str:
    metric = VarlenAUROC(compute_sharded=True, sync_timeout=20)
    ids = torch.arange(rank * 10, rank * 10 + 10)
    target = torch.tensor([0, 1] * 5)
    metric.update(torch.rand(10), target, sample_ids=ids)
    if rank == world - 1:
        metric.update(torch.rand(1), torch.tensor([1]), sample_ids=torch.tensor([0]))  # id 0 had target 0
    try:
        metric.compute()
    except ValueError as err:
        return str(err)
    return "no error"


def test_conflicting_ids_raise_on_every_rank(pool: DistPool) -> None:
    """Every rank names the id and its two targets, not only the rank its copies were routed to."""
    texts = pool.values(case_conflict, 3)
    named = texts[0].split(". ")[0]  # the targets in the order of the copies' scores
    assert named in (
        "Sample id 0 was seen twice with different targets (0 and 1)",
        "Sample id 0 was seen twice with different targets (1 and 0)",
    )
    for text in texts:
        assert text.startswith(named)
    assert "found by" not in texts[0]  # ids 0 land on rank 0 (0 % 3): its own error
    for text in texts[1:]:
        assert "(found by rank 0 in VarlenAUROC.compute())" in text


def case_missing_rank(rank: int, world: int) -> str:
    metric = VarlenAUROC(compute_sharded=True, sync_timeout=2)
    metric.update(torch.tensor([0.2, 0.7]), torch.tensor([0, 1]))
    if rank == 1:
        return "skipped compute"
    try:
        metric.compute()
    except MetricSyncError as err:
        return str(err)
    return "no error"


def test_a_rank_that_skips_compute_is_an_error_not_a_hang(pool: DistPool) -> None:
    texts = pool.values(case_missing_rank, 2, timeout=60)
    assert "rank 1" in texts[0]
    assert texts[1] == "skipped compute"


def case_local_failure(rank: int, world: int, failing: int, weighted: bool) -> list[str]:
    """One rank's own part of the sharded compute raises (its sort of its rows); every rank must leave that compute
    at once (the failing one with its error, the others quoting it), and the next epoch must be exact.
    """
    preds, target = _spread(600, seed=5)
    part = rank_slice(600, world, rank, "uneven")
    weight = torch.linspace(0.5, 2.0, 600)[part] if weighted else None
    column = _sharded._WeightedColumn if weighted else _sharded._KeyColumn
    original = column.__init__
    out = []
    for epoch in range(3):
        metric = VarlenAUROC(compute_sharded=True, sync_timeout=5)
        metric.update(preds[part].float(), target[part], sample_weight=weight)

        def broken(self: Any, *args: Any, **kwargs: Any) -> None:
            msg = f"injected on rank {rank}"
            raise RuntimeError(msg)

        if epoch == 1 and rank == failing:  # the failure is this rank's own: no peer can see it coming
            column.__init__ = broken  # type: ignore[method-assign]
        try:
            out.append(f"value {metric.compute().item():.6f}")
        except (RuntimeError, MetricSyncError) as err:
            out.append(f"{type(err).__name__}: {err}")
        finally:
            column.__init__ = original  # type: ignore[method-assign]
    return out


@pytest.mark.parametrize(("world", "failing", "weighted"), [(2, 0, False), (3, 2, False), (2, 1, True)])
def test_a_failure_in_one_ranks_part_of_a_sharded_compute_reaches_every_rank(
    pool: DistPool, world: int, failing: int, weighted: bool
) -> None:
    outcomes = pool.values(case_local_failure, world, failing, weighted, timeout=60)
    preds, target = _spread(600, seed=5)
    weight = torch.linspace(0.5, 2.0, 600) if weighted else None
    expected = f"value {f32(roc_auc_score(target, preds.float().double(), sample_weight=weight)):.6f}"
    for rank, out in enumerate(outcomes):
        assert out[0] == out[2] == expected, (rank, out)  # before and after: exact, the group still usable
        if rank == failing:
            assert out[1] == f"RuntimeError: injected on rank {failing}"
        else:
            assert out[1].startswith("MetricSyncError")
            assert f"failed on rank {failing}: RuntimeError: injected on rank {failing}" in out[1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"thresholds": 10}, "needs the exact mode"),
        ({"thresholds": torch.bfloat16}, "needs the exact mode"),
        ({"compute_on_rank": 0}, "cannot be combined with `compute_on_rank`"),
        ({"max_fpr": 0.5}, "does not support `max_fpr`"),
        ({"compute_sharded": 1}, "to be a bool"),
    ],
)
def test_bad_sharded_arguments(kwargs: dict[str, Any], match: str) -> None:
    kwargs.setdefault("compute_sharded", True)
    with pytest.raises(ValueError, match=match):
        VarlenAUROC(**kwargs)


def test_single_process_ignores_the_option() -> None:
    preds, target = _spread(500, 1)
    metric = VarlenAveragePrecision(compute_sharded=True)
    metric.update(preds, target)
    assert metric.compute().item() == pytest.approx(f32(average_precision_score(target, preds)), abs=1e-12)


def case_two_conflicts(rank: int, world: int) -> str:
    metric = VarlenAUROC(compute_sharded=True, sync_timeout=20)
    ids = torch.arange(rank * 10, rank * 10 + 10)
    metric.update(torch.rand(10), torch.tensor([0, 1] * 5), sample_ids=ids)
    if rank == world - 1:  # ids 0 (target 0) and 1 (target 1) again with the other targets: found on ranks 0 and 1
        metric.update(torch.rand(2), torch.tensor([1, 0]), sample_ids=torch.tensor([0, 1]))
    try:
        metric.compute()
    except ValueError as err:
        return str(err).split(". ")[0]
    return "no error"


def test_several_conflicting_ids_are_named_alike_on_every_rank(pool: DistPool) -> None:
    """Each rank that finds a conflict could name its own; every rank names the first rank's finding."""
    texts = pool.values(case_two_conflicts, 2)
    assert texts[0].startswith("Sample id 0 was seen twice with different targets")
    assert texts[1].startswith("Sample id 0 was seen twice with different targets")


def case_widths(rank: int, world: int) -> str:
    """Id 1 as a row of 3 scores on rank 0 and as a row of 2 on rank 1: both copies are routed to rank 1."""
    metric = VarlenAUROC(compute_sharded=True, sync_timeout=20)
    if rank == 0:
        metric.update(torch.tensor([[0.4, 0.6, 0.9]]), torch.tensor([[0, 1, 1]]), sample_ids=torch.tensor([1]))
    else:
        metric.update(torch.tensor([[0.1, 0.45]]), torch.tensor([[0, 1]]), sample_ids=torch.tensor([1]))
    try:
        metric.compute()
    except ValueError as err:
        return str(err)
    return "no error"


def test_copies_as_rows_of_different_widths_are_quoted_on_every_rank(pool: DistPool) -> None:
    texts = pool.values(case_widths, 2)
    for text in texts:
        assert "Sample id 1 was seen as samples of 2 and of 3 elements" in text
    assert "VarlenAUROC.compute(): rank 1 found: Sample id 1" in texts[0]
