"""A detection-like torchmetrics metric without torchvision: list states of one element per image (its boxes, scores
and labels as tensors of their own), as ``MeanAveragePrecision`` keeps them, and a synthetic data set for it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

Image = tuple[dict[str, Tensor], dict[str, Tensor]]  # (prediction, ground truth) of one image


class PerImage(Metric):
    """Keeps every image's detections and ground-truth labels; ``compute`` returns them, concatenated, with the number
    of boxes of each image (so a test sees the images, their order and their contents).

    ``detection_box`` / ``detection_scores`` / ``detection_labels`` are ``None``-reduced lists (as in
    ``MeanAveragePrecision``), ``groundtruth_labels`` a ``"cat"``-reduced list of per-image tensors, and
    ``detection_mask`` a list that stays empty (boxes only).
    """

    full_state_update = False
    detection_box: list[Tensor]
    detection_scores: list[Tensor]
    detection_labels: list[Tensor]
    groundtruth_labels: list[Tensor]
    detection_mask: list[Tensor]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name in ("detection_box", "detection_scores", "detection_labels", "detection_mask"):
            self.add_state(name, default=[], dist_reduce_fx=None)
        self.add_state("groundtruth_labels", default=[], dist_reduce_fx="cat")

    def update(self, preds: list[dict[str, Tensor]], target: list[dict[str, Tensor]]) -> None:
        """One element per image in every state but the mask's."""
        for item in preds:
            self.detection_box.append(item["boxes"])
            self.detection_scores.append(item["scores"])
            self.detection_labels.append(item["labels"])
        for item in target:
            self.groundtruth_labels.append(item["labels"])

    def compute(self) -> dict[str, Tensor]:
        """The states, concatenated, and each image's number of boxes."""
        return {
            "boxes_per_image": torch.tensor([b.shape[0] for b in self.detection_box], dtype=torch.int64),
            "boxes": dim_zero_cat(self.detection_box) if self.detection_box else torch.zeros(0, 4),
            "scores": dim_zero_cat(self.detection_scores) if self.detection_scores else torch.zeros(0),
            "labels": dim_zero_cat(self.detection_labels) if self.detection_labels else torch.zeros(0),
            "groundtruth_labels": dim_zero_cat(self.groundtruth_labels)
            if isinstance(self.groundtruth_labels, Tensor) or self.groundtruth_labels
            else torch.zeros(0),
        }


def image(i: int, noise: int = 0) -> Image:
    """Image ``i``: ``i % 4`` detections (image 0, 4, 8 ... none), ``i % 3`` ground-truth boxes (0, 3, 6 ... none);
    values on a 1/1024 grid (exact in float32), scores distinct across images; ``noise`` adds ``noise / 2**20`` to its
    scores (a copy the model scored slightly differently).
    """
    gen = torch.Generator().manual_seed(1000 + i)
    k, g = i % 4, i % 3
    corner = torch.randint(0, 512, (k, 2), generator=gen).float()
    size = torch.randint(8, 256, (k, 2), generator=gen).float()
    scores = (torch.arange(k, dtype=torch.float32) + 4 * i + 1) / 1024 + noise / 2**20
    pred = {
        "boxes": torch.cat([corner, corner + size], 1),
        "scores": scores,
        "labels": torch.randint(0, 3, (k,), generator=gen),
    }
    truth = {"boxes": torch.zeros(g, 4), "labels": torch.randint(0, 3, (g,), generator=gen)}
    return pred, truth


def batch(indices: list[int], noise: list[int] | None = None) -> tuple[list[dict[str, Tensor]], list[Any]]:
    """``update``'s ``(preds, target)`` for the images ``indices`` (``noise`` per image, see :func:`image`)."""
    pairs = [image(i, 0 if noise is None else n) for i, n in zip(indices, noise or [0] * len(indices), strict=True)]
    return [p for p, _ in pairs], [t for _, t in pairs]


def reference(indices: list[int]) -> dict[str, Tensor]:
    """:class:`PerImage` on one process, the distinct images of ``indices`` in id order, in one update."""
    metric = PerImage()
    metric.update(*batch(sorted(set(indices))))
    return metric.compute()


def same(a: dict[str, Tensor], b: dict[str, Tensor]) -> bool:
    """Bit for bit the same values (and dtypes, shapes)."""
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
