"""Varlen with ``sample_ids`` for metrics whose list states grow by one *element* per sample (a detection metric's
per-image tensors of boxes): one process, then spawned gloo ranks. The real detection metrics: test_detection.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _dist import DistPool
from _per_image import PerImage, batch, image, reference, same
from _sampler import repeat_factor_indices, sampler_indices
from torch import Tensor
from torchmetrics import Metric

from torchmetrics_varlen import MetricSyncError, Varlen, VarlenCollection, load_rank_states

N = 21  # odd: DistributedSampler pads for W = 2, 3, 4


def _feed(metric: Any, indices: list[int], size: int = 2, noise: list[int] | None = None, forward: bool = True) -> None:
    """``indices`` in batches of ``size`` with their ids, every other batch through ``forward``."""
    for step, start in enumerate(range(0, len(indices), size)):
        part = indices[start : start + size]
        preds, target = batch(part, None if noise is None else noise[start : start + size])
        call = metric if forward and step % 2 else metric.update
        call(preds, target, sample_ids=torch.tensor(part, dtype=torch.int64))


def test_one_element_per_id_in_id_order() -> None:
    """Every image fed twice, shuffled, through update and forward: each once, in id order, bit for bit the one
    process's states; an image without detections (0, 4, ...) or without ground truth (0, 3, ...) stays an image.
    """
    order = torch.randperm(N, generator=torch.Generator().manual_seed(0)).tolist()
    metric = Varlen(PerImage(), dataset_size=N)
    _feed(metric, order + order[::-1], size=3)
    assert same(metric.compute(), reference(list(range(N))))
    report = metric.sync_report
    assert report is not None
    assert (report.kept, report.duplicates_dropped, report.missing) == (N, N, 0)
    assert len(metric.metric.detection_box) == 2 * N  # the local states come back after compute()
    assert metric.metric.detection_box[0].shape == (image(order[0])[0]["boxes"].shape[0], 4)


def test_a_batch_without_images_and_an_empty_state() -> None:
    """``update([], [], sample_ids=[])`` adds nothing; the mask state stays empty; the value is the one process's."""
    metric = Varlen(PerImage())
    metric.update([], [], sample_ids=torch.zeros(0, dtype=torch.int64))
    _feed(metric, [4, 0, 5])
    metric.update([], [], sample_ids=torch.zeros(0, dtype=torch.int64))
    assert same(metric.compute(), reference([0, 4, 5]))
    assert metric.metric.detection_mask == []


@pytest.mark.parametrize("first", [0, 1])
def test_copies_that_differ_in_scores_keep_the_smallest_whichever_comes_first(first: int) -> None:
    """Image 5 scored twice, the second time 1/2**20 higher: the lower copy is kept, in either order (a rule of the
    copies alone, so the value is the same at every world size).
    """
    metric = Varlen(PerImage())
    noise = [0, 1] if first == 0 else [1, 0]
    for n in noise:
        preds, target = batch([5], [n])
        metric.update(preds, target, sample_ids=torch.tensor([5]))
    _feed(metric, [6, 7])
    assert same(metric.compute(), reference([5, 6, 7]))


def test_copies_that_differ_in_labels_or_in_boxes_raise() -> None:
    metric = Varlen(PerImage())
    preds, target = batch([6])
    metric.update(preds, target, sample_ids=torch.tensor([6]))
    preds[0] = {**preds[0], "labels": (preds[0]["labels"] + 1) % 3}
    metric.update(preds, target, sample_ids=torch.tensor([6]))
    with pytest.raises(ValueError, match=r"Sample id 6 was seen twice with different targets .* in `detection_labels`"):
        metric.compute()
    metric = Varlen(PerImage())
    for i in (6, 5):  # two images under one id: 2 and 1 detections
        preds, target = batch([i])
        metric.update(preds, target, sample_ids=torch.tensor([6]))
    with pytest.raises(ValueError, match=r"Sample id 6 was seen twice with `detection_box` of different shapes"):
        metric.compute()


class Switching(Metric):
    """Appends one element per sample, or one tensor per batch when ``per_batch`` is set; or nothing for ``skip``."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("x", default=[], dist_reduce_fx=None)
        self.add_state("y", default=[], dist_reduce_fx=None)
        self.per_batch = False
        self.skip_y = False

    def update(self, x: list[Tensor]) -> None:
        """``x``: one tensor per sample."""
        self.x.extend(x) if not self.per_batch else self.x.append(torch.cat(x))
        if not self.skip_y:
            self.y.extend(x)

    def compute(self) -> Tensor:
        """The number of elements."""
        return torch.tensor(len(self.x))


def test_a_state_that_changes_how_it_grows_is_refused_and_rolled_back() -> None:
    metric = Varlen(Switching())
    metric.update([torch.ones(2), torch.ones(3)], sample_ids=torch.arange(2))  # one element per sample
    metric.metric.per_batch = True
    with pytest.raises(ValueError, match=r"`x` held one element per sample and grew by one row per sample"):
        metric.update([torch.ones(1), torch.ones(1)], sample_ids=torch.arange(2, 4))
    assert [len(metric.metric.x), len(metric.metric.y), len(metric.varlen_ids)] == [2, 2, 1]
    metric.metric.per_batch = False
    metric.update([torch.ones(1), torch.ones(4)], sample_ids=torch.arange(2, 4))
    assert int(metric.compute()) == 4
    assert metric.sync_report is not None
    assert (metric.sync_report.kept, metric.sync_report.rejected) == (4, 2)
    metric.reset()  # a new epoch may grow another way
    metric.metric.per_batch = True
    metric.update([torch.ones(1), torch.ones(1)], sample_ids=torch.arange(2))
    assert int(metric.compute()) == 1


def test_a_state_that_starts_growing_late_or_stops_is_refused() -> None:
    metric = Varlen(Switching())
    metric.metric.skip_y = True
    metric.update([torch.ones(2), torch.ones(3)], sample_ids=torch.arange(2))
    metric.metric.skip_y = False
    with pytest.raises(ValueError, match=r"`y` held nothing for the 2 earlier samples and grew in this update"):
        metric.update([torch.ones(2)], sample_ids=torch.tensor([2]))
    metric = Varlen(Switching())
    metric.update([torch.ones(2), torch.ones(3)], sample_ids=torch.arange(2))
    metric.metric.skip_y = True
    text = r"grow by one element per sample .* or to grow by one row per sample with `sample_ids` \(1 rows\), but `y`"
    with pytest.raises(ValueError, match=text):
        metric.update([torch.ones(2)], sample_ids=torch.tensor([2]))


class Values(Metric):
    """Keeps each batch's values as one tensor (one row per sample, in a ``None``-reduced list, as retrieval does)."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("values", default=[], dist_reduce_fx=None)

    def update(self, values: Tensor) -> None:
        """One tensor per batch, empty ones included."""
        self.values.append(values)

    def compute(self) -> Tensor:
        """Every value, in the order of the states."""
        return torch.cat(self.values) if self.values else torch.zeros(0)


@pytest.mark.parametrize("resume", [False, True])
def test_rows_states_keep_no_empty_element(resume: bool) -> None:
    """A batch of no samples appends an empty tensor to a metric of one row per sample: dropped, so the stored list
    still reads as rows (two elements for two ids would read as one element per id, and put id 0's value after id
    1's). Also after a checkpoint.
    """
    metric = Varlen(Values())
    metric.update(torch.zeros(0), sample_ids=torch.zeros(0, dtype=torch.int64))
    metric.update(torch.tensor([0.5, 0.25]), sample_ids=torch.tensor([1, 0]))
    assert [t.shape[0] for t in metric.metric.values] == [2]
    if resume:
        metric.persistent(True)
        resumed = Varlen(Values())
        resumed.persistent(True)
        resumed.load_state_dict(metric.state_dict())
        metric = resumed
    metric.update(torch.tensor([0.75]), sample_ids=torch.tensor([2]))
    assert metric.compute().tolist() == [0.25, 0.5, 0.75]


def test_a_checkpoint_of_two_ranks_resumes_on_one() -> None:
    """The states two ranks saved mid-epoch, loaded on one process (``load_rank_states``), then the rest."""
    old = []
    for rank in range(2):
        metric = Varlen(PerImage(), dataset_size=N)
        metric.persistent(True)
        _feed(metric, sampler_indices(N, 2, rank, shuffle=True, drop_last=False)[:6])
        old.append(metric.state_dict())
    resumed = Varlen(PerImage(), dataset_size=N)
    resumed.persistent(True)
    load_rank_states(resumed, old)
    _feed(resumed, list(range(N)))  # the rest, and every image again: the copies count once
    assert same(resumed.compute(), reference(list(range(N))))


# ----------------------------------------------------------------------------- spawned ranks


def case_per_image(rank: int, world: int, sampler: str, collection: bool) -> dict[str, Any]:
    """The images ``sampler`` deals this rank, fed with their ids (every other batch through forward); computed by a
    Varlen, or by a VarlenCollection of two (one compute group: the second shares the first's states).
    """
    noise = None
    if sampler == "padded":
        indices = sampler_indices(N, world, rank, shuffle=True, drop_last=False)
    elif sampler == "repeat":  # repeated images, scored again slightly differently each time
        indices, noise = repeat_factor_indices(N, world, rank, lambda i: 1 + (i % 3 == 0) + (i % 5 == 0))
    else:  # "empty": every image on the last rank, nothing on the others
        indices = list(range(N)) if rank == world - 1 else []
    if collection:
        metric: Any = VarlenCollection({"a": PerImage(), "b": PerImage()}, sync_timeout=30)
        _feed(metric, indices, noise=noise, forward=False)
        values = metric.compute()
        out = {"a": {k[2:]: v for k, v in values.items() if k.startswith("a_")}}
        out["b"] = {k[2:]: v for k, v in values.items() if k.startswith("b_")}
        out["groups"] = len(metric.compute_groups)
        return out
    metric = Varlen(PerImage(), dataset_size=N, sync_timeout=30)
    _feed(metric, indices, noise=noise)
    value = metric.compute()
    assert metric.sync_report is not None
    return {"value": value, "kept": metric.sync_report.kept}


@pytest.mark.distributed
@pytest.mark.parametrize("sampler", ["padded", "repeat", "empty"])
def test_per_image_states_are_the_one_process_states_at_every_world_size(pool: DistPool, sampler: str) -> None:
    """A padded shuffled DistributedSampler, a repeat-factor sampler whose copies are scored differently, every
    image on one rank: at W = 1 to 4, every rank holds exactly the one process's states (the lowest-scored copy).
    """
    expected = reference(list(range(N)))
    for world in (1, 2, 3, 4):
        for got in pool.values(case_per_image, world, sampler, False):
            assert same(got["value"], expected), world
            assert got["kept"] == N


@pytest.mark.distributed
def test_a_collection_of_per_image_metrics(pool: DistPool) -> None:
    expected = reference(list(range(N)))
    for world in (2, 4):
        for got in pool.values(case_per_image, world, "padded", True):
            assert got["groups"] == 1  # "b" shares "a"'s states: its rows are an alias on the wire
            assert same(got["a"], expected)
            assert same(got["b"], expected)


def case_ranks_disagree(rank: int, world: int) -> str:
    """Rank 0 keeps one element per sample, rank 1 one tensor per batch, in the same state."""
    metric = Varlen(Switching(), sync_timeout=30)
    metric.metric.per_batch = rank == 1
    x = [torch.ones(2), torch.ones(3)] if rank == 0 else [torch.ones(1), torch.ones(1)]  # rank 1: 2 rows, 1 tensor
    metric.update(x, sample_ids=torch.arange(2) + 2 * rank)
    with pytest.raises(MetricSyncError, match=r"the ranks disagree on `x per sample`") as caught:
        metric.compute()
    return str(caught.value)


@pytest.mark.distributed
def test_ranks_that_disagree_on_how_a_state_grows_raise_on_every_rank(pool: DistPool) -> None:
    for text in pool.values(case_ranks_disagree, 2):
        assert "one element" in text
        assert "one row" in text
