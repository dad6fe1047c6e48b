"""What a real DistributedSampler deals to each rank, and the scikit-learn reference on what was evaluated."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from torch.utils.data import DistributedSampler


def sampler_indices(n: int, world: int, rank: int, shuffle: bool, drop_last: bool, seed: int = 0) -> list[int]:
    """The indices ``DistributedSampler`` gives ``rank`` (no process group needed: rank and world are explicit)."""
    sampler = DistributedSampler(
        range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
    return list(sampler)


def repeat_factor_indices(
    n: int, world: int, rank: int, factor: Callable[[int], int], seed: int = 0
) -> tuple[list[int], list[int]]:
    """What a repeat-factor sampler (detection's sampler for rare classes) deals ``rank``: every index ``i`` repeated
    ``factor(i)`` times, the whole list shuffled, then dealt round robin (no padding). Also, per index dealt, which
    copy of it this is in the whole list (0 for the first), the same at every world size.
    """
    repeated = [i for i in range(n) for _ in range(factor(i))]
    order = torch.randperm(len(repeated), generator=torch.Generator().manual_seed(seed)).tolist()
    dealt = [repeated[j] for j in order]
    copy, seen = [], dict.fromkeys(range(n), 0)
    for i in dealt:
        copy.append(seen[i])
        seen[i] += 1
    return dealt[rank::world], copy[rank::world]


def evaluated_indices(n: int, world: int, shuffle: bool, drop_last: bool, seed: int = 0) -> list[int]:
    """The distinct indices all ranks together see (all of them unless ``drop_last`` cut the tail)."""
    seen: set[int] = set()
    for rank in range(world):
        seen.update(sampler_indices(n, world, rank, shuffle, drop_last, seed))
    return sorted(seen)


def reference(name: str, preds: torch.Tensor, target: torch.Tensor) -> float:
    """scikit-learn on the given samples; with one class only, torchmetrics' convention (AUROC 0, AP 0 or 1)."""
    if target.numel() == 0 or target.unique().numel() < 2:
        if name == "auroc" or not bool(target.any()):
            return 0.0
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "auroc":
            return float(roc_auc_score(target.numpy(), preds.numpy()))
        return float(average_precision_score(target.numpy(), preds.numpy()))
