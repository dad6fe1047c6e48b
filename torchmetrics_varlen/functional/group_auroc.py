"""Group AUC: the AUROC of every group (user, product, query) and their weighted mean, exact and vectorised."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from torchmetrics_varlen.functional._ranking import as_output
from torchmetrics_varlen.functional._validation import (
    Normalization,
    Weighting,
    check_inputs,
    format_inputs,
    validate_ranking_args,
    validate_sample_ids,
    validate_weighting,
)


class GroupAUROC(NamedTuple):
    """Per-group detail of a group AUROC.

    Attributes:
        value: The weighted mean over groups that contain both classes (float32 scalar; NaN if there is none).
        groups: The distinct group labels, sorted.
        per_group: AUROC of each group (float32; NaN for groups with one class only).
        num_skipped: How many groups were left out because they contain one class only.

    Example:
        >>> from torch import tensor
        >>> detail = group_auroc(tensor([0.9, 0.2, 0.6, 0.5]), tensor([1, 0, 1, 1]), tensor([7, 7, 7, 3]),
        ...                      return_per_group=True)
        >>> detail.groups, detail.per_group, detail.num_skipped
        (tensor([3, 7]), tensor([nan, 1.]), tensor(1))
    """

    value: Tensor
    groups: Tensor
    per_group: Tensor
    num_skipped: Tensor


def _per_group(preds: Tensor, target: Tensor, groups: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(labels, twice_area, positives, negatives)`` per distinct group, from one pass over the sorted samples."""
    labels, inverse = torch.unique(groups, return_inverse=True)
    n_groups = labels.numel()
    order = torch.sort(preds, descending=True, stable=True).indices
    order = order[torch.sort(inverse[order], stable=True).indices]  # by group, then by score descending
    score, grp, pos = preds[order], inverse[order], target[order].to(torch.int64)
    n = score.numel()
    cum = torch.cumsum(pos, 0)
    first = torch.ones(n, dtype=torch.bool, device=preds.device)
    first[1:] = grp[1:] != grp[:-1]
    starts = torch.nonzero(first).flatten()  # first index of each group, in group order
    pos_before = torch.where(starts > 0, cum[(starts - 1).clamp(min=0)], torch.zeros_like(starts))
    # Last index of each run of equal (group, score): a step of that group's ROC curve.
    run_end = torch.ones(n, dtype=torch.bool, device=preds.device)
    run_end[:-1] = (grp[1:] != grp[:-1]) | (score[1:] != score[:-1])
    ends = torch.nonzero(run_end).flatten()
    g = grp[ends]
    tps = cum[ends] - pos_before[g]
    fps = ends + 1 - starts[g] - tps
    new_group = torch.ones_like(g, dtype=torch.bool)
    new_group[1:] = g[1:] != g[:-1]
    prev_tps = torch.where(new_group, torch.zeros_like(tps), torch.roll(tps, 1))
    prev_fps = torch.where(new_group, torch.zeros_like(fps), torch.roll(fps, 1))
    twice_area = torch.zeros(n_groups, dtype=torch.int64, device=preds.device)
    twice_area.scatter_add_(0, g, (fps - prev_fps) * (tps + prev_tps))
    positives = torch.zeros(n_groups, dtype=torch.int64, device=preds.device).scatter_add_(0, grp, pos)
    negatives = torch.bincount(grp, minlength=n_groups) - positives
    return labels, twice_area, positives, negatives


def _compute(preds: Tensor, target: Tensor, groups: Tensor, weighting: Weighting) -> GroupAUROC:
    labels, twice_area, positives, negatives = _per_group(preds, target, groups)
    valid = (positives > 0) & (negatives > 0)
    denom = 2.0 * positives.double() * negatives.double()
    per_group = torch.where(
        valid, twice_area.double() / torch.where(valid, denom, torch.ones_like(denom)), float("nan")
    )
    weights = (positives + negatives).double() if weighting == "samples" else torch.ones_like(denom)
    weights = torch.where(valid, weights, torch.zeros_like(weights))
    total = weights.sum()
    value = (per_group.nan_to_num() * weights).sum() / total if bool(total > 0) else total.new_tensor(float("nan"))
    return GroupAUROC(as_output(value), labels, as_output(per_group), (~valid).sum())


def group_auroc(
    preds: Tensor,
    target: Tensor,
    groups: Tensor,
    *,
    weighting: Weighting = "samples",
    ignore_index: int | None = None,
    return_per_group: bool = False,
    validate_args: bool = True,
    normalization: Normalization = "sigmoid",
) -> Tensor | GroupAUROC:
    r"""Group AUC (GAUC): the exact AUROC within every group, averaged over the groups that have both classes.

    Recommender systems rank items per user (or per query, per product): a global AUROC mixes users whose score
    scales differ. ``groups`` gives each sample's group (any integers); each group's AUROC is exact (integer
    counts, ties as one step) and the mean is weighted by the group's number of samples (``"samples"``, the
    impression-weighted GAUC) or uniform (``"uniform"``). Groups with only positives or only negatives have no
    AUROC and are skipped. Logits are normalised per call as in :func:`~torchmetrics_varlen.functional.auroc`.

    Args:
        preds: Scores, any shape (flattened), floating point.
        target: Labels in {0, 1}, same shape.
        groups: Integer group of each sample: the shape of ``preds``, or one per row (``(preds.shape[0],)``).
        weighting: ``"samples"`` or ``"uniform"``.
        ignore_index: Target value whose positions are ignored.
        return_per_group: Return a :class:`GroupAUROC` with the per-group values instead of the mean.
        validate_args: Check arguments and inputs.
        normalization: ``"sigmoid"`` (default), ``"softmax"`` (only for scores in [0, 1]) or ``None``.

    Returns:
        The weighted mean as a float32 scalar (NaN if no group has both classes), or a :class:`GroupAUROC`.

    Raises:
        ValueError: On invalid arguments, mismatched shapes, non-finite scores, labels out of range or bad groups.

    Example:
        >>> from torch import tensor
        >>> preds = tensor([0.9, 0.2, 0.6, 0.7, 0.1, 0.4])
        >>> target = tensor([1, 0, 1, 0, 0, 1])
        >>> users = tensor([7, 7, 7, 3, 3, 3])
        >>> group_auroc(preds, target, users)  # user 7: 1.0, user 3: 0.5
        tensor(0.7500)
    """
    if validate_args:
        validate_weighting(weighting)
        validate_ranking_args(ignore_index=ignore_index, normalization=normalization)
        check_inputs(preds, target, "binary", None, None, ignore_index, normalization)
        validate_sample_ids(groups, preds.shape, name="groups", non_negative=False)
    if groups.shape != preds.shape:
        groups = groups.repeat_interleave(preds[0].numel() if preds.ndim else 1)
    p, t, kept = format_inputs(preds, target, "binary", ignore_index, normalization)
    g = groups.reshape(-1).to(torch.int64)
    result = _compute(p, t, g if kept is None else g[kept], weighting)
    return result if return_per_group else result.value
