"""DeLong's interval and paired test against the textbook O(P x N) structural components, written here."""

from __future__ import annotations

import math
import warnings
from statistics import NormalDist

import numpy as np
import pytest
import torch
from _float32 import expit, f32
from sklearn.metrics import roc_auc_score

from torchmetrics_varlen.functional import AUROCComparison, AUROCInterval, auroc, auroc_compare, auroc_interval

TOL = 1e-9


def _components(preds: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The textbook: psi over every (positive, negative) pair; V10 per positive, V01 per negative."""
    x, y = preds[target == 1], preds[target == 0]
    psi = (x[:, None] > y[None, :]).astype(np.float64) + 0.5 * (x[:, None] == y[None, :])
    return float(psi.mean()), psi.mean(axis=1), psi.mean(axis=0)


def _textbook(preds: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    """(AUROC, DeLong's variance) with sample variances (denominators m - 1, n - 1)."""
    a, v10, v01 = _components(preds, target)
    s10 = ((v10 - a) ** 2).sum() / (v10.size - 1)
    s01 = ((v01 - a) ** 2).sum() / (v01.size - 1)
    return a, s10 / v10.size + s01 / v01.size


def _textbook_paired(a: np.ndarray, b: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    """(difference, variance of the difference) = var_a + var_b - 2 cov_ab, each from the sample (co)variances."""
    auc_a, v10a, v01a = _components(a, target)
    auc_b, v10b, v01b = _components(b, target)
    m, n = v10a.size, v01a.size

    def cov(p: np.ndarray, q: np.ndarray, pa: float, qa: float, size: int) -> float:
        return float(((p - pa) * (q - qa)).sum() / (size - 1))

    var_a = cov(v10a, v10a, auc_a, auc_a, m) / m + cov(v01a, v01a, auc_a, auc_a, n) / n
    var_b = cov(v10b, v10b, auc_b, auc_b, m) / m + cov(v01b, v01b, auc_b, auc_b, n) / n
    cov_ab = cov(v10a, v10b, auc_a, auc_b, m) / m + cov(v01a, v01b, auc_a, auc_b, n) / n
    return auc_a - auc_b, var_a + var_b - 2 * cov_ab


def _data(n: int, seed: int, levels: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    target[0], target[1], target[2], target[3] = 0, 1, 0, 1
    a = torch.rand(n, generator=gen, dtype=torch.float64) * 0.8 + 0.2 * target
    b = 0.6 * a + 0.3 * torch.rand(n, generator=gen, dtype=torch.float64) + 0.1 * target  # correlated, in [0, 1]
    if levels is not None:
        a, b = torch.round(a * levels) / levels, torch.round(b * levels) / levels
    return a, b, target


CASES = [(4, 0, None), (9, 1, None), (200, 2, None), (1500, 3, 7), (800, 4, 1), (600, 5, 30)]


@pytest.mark.parametrize(("n", "seed", "levels"), CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_interval_equals_textbook(n: int, seed: int, levels: int | None, dtype: torch.dtype) -> None:
    preds, _, target = _data(n, seed, levels)
    preds = preds.to(dtype)
    ref_auc, ref_var = _textbook(preds.double().numpy(), target.numpy())
    for level in (0.95, 0.8):
        iv = auroc_interval(preds, target, level=level)
        assert isinstance(iv, AUROCInterval)
        assert torch.equal(iv.value, auroc(preds, target))  # the same sort: the same bits
        assert iv.value.dtype == torch.float32
        assert float(iv.value) == pytest.approx(f32(ref_auc), abs=TOL)
        assert float(iv.std) == pytest.approx(math.sqrt(ref_var), abs=TOL)
        z = NormalDist().inv_cdf((1 + level) / 2)
        assert float(iv.lower) == pytest.approx(float(iv.value) - z * math.sqrt(ref_var), abs=TOL)
        assert float(iv.upper) == pytest.approx(float(iv.value) + z * math.sqrt(ref_var), abs=TOL)
        assert float(iv.lower) == pytest.approx(ref_auc - z * math.sqrt(ref_var), abs=1e-7)


def test_interval_of_logits_and_ignore_index_follow_auroc() -> None:
    """Logits get auroc's sigmoid (float32 saturation ties included); ignored positions are left out."""
    logits = torch.tensor([17.0, 20.0, -3.0, 25.0, 0.5, -1.0, 2.0, 30.0])
    target = torch.tensor([1, 0, 0, 1, 1, 0, -1, 0])
    iv = auroc_interval(logits, target, ignore_index=-1)
    assert torch.equal(iv.value, auroc(logits, target, ignore_index=-1))
    keep = target != -1
    probs = expit(logits[keep]).double().numpy()
    _, ref_var = _textbook(probs, target[keep].numpy())
    assert float(iv.std) == pytest.approx(math.sqrt(ref_var), abs=TOL)


@pytest.mark.parametrize(("n", "seed", "levels"), CASES)
def test_compare_equals_textbook(n: int, seed: int, levels: int | None) -> None:
    a, b, target = _data(n, seed, levels)
    diff, var = _textbook_paired(a.numpy(), b.numpy(), target.numpy())
    res = auroc_compare(a, b, target, level=0.9)
    assert isinstance(res, AUROCComparison)
    assert torch.equal(res.auroc_a, auroc(a, target))
    assert torch.equal(res.auroc_b, auroc(b, target))
    assert float(res.difference) == pytest.approx(diff, abs=TOL)
    assert float(res.difference) == pytest.approx(roc_auc_score(target, a) - roc_auc_score(target, b), abs=TOL)
    std = math.sqrt(max(var, 0.0))
    z_level = NormalDist().inv_cdf(0.95)
    assert float(res.lower) == pytest.approx(diff - z_level * std, abs=TOL)
    assert float(res.upper) == pytest.approx(diff + z_level * std, abs=TOL)
    if std > 1e-6:
        z = diff / std
        assert float(res.z) == pytest.approx(z, rel=1e-8, abs=TOL)
        assert float(res.p_value) == pytest.approx(2 * (1 - NormalDist().cdf(abs(z))), abs=1e-8)


def test_compare_with_itself_has_p_one() -> None:
    a, _, target = _data(500, 6, 5)
    res = auroc_compare(a, a.clone(), target)
    assert float(res.difference) == 0.0
    assert float(res.z) == 0.0
    assert float(res.p_value) == 1.0
    assert float(res.lower) == 0.0
    assert float(res.upper) == 0.0


def test_compare_known_p_value() -> None:
    """A hand-worked case: z = -(1/8) / sqrt(1/32) = -1/sqrt(2), p = erfc(1/2)."""
    target = torch.tensor([1, 1, 0, 0])
    res = auroc_compare(torch.tensor([0.9, 0.5, 0.5, 0.1]), torch.tensor([0.9, 0.6, 0.5, 0.1]), target)
    assert float(res.difference) == -0.125
    assert float(res.z) == pytest.approx(-1 / math.sqrt(2), abs=1e-15)
    assert float(res.p_value) == pytest.approx(math.erfc(0.5), abs=1e-15)


def test_compare_zero_variance_with_a_difference() -> None:
    """Model a separates perfectly (V10 = V01 = 1), model b ties everything (all 1/2): var 0, z = inf, p = 0."""
    target = torch.tensor([1, 0, 1, 0, 1, 0])
    res = auroc_compare(torch.tensor([0.9, 0.1, 0.8, 0.2, 0.7, 0.3]), torch.full((6,), 0.4), target)
    assert float(res.difference) == 0.5
    assert math.isinf(float(res.z))
    assert float(res.z) > 0
    assert float(res.p_value) == 0.0


def test_one_class_follows_auroc() -> None:
    """No negative: auroc's 0.0 and its warning; std and interval NaN (undefined)."""
    preds, target = torch.tensor([0.2, 0.6, 0.4]), torch.tensor([1, 1, 1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        iv = auroc_interval(preds, target)
        res = auroc_compare(preds, preds.flip(0), target)
    assert float(iv.value) == 0.0
    assert math.isnan(float(iv.std))
    assert math.isnan(float(iv.lower))
    assert math.isnan(float(res.difference))
    assert math.isnan(float(res.p_value))
    assert any("negative samples" in str(w.message) for w in caught)


def test_single_positive_gives_nan_std() -> None:
    iv = auroc_interval(torch.tensor([0.9, 0.5, 0.1]), torch.tensor([1, 0, 0]))
    assert float(iv.value) == 1.0
    assert math.isnan(float(iv.std))


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.1, True])
def test_bad_level_raises(level: float) -> None:
    preds, target = torch.tensor([0.2, 0.6, 0.4, 0.1]), torch.tensor([0, 1, 1, 0])
    with pytest.raises(ValueError, match="level"):
        auroc_interval(preds, target, level=level)
    with pytest.raises(ValueError, match="level"):
        auroc_compare(preds, preds, target, level=level)


def test_compare_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="same shape|one shape"):
        auroc_compare(torch.rand(4), torch.rand(5), torch.tensor([0, 1, 1, 0]))


def test_interval_is_o_n_log_n_in_memory() -> None:
    """A size the O(P x N) matrix could not hold (1e6 x 1e6): the interval comes from counts per distinct score."""
    gen = torch.Generator().manual_seed(0)
    target = torch.randint(0, 2, (2_000_000,), generator=gen)
    preds = torch.rand(2_000_000, generator=gen) * 0.7 + 0.3 * target
    iv = auroc_interval(preds, target)
    assert 0 < float(iv.std) < 0.01
    assert float(iv.lower) < float(iv.value) < float(iv.upper)
