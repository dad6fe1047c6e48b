"""What the detection tests share: the skip (or, under ``VARLEN_REQUIRE_DETECTION=1``, the failure) when torchvision
or pycocotools cannot be imported, a synthetic detection data set, and pycocotools' ``COCOeval`` on it as COCO json.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import tempfile
from typing import Any

import pytest
import torch
from torch import Tensor

REQUIRE = "VARLEN_REQUIRE_DETECTION"  # "1": a missing detection stack fails the tests instead of skipping them


def _missing() -> str | None:
    """Why the detection stack cannot be used here (each failing import), or ``None``."""
    problems = []
    for name in ("torchvision", "pycocotools.cocoeval", "torchmetrics.detection.mean_ap"):
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - a torchvision built for another torch raises more than ImportError
            problems.append(f"{name}: {type(err).__name__}: {err}")
    if not problems:
        try:
            from torchmetrics.detection import IntersectionOverUnion, MeanAveragePrecision  # noqa: F401
        except ImportError as err:
            problems.append(f"torchmetrics.detection: {err}")
    return "; ".join(problems) or None


def require_detection() -> None:
    """Skip the calling test module when torchvision or pycocotools is not importable (the default environment's torch
    2.13 CPU build has no matching torchvision); fail it instead when ``VARLEN_REQUIRE_DETECTION=1`` (``nox -s
    newest``, which installs them, must run these tests, never skip them).
    """
    reason = _missing()
    if reason is None:
        return
    text = (
        f"the detection tests need torchvision and pycocotools, which cannot be imported here ({reason}); `nox -s"
        " newest` installs torch 2.14.1, torchvision 0.29.1 and pycocotools and runs them"
    )
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{REQUIRE}=1, but {text}", pytrace=False)
    pytest.skip(text, allow_module_level=True)


N = 21  # images; odd, so that DistributedSampler pads at W = 2, 3, 4
CLASSES = 3


def images(n: int = N, seed: int = 0) -> list[tuple[dict[str, Tensor], dict[str, Tensor]]]:
    """``n`` images as ``(prediction, ground truth)`` in torchmetrics' ``xyxy`` format, coordinates on a 1/4 grid
    (exact in float32 and in json): 0 to 4 objects of 3 classes and all three COCO area ranges, detections that find
    most of them (jittered, sometimes with the wrong class) plus false positives, scores distinct across the data set.
    Image 3 has no detection, image 5 no ground truth, image 8 neither; image 7 holds a crowd region.
    """
    gen = torch.Generator().manual_seed(seed)
    out = []
    scores = (torch.randperm(n * 8, generator=gen).float() + 1) / (n * 8 + 1)
    for i in range(n):
        g = 0 if i in (5, 8) else int(torch.randint(1, 5, (1,), generator=gen))
        side = torch.tensor([12.0, 48.0, 160.0])[torch.randint(0, 3, (g,), generator=gen)]
        size = side[:, None] * (0.75 + torch.randint(0, 3, (g, 2), generator=gen) / 4)
        corner = torch.randint(0, 400, (g, 2), generator=gen).float()
        truth = {
            "boxes": torch.cat([corner, corner + size], 1),
            "labels": torch.randint(0, CLASSES, (g,), generator=gen),
        }
        if i == 7:
            truth["iscrowd"] = torch.tensor([1] + [0] * (g - 1))
        found = torch.rand(g, generator=gen) < 0.8
        jitter = torch.randint(-8, 9, (g, 4), generator=gen) / 4
        boxes = (truth["boxes"] + jitter * size.repeat(1, 2) / 16)[found]
        labels = truth["labels"].clone()
        wrong = torch.rand(g, generator=gen) < 0.15
        labels[wrong] = (labels[wrong] + 1) % CLASSES
        labels = labels[found]
        extra = 0 if i in (3, 8) else int(torch.randint(0, 3, (1,), generator=gen))
        corner = torch.randint(0, 400, (extra, 2), generator=gen).float()
        false = torch.cat([corner, corner + 40 + torch.randint(0, 40, (extra, 2), generator=gen)], 1)
        boxes = torch.cat([boxes, false])
        labels = torch.cat([labels, torch.randint(0, CLASSES, (extra,), generator=gen)])
        if i == 3:
            boxes, labels = boxes[:0], labels[:0]
        k = boxes.shape[0]
        pred = {"boxes": (boxes * 4).round() / 4, "scores": scores[8 * i : 8 * i + k], "labels": labels}
        out.append((pred, truth))
    return out


def in_format(boxes: Tensor, box_format: str) -> Tensor:
    """``xyxy`` boxes in torchmetrics' ``box_format`` (exact on the 1/4 grid)."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    if box_format == "xywh":
        return torch.stack([x1, y1, x2 - x1, y2 - y1], -1)
    if box_format == "cxcywh":
        return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], -1)
    return boxes


def batch(data: list[Any], indices: list[int], box_format: str = "xyxy") -> tuple[list[Any], list[Any]]:
    """``update``'s ``(preds, target)`` for the images ``indices``."""
    preds = [{**data[i][0], "boxes": in_format(data[i][0]["boxes"], box_format)} for i in indices]
    target = [{**data[i][1], "boxes": in_format(data[i][1]["boxes"], box_format)} for i in indices]
    return preds, target


STATS = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large")
STATS += ("mar_1", "mar_10", "mar_100", "mar_small", "mar_medium", "mar_large")


def cocoeval(data: list[Any], image_ids: list[int], class_metrics: bool = False) -> dict[str, Any]:
    """The reference: pycocotools' ``COCOeval`` (bbox) on the images ``image_ids``, written as COCO json files
    (ground truth and results), as a COCO user would evaluate them: the twelve summary statistics, ``precision`` /
    ``recall`` / ``scores`` of its ``eval``, and with ``class_metrics`` each class's AP and AR@100.
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    labels = {int(c) for i in image_ids for part in data[i] for c in part["labels"].tolist()}
    annotations, results = [], []
    for i in image_ids:
        pred, truth = data[i]
        crowd = truth.get("iscrowd", torch.zeros_like(truth["labels"]))
        for box, label, is_crowd in zip(truth["boxes"].tolist(), truth["labels"].tolist(), crowd.tolist(), strict=True):
            w, h = box[2] - box[0], box[3] - box[1]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": i,
                    "category_id": label,
                    "bbox": [box[0], box[1], w, h],
                    "area": w * h,
                    "iscrowd": is_crowd,
                }
            )
        for box, label, score in zip(
            pred["boxes"].tolist(), pred["labels"].tolist(), pred["scores"].tolist(), strict=True
        ):
            w, h = box[2] - box[0], box[3] - box[1]
            results.append({"image_id": i, "category_id": label, "bbox": [box[0], box[1], w, h], "score": score})
    ground_truth = {
        "images": [{"id": i} for i in image_ids],
        "categories": [{"id": c} for c in sorted(labels)],
        "annotations": annotations,
    }
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        gt_path, dt_path = os.path.join(folder, "instances.json"), os.path.join(folder, "results.json")
        with open(gt_path, "w") as f:
            json.dump(ground_truth, f)
        with open(dt_path, "w") as f:
            json.dump(results, f)
        coco = COCO(gt_path)
        detections = coco.loadRes(dt_path)
        evaluator = COCOeval(coco, detections, "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
        out: dict[str, Any] = dict(zip(STATS, (float(v) for v in evaluator.stats), strict=True))
        for key in ("precision", "recall", "scores"):
            out[key] = torch.tensor(evaluator.eval[key])
        if class_metrics:
            per_class = []
            for c in sorted(labels):
                evaluator = COCOeval(coco, detections, "bbox")
                evaluator.params.catIds = [c]
                evaluator.evaluate()
                evaluator.accumulate()
                evaluator.summarize()
                per_class.append((float(evaluator.stats[0]), float(evaluator.stats[8])))
            out["map_per_class"] = [m for m, _ in per_class]
            out["mar_100_per_class"] = [r for _, r in per_class]
            out["classes"] = sorted(labels)
    return out


def iou_reference(data: list[Any], image_ids: list[int]) -> float:
    """``IntersectionOverUnion``'s value (``respect_labels=True``) by hand: the mean IoU over every (detection,
    ground truth) pair of the same class in the same image, in float64; by torchmetrics' convention an image without
    detections counts an IoU of 0 for each of its ground-truth boxes, and one without ground truth for each detection.
    """
    total, count = 0.0, 0
    for i in image_ids:
        pred, truth = data[i]
        if not pred["boxes"].shape[0] or not truth["boxes"].shape[0]:
            count += max(pred["boxes"].shape[0], truth["boxes"].shape[0])
            continue
        for a, la in zip(pred["boxes"].double().tolist(), pred["labels"].tolist(), strict=True):
            for b, lb in zip(truth["boxes"].double().tolist(), truth["labels"].tolist(), strict=True):
                if la != lb:
                    continue
                w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
                h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
                inter = w * h
                union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
                total, count = total + inter / union, count + 1
    return total / count if count else 0.0
