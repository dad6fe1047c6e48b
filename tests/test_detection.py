"""Object detection for real: torchmetrics' ``MeanAveragePrecision`` (pycocotools) and ``IntersectionOverUnion``
(torchvision) through ``Varlen`` and ``VarlenCollection``, on one process and on 2-4 gloo ranks, with
``dataset_size=`` and with image ids, equal to one process's torchmetrics value and to pycocotools' ``COCOeval`` on
the same images written as COCO json. Skipped where torchvision or pycocotools cannot be imported (``nox -s newest``
runs them, and fails if they would be skipped).
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from _detection import STATS, N, batch, cocoeval, images, iou_reference, require_detection
from _dist import DistPool
from _sampler import repeat_factor_indices, sampler_indices

require_detection()

from torchmetrics.detection import IntersectionOverUnion, MeanAveragePrecision  # noqa: E402

from torchmetrics_varlen import Varlen, VarlenCollection  # noqa: E402

TENSORS = ("precision", "recall", "scores")  # extended_summary's arrays of COCOeval


def _map(**kwargs: Any) -> MeanAveragePrecision:
    return MeanAveragePrecision(class_metrics=True, extended_summary=True, **kwargs)


@functools.cache
def one_process(box_format: str = "xyxy") -> dict[str, Any]:
    """The value of torchmetrics on one process: every image once, in id order, in one update."""
    metric = _map(box_format=box_format)
    metric.update(*batch(images(), list(range(N)), box_format))
    return metric.compute()  # type: ignore[no-any-return]


@functools.cache
def coco() -> dict[str, Any]:
    return cocoeval(images(), list(range(N)), class_metrics=True)


def _check_against_references(value: dict[str, Any], bitwise: bool) -> None:
    """COCOeval's numbers (1e-6: torchmetrics returns float32) and arrays; with ``bitwise``, every value of one
    process's torchmetrics, bit for bit (``ious`` included: image positions are id order).
    """
    ref = coco()
    for key in STATS:
        assert float(value[key]) == pytest.approx(ref[key], abs=1e-6), key
    for key in ("map_per_class", "mar_100_per_class"):
        assert value[key].tolist() == pytest.approx(ref[key], abs=1e-6), key
    assert value["classes"].tolist() == ref["classes"]
    for key in TENSORS:
        assert torch.equal(value[key].double(), ref[key]), key
    if bitwise:
        expected = one_process()
        assert value.keys() == expected.keys()
        for key, want in expected.items():
            got = value[key]
            if isinstance(want, dict):
                assert got.keys() == want.keys()
                assert all(_same(got[k], want[k]) for k in want), key
            else:
                assert got.dtype == want.dtype, key
                assert torch.equal(got, want), key


def _same(a: Any, b: Any) -> bool:
    """Bit for bit (COCOeval's ``ious`` holds ``[]`` where an image has no box of a class)."""
    if isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return bool(a == b)


def _ids(indices: list[int]) -> torch.Tensor:
    return torch.tensor(indices, dtype=torch.int64)


@pytest.mark.parametrize("box_format", ["xyxy", "xywh", "cxcywh"])
def test_map_with_image_ids_is_cocoeval(box_format: str) -> None:
    """Every image seen twice (batches of 3 then 2, shuffled), through update and forward: counted once, in id order;
    the value is COCOeval's and, bit for bit, one process's torchmetrics value (in any box format).
    """
    data = images()
    order = torch.randperm(N, generator=torch.Generator().manual_seed(1)).tolist()
    metric = Varlen(_map(box_format=box_format), dataset_size=N)
    stream = [order[i : i + 3] for i in range(0, N, 3)] + [order[::-1][i : i + 2] for i in range(0, N, 2)]
    for step, part in enumerate(stream):
        preds, target = batch(data, part, box_format)
        if step == 1:
            metric(preds, target, sample_ids=_ids(part))  # forward: the batch's own value too
        else:
            metric.update(preds, target, sample_ids=_ids(part))
    value = metric.compute()
    _check_against_references(value, bitwise=True)
    assert all(torch.equal(value[k], one_process(box_format)[k]) for k in STATS)
    report = metric.sync_report
    assert report is not None
    assert (report.kept, report.duplicates_dropped, report.missing) == (N, N, 0)


def test_map_with_dataset_size_drops_the_padding() -> None:
    """One process dealt the data set and then 3 images past it: those are dropped before MAP sees them, and since
    one process never pads (88ed689: ``len(loader)`` for ``len(dataset)``, or a second pass) compute() raises naming
    them; after reset() the data set alone is COCOeval's value. Padding dropped on real ranks:
    test_map_and_iou_on_ranks (``"padded"``, ``"size"``).
    """
    data = images()
    metric = Varlen(_map(), dataset_size=N)
    stream = list(range(N)) + [0, 1, 2]
    for start in range(0, len(stream), 4):
        metric.update(*batch(data, stream[start : start + 4]))
    assert len(metric.metric.detection_box) == N
    with pytest.raises(ValueError, match="3 rows were dropped as sampler padding"):
        metric.compute()
    metric.reset()
    for start in range(0, N, 4):
        metric.update(*batch(data, list(range(start, min(start + 4, N)))))
    _check_against_references(metric.compute(), bitwise=True)
    assert len(metric.metric.detection_box) == N


def test_intersection_over_union_with_image_ids() -> None:
    data = images()
    metric = Varlen(IntersectionOverUnion())
    for part in ([4, 0, 9, 3], list(range(N)), [8, 5]):
        metric.update(*batch(data, part), sample_ids=_ids(part))
    value = metric.compute()
    plain = IntersectionOverUnion()
    plain.update(*batch(data, list(range(N))))
    expected = plain.compute()
    assert value.keys() == expected.keys()
    assert all(torch.equal(value[k], expected[k]) for k in expected)
    assert float(value["iou"]) == pytest.approx(iou_reference(data, list(range(N))), abs=1e-6)


def test_segmentation_masks_stay_refused() -> None:
    """``iou_type="segm"`` keeps RLE-encoded masks (tuples of Python objects): refused, rolled back, the message says
    what to use.
    """
    masks = torch.zeros(2, 8, 8, dtype=torch.bool)
    masks[:, 2:5, 2:6] = True
    preds = [{"masks": masks, "scores": torch.tensor([0.9, 0.4]), "labels": torch.tensor([0, 1])}]
    target = [{"masks": masks, "labels": torch.tensor([0, 1])}]
    metric = Varlen(MeanAveragePrecision(iou_type="segm"))
    with pytest.raises(
        TypeError, match=r"Varlen moves tensors only.*Varlen\(MeanAveragePrecision\(iou_type='bbox'\)\)"
    ):
        metric.update(preds, target, sample_ids=_ids([0]))
    assert metric.metric.detection_mask == []
    assert metric.metric.detection_labels == []


# ----------------------------------------------------------------------------- spawned ranks


def _dealt(rank: int, world: int, sampler: str) -> list[int]:
    if sampler == "padded":  # DistributedSampler(shuffle=True, drop_last=False): padded with repeated images
        return sampler_indices(N, world, rank, shuffle=True, drop_last=False, seed=3)
    if sampler == "repeat":  # repeat-factor sampling: images of class 2 twice, no padding, copies on any rank
        data = images()
        return repeat_factor_indices(N, world, rank, lambda i: 1 + bool((data[i][1]["labels"] == 2).any()))[0]
    return list(range(N)) if rank == world - 1 else []  # "empty": every image on the last rank


def case_detection(rank: int, world: int, sampler: str, dedup: str) -> dict[str, Any]:
    """MAP alone (``Varlen``) and MAP + IoU (``VarlenCollection``), fed the images ``sampler`` deals in batches of 2,
    deduplicated by ``dedup``: ``"size"`` (``dataset_size=``), ``"ids"`` (image ids) or ``"none"``.
    """
    data = images()
    dealt = _dealt(rank, world, sampler)
    size = N if dedup == "size" else None
    alone = Varlen(_map(), dataset_size=size, sync_timeout=30)
    together = VarlenCollection({"map": _map(), "iou": IntersectionOverUnion()}, dataset_size=size, sync_timeout=30)
    for start in range(0, len(dealt), 2):
        part = dealt[start : start + 2]
        kwargs = {"sample_ids": _ids(part)} if dedup == "ids" else {}
        alone.update(*batch(data, part), **kwargs)
        together.update(*batch(data, part), **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an empty rank's "compute before update"
        out = {"alone": alone.compute(), "together": together.compute()}
    assert alone.sync_report is not None
    out["kept"] = alone.sync_report.kept
    return out


CASES = [
    (2, "padded", "size"),
    (2, "padded", "ids"),
    (3, "repeat", "ids"),
    (3, "empty", "none"),
    (4, "padded", "size"),
    (4, "padded", "ids"),
    (4, "empty", "ids"),
]


@pytest.mark.distributed
@pytest.mark.parametrize(("world", "sampler", "dedup"), CASES)
def test_map_and_iou_on_ranks(pool: DistPool, world: int, sampler: str, dedup: str) -> None:
    """Every rank: COCOeval's values; with ids, one process's torchmetrics values bit for bit (the images in id
    order, whatever W); the collection's MAP the same as the lone metric's, its IoU the hand-computed one.
    """
    iou = iou_reference(images(), list(range(N)))
    for got in pool.values(case_detection, world, sampler, dedup, timeout=240):
        _check_against_references(got["alone"], bitwise=dedup == "ids")
        together = dict(got["together"])  # MetricCollection merges the members' dicts (no key clashes here)
        assert float(together.pop("iou")) == pytest.approx(iou, abs=1e-6)
        _check_against_references(together, bitwise=dedup == "ids")
        assert got["kept"] == N


def case_example(rank: int, world: int) -> dict[str, Any]:
    """examples/detection_ddp.py's evaluation on this rank (its torchrun entry point minus the process group)."""
    path = Path(__file__).resolve().parent.parent / "examples" / "detection_ddp.py"
    spec = importlib.util.spec_from_file_location("example_detection_ddp", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.evaluate(21, 2)  # type: ignore[no-any-return]


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_the_detection_example(pool: DistPool, world: int) -> None:
    """The example's numbers (the table of docs/pages/wrapper.md): both Varlen values are one process's, on every
    rank; torchmetrics' own sync counts the sampler's repeated images twice.
    """
    for record in pool.values(case_example, world, timeout=240):
        assert record["varlen_dataset_size"] == record["varlen_ids"] == record["truth"]
        assert record["torchmetrics"] != record["truth"]
        assert record["kept"] == 21
        assert record["duplicates_dropped"] == -21 % world
