"""A ``dataset_size`` that cannot be the ``DistributedSampler``'s is an error on every rank, never a silent prefix.

A ``DistributedSampler`` over N samples on W ranks deals ``ceil(N / W)`` rows to each rank: at most W - 1 of them are
padding, at most one a rank, none in one process. ``dataset_size=len(loader)`` (batches for samples) makes most rows
look like padding; the value of the rows kept would be silently wrong.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _data import scores_and_labels
from _dist import DistPool
from _float32 import f32
from sklearn.metrics import accuracy_score, roc_auc_score
from torch.utils.data import DistributedSampler
from torchmetrics.classification import BinaryAccuracy

from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenCollection

N, BATCH = 101, 8


def _makers() -> dict[str, Any]:
    return {
        "auroc": lambda size: VarlenAUROC(dataset_size=size),
        "varlen": lambda size: Varlen(BinaryAccuracy(), dataset_size=size),
        "collection": lambda size: VarlenCollection({"auroc": VarlenAUROC()}, dataset_size=size),
    }


def _value(kind: str, value: Any) -> float:
    return float(value["auroc"] if kind == "collection" else value)


def _expected(kind: str, preds: torch.Tensor, target: torch.Tensor) -> float:
    if kind == "varlen":
        return float(accuracy_score(target, preds > 0.5))
    return f32(roc_auc_score(target, preds))


def _feed(metric: Any, preds: torch.Tensor, target: torch.Tensor, rows: list[int]) -> None:
    for start in range(0, len(rows), BATCH):
        part = rows[start : start + BATCH]
        metric.update(preds[part].float(), target[part])


def _feed_and_compute(metric: Any, preds: torch.Tensor, target: torch.Tensor, rows: list[int]) -> Any:
    _feed(metric, preds, target, rows)
    return metric.compute()


@pytest.mark.parametrize("kind", ["auroc", "varlen", "collection"])
def test_len_loader_for_len_dataset_raises_in_one_process_then_the_next_epoch_is_exact(kind: str) -> None:
    preds, target = scores_and_labels(N, 1)
    loader_len = -(-N // BATCH)  # 13 batches: the mistake
    metric = _makers()[kind](loader_len)
    rows = list(range(N))
    with pytest.raises(ValueError, match=r"dataset_size=13\).*sampler padding.*len\(loader\)") as info:
        _feed_and_compute(metric, preds, target, rows)  # a collection knows at the update that cuts a padding row
    assert len(str(info.value)) < 1000
    fixed = _makers()[kind](N)
    for _ in range(2):  # the fixed argument, two epochs
        _feed(fixed, preds, target, rows)
        assert _value(kind, fixed.compute()) == pytest.approx(_expected(kind, preds, target), abs=1e-6)
        fixed.reset()


@pytest.mark.parametrize("kind", ["auroc", "varlen"])
def test_a_second_pass_without_reset_raises_and_reset_recovers(kind: str) -> None:
    preds, target = scores_and_labels(N, 2)
    metric = _makers()[kind](N)
    _feed(metric, preds, target, list(range(N)))
    _feed(metric, preds, target, list(range(N)))  # the next epoch, without reset(): 101 rows past dataset_size
    with pytest.raises(ValueError, match="without reset"):
        metric.compute()
    metric.reset()
    _feed(metric, preds, target, list(range(N)))
    assert _value(kind, metric.compute()) == pytest.approx(_expected(kind, preds, target), abs=1e-6)


@pytest.mark.parametrize("kind", ["auroc", "varlen", "collection"])
def test_a_refused_batch_fed_again_is_named_as_the_cause_and_skipping_it_is_exact(kind: str) -> None:
    """A batch refused for a bad label, fixed and fed again, deals its rows twice: the padding error names that cause
    first (at compute(), or for a collection at the update that cuts the extra row). Skipping the refused batch
    instead gives the exact value of the rows evaluated, with the "never seen" warning for the skipped ones.
    """
    preds, target = scores_and_labels(N, 5)
    preds = preds.float()
    bad = list(range(3 * BATCH, 4 * BATCH))
    for retry in (True, False):
        metric = _makers()[kind](N)
        with pytest.raises(ValueError, match="refused") if retry else pytest.warns(UserWarning, match="never seen"):
            for start in range(0, N, BATCH):
                part = list(range(start, min(start + BATCH, N)))
                if part == bad:
                    broken = target[part].clone()
                    broken[2] = 2  # a label out of range: every metric refuses it (torchmetrics' own too)
                    with pytest.raises((ValueError, RuntimeError), match="target"):  # torchmetrics: RuntimeError
                        metric.update(preds[part], broken)
                    if not retry:
                        continue
                metric.update(preds[part], target[part])
            value = metric.compute()
        if retry:
            continue
        kept = [i for i in range(N) if i not in bad]
        assert _value(kind, value) == pytest.approx(_expected(kind, preds[kept], target[kept]), abs=1e-6)


def case_wrong_then_right(rank: int, world: int, kind: str) -> list[Any]:
    """Epoch 0 with dataset_size=len(loader), epoch 1 with len(dataset), on a real DistributedSampler each."""
    preds, target = scores_and_labels(N, 3)
    out: list[Any] = []
    for size in (-(-N // BATCH), N):
        metric = _makers()[kind](size)
        rows = list(DistributedSampler(range(N), num_replicas=world, rank=rank, shuffle=True, seed=size))
        try:
            _feed(metric, preds, target, rows)
            out.append(_value(kind, metric.compute()))
        except ValueError as error:
            out.append(str(error))
    return out


@pytest.mark.distributed
@pytest.mark.parametrize("kind", ["auroc", "varlen"])
@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_raises_at_compute_then_the_fixed_metric_is_exact(pool: DistPool, kind: str, world: int) -> None:
    preds, target = scores_and_labels(N, 3)
    for wrong, right in pool.values(case_wrong_then_right, world, kind):
        assert isinstance(wrong, str)
        assert "sampler padding (per rank: [" in wrong
        assert "len(loader)" in wrong
        assert len(wrong) < 1000
        assert right == pytest.approx(_expected(kind, preds, target), abs=1e-6)


def case_padding_within_the_rule(rank: int, world: int) -> float:
    """The largest padding a DistributedSampler makes (N = W * k + 1: W - 1 rows) is not an error."""
    n = 4 * world + 1
    preds, target = scores_and_labels(n, 4)
    metric = VarlenAUROC(dataset_size=n)
    rows = list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False))
    _feed(metric, preds, target, rows)
    return float(metric.compute())


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 3, 4])
def test_the_samplers_own_padding_is_not_an_error(pool: DistPool, world: int) -> None:
    n = 4 * world + 1
    preds, target = scores_and_labels(n, 4)
    for value in pool.values(case_padding_within_the_rule, world):
        assert value == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-12)


def case_misaligned_last_batch(rank: int, world: int, kind: str) -> Any:
    """N = 101 on 2 ranks: rank 1's last batch holds the padding row. Its target there is one label short (a bug in
    the user's code); cut alike, the 5 scores and 4 labels would pass as 4 rows, paired wrongly. Every kind refuses it
    (a single metric by its shape check, ``Varlen`` and a collection before the cut), and the loop goes on.
    """
    preds, target = scores_and_labels(N, 4)
    metric = _makers()[kind](N)
    rows = list(DistributedSampler(range(N), num_replicas=world, rank=rank, shuffle=False))
    refused = None
    for start in range(0, len(rows), BATCH):
        part = rows[start : start + BATCH]
        if rank == 1 and start + BATCH >= len(rows):  # the last batch: its last row is padding
            try:
                metric.update(preds[part].float(), target[part][1:])
            except ValueError as error:
                refused = str(error)
            continue
        metric.update(preds[part].float(), target[part])
    with pytest.warns(UserWarning, match="never seen"):
        value = _value(kind, metric.compute())
    return value, refused


@pytest.mark.distributed
@pytest.mark.parametrize("kind", ["auroc", "varlen", "collection"])
def test_arguments_of_different_lengths_are_refused_not_cut_alike(pool: DistPool, kind: str) -> None:
    preds, target = scores_and_labels(N, 4)
    last = list(DistributedSampler(range(N), num_replicas=2, rank=1, shuffle=False))
    refused_rows = last[(len(last) - 1) // BATCH * BATCH : -1]  # rank 1's last batch (refused) less its padding
    kept = [i for i in range(N) if i not in refused_rows]
    results = pool.values(case_misaligned_last_batch, 2, kind)
    for value, _ in results:
        assert value == pytest.approx(_expected(kind, preds[kept], target[kept]), abs=1e-6)
    refused = results[1][1]  # rank 1's error
    assert refused is not None
    assert "same number of rows" in refused or "same shape" in refused


def case_a_batch_of_lists(rank: int, world: int, kind: str) -> float:
    """Rank 1 passes one batch as Python lists (refused), catches the error and goes on: its rows still take their
    sampler positions, so the padding row at the end is still cut.
    """
    preds, target = scores_and_labels(N, 6)
    metric = _makers()[kind](N)
    rows = list(DistributedSampler(range(N), num_replicas=world, rank=rank, shuffle=False))
    for start in range(0, len(rows), BATCH):
        part = rows[start : start + BATCH]
        if rank == 1 and start == BATCH:
            with pytest.raises((TypeError, AttributeError)):  # (torchmetrics' BinaryAccuracy: AttributeError)
                metric.update(preds[part].float().tolist(), target[part].tolist())
            continue
        metric.update(preds[part].float(), target[part])
    with pytest.warns(UserWarning, match="never seen"):
        return _value(kind, metric.compute())


@pytest.mark.distributed
@pytest.mark.parametrize("kind", ["auroc", "varlen", "collection"])
def test_a_batch_refused_for_its_type_keeps_its_sampler_positions(pool: DistPool, kind: str) -> None:
    preds, target = scores_and_labels(N, 6)
    refused = list(DistributedSampler(range(N), num_replicas=2, rank=1, shuffle=False))[BATCH : 2 * BATCH]
    kept = [i for i in range(N) if i not in refused]
    for value in pool.values(case_a_batch_of_lists, 2, kind):
        assert value == pytest.approx(_expected(kind, preds[kept], target[kept]), abs=1e-6)


def _collection_in_a_skip_loop(rank: int, world: int, members: str) -> list[str]:
    """``VarlenCollection(dataset_size=len(loader))`` in the loop that skips a refused batch: every update that shows
    too much padding raises, and then ``compute()`` of the collection, or of each member alone (Lightning's
    ``log_dict(collection)``), raises the padding error too (not the values of no sample); twice, over two epochs.
    """
    preds, target = scores_and_labels(N, 7)
    collection = VarlenCollection(
        {"acc": BinaryAccuracy(), "auroc": VarlenAUROC()}, dataset_size=-(-N // BATCH)
    )  # 13: the number of batches
    rows = list(DistributedSampler(range(N), num_replicas=world, rank=rank, shuffle=True, seed=0))
    errors = []
    for _ in range(2):
        refused = 0
        for start in range(0, len(rows), BATCH):
            part = rows[start : start + BATCH]
            try:
                collection.update(preds[part].float(), target[part])
            except ValueError:
                refused += 1
        assert refused
        computes = [collection.compute] if members == "collection" else [m.compute for m in collection.values()]
        for compute in computes:
            with pytest.raises(ValueError, match=r"dataset_size=13\).*sampler padding.*len\(loader\)") as info:
                compute()
            errors.append(str(info.value))
        if members == "collection":
            collection.reset()
        else:
            for metric in collection.values():
                metric.reset()
    return errors


@pytest.mark.parametrize("members", ["collection", "each member"])
def test_a_collection_that_refused_padding_fails_compute_in_one_process(members: str) -> None:
    errors = _collection_in_a_skip_loop(0, 1, members)
    assert len(errors) == (2 if members == "collection" else 4)


@pytest.mark.distributed
@pytest.mark.parametrize("members", ["collection", "each member"])
def test_a_collection_that_refused_padding_fails_compute_on_every_rank(pool: DistPool, members: str) -> None:
    for errors in pool.values(_collection_in_a_skip_loop, 2, members):
        assert all("per rank: [" in error and len(error) < 1000 for error in errors)
