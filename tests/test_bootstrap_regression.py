"""Refactor-regression pins of the Poisson bootstrap's resamples.

The expected values below were produced by the implementation that lived in
``torchmetrics_varlen/classification/uncertainty.py`` (the int64 torch hash and a float64 cumulative sum per
resample) BEFORE it moved to :mod:`torchmetrics_varlen.functional.bootstrap` and was made faster; they are not a
reference of correctness (that is ``tests/test_uncertainty_classes.py``: explicit resamples and scikit-learn) but pin
that the refactor changed no bit: the multiplicities, and every resampled AUROC / AP, with ties, negative and extreme
keys, negative and oversized seeds, several blocks of resamples, float32 and float64 scores.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from torchmetrics_varlen.functional import bootstrap
from torchmetrics_varlen.functional.bootstrap import _resampled, poisson_multiplicities


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


def _tied(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = (torch.rand(n, generator=gen, dtype=torch.float64) + 0.4 * target).clamp(max=1).round(decimals=2)
    keys = torch.randperm(n, generator=gen) * 7 - 3 * n
    keys[0] = (1 << 63) - 1
    keys[1] = -(1 << 63)
    return preds, target, keys


_KEYS = torch.cat([torch.arange(-50, 50), torch.tensor([(1 << 63) - 1, -(1 << 63), 1 << 40])])


@pytest.mark.parametrize(
    ("seed", "resample", "digest", "head"),
    [
        (0, 0, "ffe1b762a3308bfb", [0, 1, 3, 0, 0, 2, 2, 0, 1, 2, 1, 0]),
        (0, 999, "00298e74ff36a1de", [2, 0, 1, 1, 0, 2, 1, 1, 1, 2, 0, 1]),
        (9, 1, "e8d1173081b70a0e", [1, 1, 2, 1, 2, 2, 0, 0, 1, 1, 2, 0]),
        (-4, 999, "0d7d34115b8bb781", [0, 2, 1, 0, 0, 0, 4, 1, 0, 0, 0, 3]),
        ((1 << 64) + 5, 1, "d4a6cf848f232f31", [0, 2, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0]),
    ],
)
def test_multiplicities_are_pinned(seed: int, resample: int, digest: str, head: list[int]) -> None:
    m = poisson_multiplicities(_KEYS, seed, resample)
    assert m.dtype == torch.float64
    assert m[:12].long().tolist() == head
    assert _digest(m) == digest


@pytest.mark.parametrize(
    ("n", "num_bootstraps", "seed", "dtype", "statistic", "digest", "head"),
    [
        (500, 37, 9, torch.float64, "auroc", "aa37b8e6f69f847a", ["0x1.a16fd8280756fp-1", "0x1.8cff87c1fc0c6p-1"]),
        (500, 37, 9, torch.float64, "ap", "4d1ca65e79013e05", ["0x1.ba4520504ee09p-1", "0x1.9c3a142a1171cp-1"]),
        (200_000, 45, -4, torch.float64, "auroc", "bf90e87aa1c62177", ["0x1.a3780d3332a9cp-1"]),
        (200_000, 45, -4, torch.float64, "ap", "55f56c5958be36f9", ["0x1.aa4ecdc3d2270p-1"]),
        (3000, 11, 0, torch.float32, "auroc", "1d23d483fad75025", ["0x1.9d810d28715a4p-1"]),
        (3000, 11, 0, torch.float32, "ap", "8c9b66b0c57822c3", ["0x1.a61212e8e3873p-1"]),
    ],
)
def test_resampled_statistics_with_ties_are_pinned(
    n: int, num_bootstraps: int, seed: int, dtype: torch.dtype, statistic: str, digest: str, head: list[str]
) -> None:
    preds, target, keys = _tied(n, seed + 1000)
    out = _resampled(preds.to(dtype), target, keys, statistic, seed, num_bootstraps)
    assert [float(x).hex() for x in out[: len(head)].tolist()] == head
    assert not bool(torch.isnan(out).any())
    assert _digest(out) == digest


@pytest.mark.parametrize(
    ("statistic", "digest", "head"),
    [
        ("auroc", "037d45188c21d5c1", ["0x1.6dcbdf0e76e03p-1", "0x1.6be5069029e96p-1", "0x1.6dd3815034ab5p-1"]),
        ("ap", "b4d807f21038a34d", ["0x1.7b1e73306acb9p-1", "0x1.7ace810020a02p-1", "0x1.7b85e8e97f21dp-1"]),
    ],
)
def test_resampled_statistics_without_ties_are_pinned(statistic: str, digest: str, head: list[str]) -> None:
    gen = torch.Generator().manual_seed(77)
    target = torch.randint(0, 2, (50_000,), generator=gen)
    preds = torch.rand(50_000, generator=gen) * 0.8 + 0.2 * target
    out = _resampled(preds, target, torch.arange(50_000), statistic, 123, 90)  # two blocks of resamples
    assert [float(x).hex() for x in out[:3].tolist()] == head
    assert _digest(out) == digest


def test_undefined_resamples_are_nan_as_before() -> None:
    preds = torch.rand(10, generator=torch.Generator().manual_seed(3))
    assert bool(torch.isnan(_resampled(preds, torch.ones(10, dtype=torch.long), torch.arange(10), "auroc", 0, 5)).all())
    out = _resampled(torch.tensor([0.5, 0.2]), torch.tensor([1, 0]), torch.tensor([3, 4]), "ap", 1, 6)
    assert [float(x).hex() for x in out.tolist()] == ["nan", "nan"] + ["0x1.0000000000000p+0"] * 4


def test_the_float_path_of_a_huge_auroc_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past 2**53 the AUROC's area is summed in float64 as before; forced here on the pinned data."""
    monkeypatch.setattr(bootstrap, "_EXACT_AREA", 0)
    preds, target, keys = _tied(500, 1009)
    out = _resampled(preds, target, keys, "auroc", 9, 37)
    assert _digest(out) == "aa37b8e6f69f847a"
