"""Dedup and accounting in one process (multi-rank: test_dedup_distributed; any torchmetrics metric: test_wrapper)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from _data import scores_and_labels
from _dedup_contract import contract_keep
from _float32 import f32
from sklearn.metrics import roc_auc_score

from torchmetrics_varlen import SyncReport, VarlenAUROC, VarlenAveragePrecision, VarlenCollection


def test_ids_count_once_and_report_duplicates() -> None:
    preds, target = scores_and_labels(20, 1)
    metric = VarlenAUROC()
    metric.update(preds[:12], target[:12], sample_ids=torch.arange(12))
    metric.update(preds[8:], target[8:], sample_ids=torch.arange(8, 20))  # ids 8..11 again
    assert float(metric.compute()) == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-12)
    assert metric.sync_report == SyncReport(
        world_size=1, seen_per_rank=(24,), received=24, duplicates_dropped=4, kept=20, missing=None
    )


def test_row_ids_for_2d_inputs_and_ignore_index() -> None:
    """One id per row of a (rows, tokens) batch; a repeated row is dropped whole, ignored tokens stay ignored."""
    preds, target = scores_and_labels(40, 2)
    preds, target = preds.view(8, 5), target.view(8, 5).clone()
    target[:, 4] = -100
    metric = VarlenAveragePrecision(ignore_index=-100)
    metric.update(preds[:6], target[:6], sample_ids=torch.arange(6))
    metric.update(preds[4:], target[4:], sample_ids=torch.arange(4, 8))
    from sklearn.metrics import average_precision_score

    keep = target != -100
    assert float(metric.compute()) == pytest.approx(f32(average_precision_score(target[keep], preds[keep])), abs=1e-12)
    assert metric.sync_report is not None
    assert metric.sync_report.kept == 8
    assert metric.sync_report.duplicates_dropped == 2


def test_dataset_size_single_process_reports_missing_and_warns() -> None:
    preds, target = scores_and_labels(30, 3)
    metric = VarlenAUROC(dataset_size=35)
    metric.update(preds, target)
    with pytest.warns(UserWarning, match="dataset_size=35 but only 30 samples were evaluated: 5 were never seen"):
        metric.compute()
    assert metric.sync_report is not None
    assert metric.sync_report.missing == 5


def test_dataset_size_padding_in_one_process_is_an_error_naming_len_loader() -> None:
    """One process never pads (a DistributedSampler on one rank adds no row): 14 rows fed to ``dataset_size=10``
    are ``len(loader)`` passed for ``len(dataset)`` or a second pass, and compute() raises rather than silently
    dropping 4 real rows; after reset() the next epoch is exact. Dropping real padding: test_dedup_distributed.
    """
    preds, target = scores_and_labels(14, 4)
    metric = VarlenAUROC(dataset_size=10)
    metric.update(preds[:7], target[:7])
    metric.update(preds[7:], target[7:])
    with pytest.raises(ValueError, match=r"4 rows were dropped as sampler padding.*len\(loader\)"):
        metric.compute()
    metric.reset()
    metric.update(preds[:7], target[:7])
    metric.update(preds[7:10], target[7:10])
    assert float(metric.compute()) == pytest.approx(f32(roc_auc_score(target[:10], preds[:10])), abs=1e-12)
    assert metric.sync_report == SyncReport(
        world_size=1, seen_per_rank=(10,), received=10, duplicates_dropped=0, kept=10, missing=0
    )


def test_dataset_size_padding_in_one_process_is_an_error_at_a_collections_update() -> None:
    """A collection's members may be computed one by one (``log_dict``): it raises at the update that cuts a row."""
    preds, target = scores_and_labels(14, 4)
    collection = VarlenCollection({"auroc": VarlenAUROC()}, dataset_size=10)
    collection.update(preds[:7], target[:7])
    with pytest.raises(
        ValueError, match=r"VarlenCollection\(dataset_size=10\): 4 rows .* sampler padding.*len\(loader\)"
    ):
        collection.update(preds[7:], target[7:])
    collection.reset()
    collection.update(preds[:7], target[:7])
    collection.update(preds[7:10], target[7:10])
    value = collection.compute()["auroc"]
    assert float(value) == pytest.approx(f32(roc_auc_score(target[:10], preds[:10])), abs=1e-12)


def test_forward_keeps_sampler_positions() -> None:
    """forward() resets internally for the batch value; positions must still continue from the global state.

    One process never pads (88ed689), so the positions show in the padding count: 7 + 7 rows for ``dataset_size=10``
    cut exactly the last 4 (a forward that restarted at 0 would cut none and raise nothing); 7 + 3 rows are exact.
    """
    preds, target = scores_and_labels(14, 5)
    metric = VarlenAUROC(dataset_size=10)
    metric(preds[:7], target[:7])
    assert float(metric(preds[7:], target[7:])) == pytest.approx(f32(roc_auc_score(target[7:10], preds[7:10])))
    with pytest.raises(ValueError, match="4 rows were dropped as sampler padding"):
        metric.compute()
    metric.reset()
    metric(preds[:7], target[:7])
    metric(preds[7:10], target[7:10])
    assert float(metric.compute()) == pytest.approx(f32(roc_auc_score(target[:10], preds[:10])), abs=1e-12)
    metric.reset()
    metric.update(preds[:10], target[:10])
    assert metric.sync_report is not None  # from the earlier compute
    assert float(metric.compute()) == pytest.approx(f32(roc_auc_score(target[:10], preds[:10])), abs=1e-12)


def test_mixing_updates_with_and_without_ids_raises() -> None:
    preds, target = scores_and_labels(10, 6)
    metric = VarlenAUROC()
    metric.update(preds[:5], target[:5], sample_ids=torch.arange(5))
    with pytest.raises(ValueError, match="this update has no `sample_ids` but earlier updates had"):
        metric.update(preds[5:], target[5:])
    other = VarlenAUROC()
    other.update(preds[:5], target[:5])
    with pytest.raises(ValueError, match="this update has `sample_ids` but earlier updates had none"):
        other.update(preds[5:], target[5:], sample_ids=torch.arange(5, 10))
    assert len(other.preds) == 1


def test_conflicting_targets_raise_in_compute() -> None:
    metric = VarlenAUROC()
    metric.update(torch.tensor([0.3, 0.6]), torch.tensor([0, 1]), sample_ids=torch.tensor([7, 8]))
    metric.update(torch.tensor([0.3]), torch.tensor([1]), sample_ids=torch.tensor([7]))
    with pytest.raises(ValueError, match="Sample id 7 was seen twice with different targets \\(0 and 1\\)"):
        metric.compute()


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        (
            torch.tensor([0.0, 1.0]),
            "`sample_ids` to be an integer tensor, one value per sample, but got dtype torch.float32",
        ),
        (torch.tensor([0, -1]), "`sample_ids` to be >= 0, but found -1"),
        (
            torch.tensor([0, 1, 2]),
            r"`sample_ids` to have shape \(2,\), one value per sample \(row\), but got \(3,\)\.$",
        ),
        (torch.tensor([True, False]), "integer tensor"),
    ],
)
def test_bad_ids_raise_and_leave_state_unchanged(ids: torch.Tensor, match: str) -> None:
    metric = VarlenAUROC()
    with pytest.raises(ValueError, match=match):
        metric.update(torch.tensor([0.2, 0.4]), torch.tensor([0, 1]), sample_ids=ids)
    assert metric.preds == []


@pytest.mark.parametrize(
    ("kwargs", "preds", "ids", "match"),
    [
        # a multilabel row is one sample: one id per row, and the message names one shape, not the same one twice
        (
            {"task": "multilabel", "num_labels": 3},
            torch.rand(2, 3),
            torch.arange(6).reshape(2, 3),
            r"`sample_ids` to have shape \(2,\), one value per sample \(row\), but got \(2, 3\)\.$",
        ),
        # 2-D binary scores: one id per element or one per row
        (
            {},
            torch.rand(2, 3),
            torch.arange(3),
            r"`sample_ids` to have the sample shape \(2, 3\) or one value per row \(2,\), but got \(3,\)\.$",
        ),
    ],
)
def test_ids_of_a_wrong_shape_name_the_shapes_they_may_have(
    kwargs: dict[str, Any], preds: torch.Tensor, ids: torch.Tensor, match: str
) -> None:
    metric = VarlenAUROC(**kwargs)
    target = torch.randint(0, 2, preds.shape)
    with pytest.raises(ValueError, match=match):
        metric.update(preds, target, sample_ids=ids)
    assert metric.preds == []
    assert metric.ids == []
    assert metric.update_count == 0


def test_ids_need_exact_mode() -> None:
    metric = VarlenAUROC(thresholds=10)
    with pytest.raises(ValueError, match="`sample_ids` need the exact mode"):
        metric.update(torch.tensor([0.2]), torch.tensor([1]), sample_ids=torch.tensor([0]))


def test_binned_mode_with_dataset_size() -> None:
    """One process never pads (88ed689): 10 rows for ``dataset_size=10`` equal torchmetrics' binned value, and 14
    raise. Padding dropped in the histogram mode on real ranks: test_dedup_distributed
    (test_histogram_mode_with_sampler_padding).
    """
    from torchmetrics.functional.classification import binary_auroc

    preds, target = scores_and_labels(14, 7)
    metric = VarlenAUROC(thresholds=9, dataset_size=10)
    metric.update(preds.float(), target)
    with pytest.raises(ValueError, match="4 rows were dropped as sampler padding"):
        metric.compute()
    metric.reset()
    metric.update(preds[:6].float(), target[:6])
    metric.update(preds[6:10].float(), target[6:10])
    assert float(metric.compute()) == pytest.approx(
        float(binary_auroc(preds[:10].float(), target[:10], thresholds=9)), abs=1e-6
    )
    assert metric.sync_report is not None
    assert (metric.sync_report.kept, metric.sync_report.missing) == (10, 0)


@pytest.mark.parametrize("dataset_size", [-1, 2.5, True])
def test_bad_dataset_size(dataset_size: object) -> None:
    with pytest.raises(ValueError, match="Expected argument `dataset_size` to be a non-negative int"):
        VarlenAUROC(dataset_size=dataset_size)  # type: ignore[arg-type]


def _id_layout(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "ascending":
        return np.arange(n) * 3 + 5
    if kind == "rank_runs":  # a gather of W ranks, each in id order (shuffle=False), padding repeated at the end
        world = 4
        return np.concatenate([np.arange(r, n + 2, world) for r in range(world)])[:n]
    if kind == "many_runs":  # 100 ascending runs (a gather of 100 ranks)
        return np.concatenate([np.arange(r, n, 100) for r in range(100)])[:n]
    if kind == "permutation":  # a shuffled epoch: distinct ids spanning about n values
        return rng.permutation(n) + 7
    if kind == "padded_permutation":
        return np.concatenate([rng.permutation(n - 3), np.arange(3)])
    if kind == "repeats":  # every id about twice (one data set evaluated twice)
        return rng.integers(0, n // 2 + 1, n)
    if kind == "sparse":  # hashed ids: span far above n
        return rng.integers(0, 10**15, n)
    return rng.integers(2**61, 2**61 + n // 2 + 1, n)  # "wide": ids * sub width would overflow int64


@pytest.mark.parametrize(
    "kind",
    ["ascending", "rank_runs", "many_runs", "permutation", "padded_permutation", "repeats", "sparse", "wide"],
)
@pytest.mark.parametrize("width", [1, 3])
@pytest.mark.parametrize("route", ["auto", "torch_sort", "merge_runs", "slots"])
def test_id_dedup_keeps_the_rows_the_contract_names_by_every_route(
    kind: str, width: int, route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every way the stable order of the keys is found (no sort when ascending, a merge of ascending runs, a scatter
    of distinct keys into slots, torch's stable sort) keeps the same rows in the same order as the contract, with
    copies ordered by their scores (ties with -0.0, equal copies) and samples of several elements (``sub``: one whole
    copy of the sample kept).
    """
    from torchmetrics_varlen._core import dedup as _dedup

    if route != "auto":
        monkeypatch.setattr(_dedup, "_FEW_RUNS", 10**9 if route == "merge_runs" else 0)
        monkeypatch.setattr(_dedup, "_SLOT_SPAN", 10**9 if route == "slots" else 0)
    rng = np.random.default_rng(len(kind) * 10 + width)
    rows = 1_500
    ids = np.repeat(_id_layout(kind, rows, rng), width)
    sub = np.tile(np.arange(width), rows)
    scores = rng.integers(0, 3, (rows * width, 2)).astype(np.float64) - 1.0
    scores[rng.random(rows * width) < 0.2, 0] = -0.0
    target = torch.from_numpy(ids % 2).reshape(-1, 1)  # copies agree
    args = (torch.from_numpy(ids), torch.from_numpy(sub.astype(np.int32)), target)
    expected = contract_keep(ids.tolist(), sub.tolist(), scores.tolist())
    assert _dedup.dedup_by_id(*args, torch.from_numpy(scores)).tolist() == expected
    assert _dedup.dedup_by_id(*args).tolist() == contract_keep(ids.tolist(), sub.tolist(), None)
    order = _dedup.dedup_order(*args, torch.from_numpy(scores))
    assert (order is None) == (expected == list(range(len(expected))) and len(expected) == ids.shape[0])


def test_one_id_per_row_of_a_2d_binary_input_keeps_one_whole_copy() -> None:
    """Two copies of sample 1 (a row of two binary scores) that differ: the lexicographically smaller row is kept
    whole, never the smaller score of each column (a row no copy has); in either order.
    """
    rows = {0: ([0.6, 0.4], [1, 0]), 2: ([0.8, 0.7], [1, 1])}
    copy_a, copy_b = [0.2, 0.9], [0.3, 0.1]  # A < B lexicographically; the element-wise minimum is [0.2, 0.1]
    target_1 = [0, 1]
    expected = roc_auc_score([*rows[0][1], *target_1, *rows[2][1]], [*rows[0][0], *copy_a, *rows[2][0]])
    for first, second in ((copy_a, copy_b), (copy_b, copy_a)):
        metric = VarlenAUROC()
        metric.update(
            torch.tensor([rows[0][0], first]), torch.tensor([rows[0][1], target_1]), sample_ids=torch.tensor([0, 1])
        )
        metric.update(
            torch.tensor([second, rows[2][0]]), torch.tensor([target_1, rows[2][1]]), sample_ids=torch.tensor([1, 2])
        )
        assert metric.compute().item() == pytest.approx(f32(expected), abs=1e-7)


def test_rows_with_weights_compare_every_score_before_the_weight() -> None:
    """Copies of a 2-D binary row that tie on the first score: the next score decides, not the weight."""
    copy_a, copy_b = ([0.3, 0.05], 3.0), ([0.3, 0.9], 0.5)  # A is smaller by its scores, B by its weight
    others = ([[0.6, 0.4], [0.8, 0.7]], [[1, 0], [0, 1]], [1.0, 2.0])
    target_9 = [1, 0]
    kept_scores = [*others[0][0], *copy_a[0], *others[0][1]]
    kept_target = [*others[1][0], *target_9, *others[1][1]]
    weights = [1.0, 1.0, 3.0, 3.0, 2.0, 2.0]
    expected = f32(roc_auc_score(kept_target, kept_scores, sample_weight=weights))
    for first, second in ((copy_a, copy_b), (copy_b, copy_a)):
        metric = VarlenAUROC()
        for (scores, weight), other, other_target, other_weight, ident in (
            (first, others[0][0], others[1][0], others[2][0], 0),
            (second, others[0][1], others[1][1], others[2][1], 2),
        ):
            metric.update(
                torch.tensor([other, scores]),
                torch.tensor([other_target, target_9]),
                sample_ids=torch.tensor([ident, 9]),
                sample_weight=torch.tensor([other_weight, weight]),
            )
        assert metric.compute().item() == pytest.approx(expected, abs=1e-7)


@pytest.mark.parametrize("short", [[0.1, 0.45], [0.1]])
def test_copies_of_one_id_as_rows_of_different_widths_are_an_error(short: list[float]) -> None:
    """Also when the shorter copy has one element (only its element 0 has a twin)."""
    metric = VarlenAUROC()
    metric.update(torch.tensor([[0.4, 0.6, 0.9]]), torch.tensor([[0, 1, 1]]), sample_ids=torch.tensor([1]))
    metric.update(torch.tensor([short]), torch.tensor([[0, 1][: len(short)]]), sample_ids=torch.tensor([1]))
    with pytest.raises(ValueError, match=f"Sample id 1 was seen as samples of {len(short)} and of 3 elements"):
        metric.compute()


def test_copies_of_large_samples_dedup_in_memory_linear_in_the_copies() -> None:
    """Copies of 256x256 binary images (one id per image): ranking them by one sort column per pixel would need
    copies x pixels x pixels keys (over 100 GB here); the copies' rows are ranked once instead.
    """
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(3, 256, 256, generator=gen)
    target = (torch.rand(3, 256, 256, generator=gen) > 0.5).long()
    metric = VarlenAUROC()
    metric.update(images, target, sample_ids=torch.arange(3))
    metric.update(images[1:2] * 0.5, target[1:2], sample_ids=torch.tensor([1]))  # a smaller copy of image 1
    kept = torch.cat([images[:1], images[1:2] * 0.5, images[2:]])
    expected = roc_auc_score(target.reshape(-1).numpy(), kept.reshape(-1).double().numpy())
    assert metric.compute().item() == pytest.approx(f32(expected), abs=1e-7)
    assert metric.sync_report is not None
    assert (metric.sync_report.kept, metric.sync_report.duplicates_dropped) == (3, 1)
