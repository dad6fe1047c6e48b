"""Deterministic test data and the ways of splitting it over ranks."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def scores_and_labels(n: int, seed: int, ties: bool = False) -> tuple[Tensor, Tensor]:
    """``n`` float64 scores that float16, bfloat16 and float32 represent exactly, and correlated 0/1 labels."""
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    levels = 8 if ties else 128  # k / levels with levels <= 128 is exact in bfloat16 (8-bit significand)
    noise = torch.randint(0, levels + 1, (n,), generator=gen).double() / levels
    preds = torch.where(target.bool(), (noise + 0.25).clamp(max=1.0), noise * 0.9)
    preds = torch.round(preds * levels) / levels
    return preds, target


def split_lengths(n: int, world: int, pattern: str) -> list[int]:
    """How many samples each rank gets: ``even``, ``uneven``, ``first_empty``, ``one_rank`` or ``alternate_empty``."""
    if pattern == "one_rank":
        return [n if r == world - 1 else 0 for r in range(world)]
    if pattern == "first_empty":
        rest = world - 1 or 1
        base = [0] + [n // rest + (1 if r < n % rest else 0) for r in range(world - 1)]
        return base if world > 1 else [n]
    if pattern == "alternate_empty":
        full = [r for r in range(world) if r % 2 == 1] or [0]
        return [n // len(full) + (1 if full.index(r) < n % len(full) else 0) if r in full else 0 for r in range(world)]
    if pattern == "uneven":
        weights = [r + 1 for r in range(world)]
        cuts = [n * sum(weights[: r + 1]) // sum(weights) for r in range(world)]
        return [cuts[0]] + [cuts[r] - cuts[r - 1] for r in range(1, world)]
    return [n // world + (1 if r < n % world else 0) for r in range(world)]


def rank_slice(n: int, world: int, rank: int, pattern: str) -> slice:
    """The contiguous slice of the data set that ``rank`` holds under ``pattern``."""
    lengths = split_lengths(n, world, pattern)
    start = sum(lengths[:rank])
    return slice(start, start + lengths[rank])


def flat_tensors(value: Any) -> list[Tensor]:
    """Every tensor of a (nested) output, in a fixed order: tuples and lists in order, dicts by key."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for k in sorted(value) for t in flat_tensors(value[k])]
    return [t for v in value for t in flat_tensors(v)]
