"""The ledger on one process: ids checked against dataset_size, missing in ids mode, the "never seen" warning (text,
once per epoch, the caller's line), the rule for disagreeing copies, and checkpoints resumed through it.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from sklearn.metrics import accuracy_score, roc_auc_score
from torchmetrics import MetricCollection
from torchmetrics.classification import BinaryAccuracy, BinaryAUROC

from torchmetrics_varlen import (
    Varlen,
    VarlenAUROC,
    VarlenCollection,
    VarlenMulticlassAUROC,
    load_rank_states,
)
from torchmetrics_varlen._core.dedup import dedup_by_id
from torchmetrics_varlen.functional._device import force_device_path

GEN = torch.Generator().manual_seed(7)
PREDS = torch.rand(12, generator=GEN)
TARGET = torch.tensor([0, 1] * 6)


def _makers() -> dict[str, Any]:
    return {
        "auroc": lambda n: VarlenAUROC(dataset_size=n),
        "multiclass": lambda n: VarlenMulticlassAUROC(num_classes=3, dataset_size=n),
        "varlen": lambda n: Varlen(BinaryAUROC(), dataset_size=n),
        "collection": lambda n: VarlenCollection({"auroc": VarlenAUROC()}, dataset_size=n),
    }


def _batch(kind: str, rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
    if kind == "multiclass":
        probs = torch.softmax(torch.stack([PREDS, 1 - PREDS, PREDS * PREDS], 1), 1)
        return probs[rows], (torch.arange(12) % 3)[rows]
    return PREDS[rows], TARGET[rows]


@pytest.mark.parametrize("kind", list(_makers()))
def test_ids_outside_the_data_set_are_refused_and_change_nothing(kind: str) -> None:
    metric = _makers()[kind](12)
    metric.update(*_batch(kind, slice(0, 6)), sample_ids=torch.arange(6))
    for bad in (torch.tensor([6, 12]), torch.tensor([-1, 7])):
        with pytest.raises(ValueError, match=r"sample id (12|-1) is outside \[0, dataset_size=12\)|>= 0, but found -1"):
            metric.update(*_batch(kind, slice(6, 8)), sample_ids=bad)
    metric.update(*_batch(kind, slice(6, 12)), sample_ids=torch.arange(6, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = metric.compute()
    report = metric.sync_report
    assert report is not None
    assert (report.kept, report.missing, report.rejected) == (12, 0, 4)
    if kind in ("auroc", "varlen"):
        assert float(value) == pytest.approx(roc_auc_score(TARGET, PREDS), abs=1e-6)


@pytest.mark.parametrize("kind", list(_makers()))
def test_missing_counts_distinct_ids_in_ids_mode(kind: str) -> None:
    metric = _makers()[kind](12)
    metric.update(*_batch(kind, slice(0, 4)), sample_ids=torch.tensor([0, 3, 5, 7]))
    metric.update(*_batch(kind, slice(0, 4)), sample_ids=torch.tensor([0, 3, 5, 7]))
    with pytest.warns(UserWarning, match="only 4 samples were evaluated: 8 were never seen"):
        metric.compute()
    assert metric.sync_report is not None
    assert (metric.sync_report.kept, metric.sync_report.missing) == (4, 8)


@pytest.mark.parametrize("kind", list(_makers()))
def test_never_seen_warning_names_the_causes_once_per_epoch_at_the_callers_line(kind: str) -> None:
    metric = _makers()[kind](12)
    metric.update(*_batch(kind, slice(0, 8)))  # a partial pass, e.g. Lightning's sanity check
    with pytest.warns(UserWarning, match="never seen") as record:
        metric.compute()
    assert len(record) == 1
    text = str(record[0].message)
    assert "only 8 samples were evaluated: 4 were never seen" in text
    for cause in ("sanity check", "limit_val_batches", "drop_last=True", "skipped batches", "larger than len(dataset)"):
        assert cause in text
    assert record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metric.compute()  # the same epoch: no second warning
    metric.reset()
    metric.update(*_batch(kind, slice(0, 8)))
    with pytest.warns(UserWarning, match="4 were never seen"):
        metric.compute()  # a new epoch warns again


def test_disagreeing_copies_keep_the_smallest_score_whatever_the_order() -> None:
    ids = torch.tensor([4, 1, 4, 1, 2])
    target = torch.tensor([1, 0, 1, 0, 1])
    scores = torch.tensor([0.5, 0.25, 0.375, 0.75, -0.0])
    keep = dedup_by_id(ids, torch.zeros_like(ids), target, scores)
    assert scores[keep].tolist() == [0.25, -0.0, 0.375]
    for perm in (torch.tensor([4, 3, 2, 1, 0]), torch.tensor([2, 0, 4, 1, 3])):
        kept = dedup_by_id(ids[perm], torch.zeros_like(ids), target[perm], scores[perm])
        assert scores[perm][kept].tolist() == [0.25, -0.0, 0.375]
    rows = torch.tensor([[0.5, 0.1], [0.5, 0.0], [0.4, 0.9]])  # lexicographic over the columns
    keep = dedup_by_id(torch.tensor([1, 1, 2]), torch.zeros(3, dtype=torch.long), torch.zeros(3), rows)
    assert keep.tolist() == [1, 2]
    with pytest.raises(ValueError, match="different targets"):
        dedup_by_id(ids, torch.zeros_like(ids), torch.tensor([1, 0, 0, 0, 1]), scores)


@pytest.mark.parametrize("kind", ["auroc", "varlen"])
def test_disagreeing_copies_give_the_value_of_the_smallest_copy(kind: str) -> None:
    metric = VarlenAUROC() if kind == "auroc" else Varlen(BinaryAUROC())
    noisy = PREDS + torch.where(torch.arange(12) % 2 == 0, 0.01, -0.01)
    metric.update(noisy, TARGET, sample_ids=torch.arange(12))
    metric.update(PREDS, TARGET, sample_ids=torch.arange(12))
    expected = roc_auc_score(TARGET, torch.minimum(PREDS, noisy))
    assert float(metric.compute()) == pytest.approx(expected, abs=1e-6)


def _feed_past_the_data_set(metric: Any, kind: str, rows: slice, padding: int) -> None:
    """Feed ``rows`` that run ``padding`` rows past ``dataset_size``: one process never pads (88ed689), so a metric
    raises at compute and a collection at the update that cuts them, naming the count.
    """
    match = f"{padding} rows were dropped as sampler padding"
    if kind == "collection":
        with pytest.raises(ValueError, match=match):
            metric.update(*_batch(kind, rows))
        return
    metric.update(*_batch(kind, rows))
    with pytest.raises(ValueError, match=match):
        metric.compute()


@pytest.mark.parametrize("kind", ["auroc", "multiclass", "varlen", "collection"])
def test_a_checkpoint_saved_mid_epoch_resumes_exactly(kind: str) -> None:
    """Rows 0..4 saved, rows 5..9 after the resume: the value and counts of one pass. The resumed sampler position is
    5, so rows 5..11 run 2 rows past ``dataset_size=10``: one process never pads (88ed689), an error naming the 2
    (a resume that lost the position would count none). Padding dropped after a resume on real ranks:
    test_ledger_distributed (test_a_mid_epoch_checkpoint_resumes_exactly_on_any_world_size).
    """
    metric = _makers()[kind](10)
    metric.persistent(True)
    metric.update(*_batch(kind, slice(0, 5)))
    saved = metric.state_dict()
    resumed = _makers()[kind](10)
    resumed.persistent(True)
    resumed.load_state_dict(saved)
    resumed.update(*_batch(kind, slice(5, 10)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = resumed.compute()
    report = resumed.sync_report
    assert report is not None
    assert (report.kept, report.duplicates_dropped, report.missing) == (10, 0, 0)
    if kind in ("auroc", "varlen"):
        assert float(value) == pytest.approx(roc_auc_score(TARGET[:10], PREDS[:10]), abs=1e-6)
    if kind == "collection":
        assert float(value["auroc"]) == pytest.approx(roc_auc_score(TARGET[:10], PREDS[:10]), abs=1e-6)
    padded = _makers()[kind](10)
    padded.persistent(True)
    padded.load_state_dict(saved)
    _feed_past_the_data_set(padded, kind, slice(5, 12), 2)
    padded.reset()
    padded.update(*_batch(kind, slice(0, 10)))
    value = padded.compute()
    if kind in ("auroc", "varlen", "collection"):
        value = value["auroc"] if kind == "collection" else value
        assert float(value) == pytest.approx(roc_auc_score(TARGET[:10], PREDS[:10]), abs=1e-6)


def test_load_rank_states_merges_sum_states_on_one_process() -> None:
    old = [Varlen(BinaryAccuracy(), dataset_size=10) for _ in range(2)]
    for metric in old:
        metric.persistent(True)
    old[0].update(PREDS[0:4], TARGET[0:4])
    old[1].update(PREDS[4:8], TARGET[4:8])
    new = Varlen(BinaryAccuracy(), dataset_size=10)
    load_rank_states(new, [m.state_dict() for m in old])
    new.update(PREDS[8:12], TARGET[8:12])  # positions 8, 9 real; 10, 11 padding
    assert float(new.compute()) == pytest.approx(accuracy_score(TARGET[:10], PREDS[:10] > 0.5))
    assert new.sync_report is not None
    assert new.sync_report.kept == 10


def test_load_rank_states_refuses_states_saved_without_persistent() -> None:
    old = VarlenAUROC(dataset_size=10)
    old.update(PREDS[:4], TARGET[:4])
    with pytest.raises(ValueError, match=r"persistent\(True\)"):
        load_rank_states(VarlenAUROC(dataset_size=10), [old.state_dict()])


def test_load_rank_states_refuses_ranks_that_dealt_different_counts() -> None:
    old = [VarlenAUROC(dataset_size=10) for _ in range(2)]
    for metric in old:
        metric.persistent(True)
    old[0].update(PREDS[:4], TARGET[:4])
    old[1].update(PREDS[4:7], TARGET[4:7])
    with pytest.raises(ValueError, match="dealt different numbers of rows"):
        load_rank_states(VarlenAUROC(dataset_size=10), [m.state_dict() for m in old])


@pytest.mark.parametrize("kind", ["auroc", "varlen"])
def test_counter_states_read_or_copied_mid_epoch_keep_every_count(kind: str) -> None:
    """The counters are plain states added to in place (``Ledger.batch``): reading, copying or pickling a metric
    mid-epoch, and updating it afterwards, gives the counts and the value of a metric never looked at.
    """
    import copy
    import pickle

    names = ("rows_seen", "padding_dropped") if kind == "auroc" else ("varlen_rows", "varlen_padding")
    # rows 3..9 end the pass; 3..11 run 2 rows past it, cut and counted, which one process never pads (88ed689):
    # compute() raises naming the 2, so the padding counter is read too
    for end, padding in ((10, 0), (12, 2)):
        metric = _makers()[kind](10)
        metric.update(*_batch(kind, slice(0, 3)))
        assert [int(getattr(metric, n)) for n in names] == [3, 0]  # a read writes nothing
        copied, pickled = copy.deepcopy(metric), pickle.loads(pickle.dumps(metric))
        for m in (metric, copied, pickled):
            m.update(*_batch(kind, slice(3, end)))
            assert [int(getattr(m, n)) for n in names] == [end, padding]
            if kind == "auroc":
                assert int(m.num_samples) == 10
            if padding:
                with pytest.raises(ValueError, match=f"{padding} rows were dropped as sampler padding"):
                    m.compute()
                continue
            assert float(m.compute()) == pytest.approx(roc_auc_score(TARGET[:10], PREDS[:10]), abs=1e-6)
            assert m.sync_report is not None
            assert (m.sync_report.seen_per_rank, m.sync_report.kept, m.sync_report.missing) == ((10,), 10, 0)


def test_never_seen_warning_skips_library_frames_and_points_at_the_users_line() -> None:
    """Called through a library (torchmetrics' MetricCollection here; Lightning's logger in a LightningModule), the
    warning still names the line of the user's code, not the library's.
    """
    collection = MetricCollection({"auroc": VarlenAUROC(dataset_size=12)})
    collection.update(torch.tensor([0.2, 0.7, 0.4, 0.9]), torch.tensor([0, 1, 1, 0]))
    with pytest.warns(UserWarning, match="never seen") as record:
        collection.compute()
    assert [r.filename for r in record] == [__file__]


def test_collection_keeps_its_report_after_reset_as_a_metric_does() -> None:
    metric = VarlenAUROC(dataset_size=3)
    collection = VarlenCollection({"auroc": VarlenAUROC(), "acc": BinaryAccuracy()}, dataset_size=3)
    for host in (metric, collection):
        host.update(torch.tensor([0.2, 0.7, 0.4]), torch.tensor([0, 1, 1]))
        host.compute()
        report = host.sync_report
        host.reset()
        assert host.sync_report == report
        assert report is not None
        assert (report.kept, report.missing) == (3, 0)


class _CheckedAUROC(BinaryAUROC):
    """``BinaryAUROC`` whose update checks its input (torchmetrics' own ``BinaryAUROC`` skips the check)."""

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        if preds.shape != target.shape or bool(((target != 0) & (target != 1)).any()):
            msg = "bad batch"
            raise ValueError(msg)
        super().update(preds, target)


_REFUSED_FIRST = {  # the first batch of an epoch, refused
    "negative id": (torch.tensor([0.9, 0.1]), torch.tensor([1, 0]), torch.tensor([-1, 3])),
    "id past the data set": (torch.tensor([0.9, 0.1]), torch.tensor([1, 0]), torch.tensor([3, 12])),
    "bad target, with ids": (torch.tensor([0.9, 0.1]), torch.tensor([1, 2]), torch.tensor([0, 1])),
    "bad target, no ids": (torch.tensor([0.9, 0.1]), torch.tensor([1, 2]), None),
}
_REFUSED_CASES = [
    (kind, refused, size)
    for kind in ("auroc", "varlen", "collection")
    for refused in _REFUSED_FIRST
    for size in (None, 12)
    # without dataset_size the wrappers take any integer id (VarlenAUROC refuses negative ones)
    if size is not None or kind == "auroc" or refused not in ("negative id", "id past the data set")
]


@pytest.mark.parametrize(("kind", "refused", "dataset_size"), _REFUSED_CASES)
def test_a_refused_first_batch_decides_no_dedup_mode(kind: str, refused: str, dataset_size: int | None) -> None:
    """The epoch's ids mode is decided by the first accepted batch: a batch refused first (bad ids, bad input) leaves
    it open, so a later batch with valid ids is taken (and then a batch without ids is refused).
    """
    if kind == "collection":
        metric: Any = VarlenCollection({"auroc": VarlenAUROC()}, dataset_size=dataset_size)
    elif kind == "varlen":
        metric = Varlen(_CheckedAUROC(), dataset_size=dataset_size)
    else:
        metric = VarlenAUROC(dataset_size=dataset_size)
    preds, target, ids = _REFUSED_FIRST[refused]
    if dataset_size is None and refused == "id past the data set":
        ids = torch.tensor([-3, 1])  # without dataset_size only a negative id is out of range
    with pytest.raises(ValueError, match="sample id|sample_ids|target|bad batch"):
        metric.update(preds, target, sample_ids=ids)
    metric.update(PREDS[:8], TARGET[:8], sample_ids=torch.arange(8))
    with pytest.raises(ValueError, match="earlier updates had"):
        metric.update(PREDS[8:], TARGET[8:])  # the epoch is one of ids now
    metric.update(PREDS[8:], TARGET[8:], sample_ids=torch.arange(8, 12))
    value = metric.compute()
    value = value["auroc"] if kind == "collection" else value
    assert float(value) == pytest.approx(roc_auc_score(TARGET, PREDS), abs=1e-6)
    report = metric.sync_report
    assert report is not None
    assert (report.kept, report.rejected) == (12, 6)


@pytest.mark.parametrize("kind", ["auroc", "varlen"])
def test_counters_on_the_device_path_count_the_same(kind: str) -> None:
    """On the device path the ledger adds to its counter states in place and keeps their values host-side (no device
    read per batch): the counts, the padding cut and the value are those of the CPU path.
    """
    names = ("rows_seen", "padding_dropped") if kind == "auroc" else ("varlen_rows", "varlen_padding")
    # 10 rows end the pass; 12 run 2 past it, cut and counted, which one process never pads (88ed689): compute()
    # raises naming the 2, so the padding counter is read too
    for end, padding in ((10, 0), (12, 2)):
        with_view = _makers()[kind](10)
        with force_device_path():
            without = _makers()[kind](10)
            for start in range(0, end, 3):
                without.update(*_batch(kind, slice(start, min(start + 3, end))))
            assert without._ledger.position(without) == end
        for start in range(0, end, 3):
            with_view.update(*_batch(kind, slice(start, min(start + 3, end))))
        for m in (with_view, without):
            assert [int(getattr(m, n)) for n in names] == [end, padding]
            assert m._ledger.position(m) == end
            if padding:
                with pytest.raises(ValueError, match=f"{padding} rows were dropped as sampler padding"):
                    m.compute()
            else:
                assert float(m.compute()) == pytest.approx(roc_auc_score(TARGET[:10], PREDS[:10]), abs=1e-6)
        if not padding:
            assert torch.equal(with_view.compute(), without.compute())
