"""Logit normalisation is a function of the value: equal logits stay tied in any batch, at any position, on any rank.

torch's CPU sigmoid rounds a tensor's vectorised body and its tail with two formulas; the package's sigmoid and
softmax (``functional/_normalize.py``) give every element the float64 result of one formula, rounded once to its
dtype. The references here are NumPy's float64 sigmoid / softmax rounded once (``_float32.expit`` / ``softmax``)
and scikit-learn on them. The Hypothesis property over dtypes, ties, batch sizes, W and sync paths is
``tests/property/test_normalization_property.py``.
"""

from __future__ import annotations

import pytest
import torch
from _dist import DistPool
from _float32 import expit, f32, softmax
from _sampler import sampler_indices
from sklearn.metrics import average_precision_score, roc_auc_score

from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision
from torchmetrics_varlen.functional import auroc, auroc_interval
from torchmetrics_varlen.functional._normalize import sigmoid
from torchmetrics_varlen.functional._normalize import softmax as package_softmax

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _pieces(x: torch.Tensor, size: int) -> torch.Tensor:
    return torch.cat([sigmoid(x[i : i + size]) for i in range(0, x.numel(), size)])


@pytest.mark.parametrize("dtype", FLOATS)
def test_sigmoid_bits_do_not_depend_on_the_position(dtype: torch.dtype) -> None:
    """Every element gets the same bits alone, in pieces of any size, shifted by an offset or in a 2-D layout."""
    x = (torch.randn(50_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 6).to(dtype)
    whole = sigmoid(x)  # float32 from 4,096 scores on: torch's vectorised pass, checked; below: the scalar pass
    assert whole.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)  # 16-bit logits: float32
    for size in (1, 3, 16, 17, 64, 1000, 4095, 4096, 10_000):
        assert torch.equal(_pieces(x, size), whole), size
    assert torch.equal(sigmoid(x[7:]), whole[7:])
    assert torch.equal(sigmoid(x.flip(0)).flip(0), whole)
    assert torch.equal(sigmoid(x.view(500, 100).t()).t().reshape(-1), whole)


def test_the_scores_a_check_finds_unsure_are_recomputed(monkeypatch: pytest.MonkeyPatch) -> None:
    """From 4,096 float32 scores on, torch's vectorised float64 sigmoid is kept only where an interval around it rounds
    to one float32; the rest (about one in 10**6) come from the scalar formula. A wide interval makes most scores
    unsure here: the result must still be the scalar formula's, also for a non-contiguous, 2-D input.
    """
    import torchmetrics_varlen.functional._normalize as normalize

    x = torch.randn(300, 70, generator=torch.Generator().manual_seed(4)) * 5
    expected = normalize._sigmoid64(x).float()
    monkeypatch.setattr(normalize, "_SPREAD", 2.0**-22)
    assert torch.equal(sigmoid(x), expected)
    assert torch.equal(sigmoid(x.t()), expected.t())
    assert torch.equal(sigmoid(x.t()[::2]), expected.t()[::2])


@pytest.mark.parametrize("dtype", FLOATS)
def test_sigmoid_is_the_float64_sigmoid_rounded_once(dtype: torch.dtype) -> None:
    """The float32 (float64) score of a float32 or 16-bit (float64) logit is NumPy's float64 sigmoid rounded once."""
    x = (torch.randn(20000, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 8).to(dtype)
    assert torch.equal(sigmoid(x), expit(x)) if dtype != torch.float64 else torch.allclose(sigmoid(x), expit(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_16_bit_logit_reads_its_rounded_sigmoid(dtype: torch.dtype) -> None:
    """All 65,536 bit patterns of a 16-bit dtype (NaN, infinities and subnormals included) get a float32 score.

    NumPy's float64 formula and the scalar one the package runs can be one float64 step apart; rounded to 16 bits that
    never showed, rounded to float32 it does where the value sits on a float32 midpoint (the logit 9.89e-6 of both
    dtypes: 0.5 + 41.5 float32 steps). There the score is the package's float64 sigmoid rounded once.
    """
    import torchmetrics_varlen.functional._normalize as normalize

    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    ours, reference = sigmoid(every), expit(every)
    assert ours.dtype == torch.float32
    assert torch.equal(ours.isnan(), reference.isnan())
    finite = ~reference.isnan()
    differ = finite & (ours != reference)
    assert int(differ.sum()) <= 1
    mine, numpys = normalize._sigmoid64(every[differ]), expit(every[differ].double())
    assert torch.equal(ours[differ], mine.float())
    assert bool(((mine - numpys).abs() <= torch.finfo(torch.float64).eps).all())  # one float64 step near 0.5
    assert float(sigmoid(torch.tensor([float("inf"), -float("inf")], dtype=dtype))[0]) == 1.0


def test_sigmoid_of_integers_and_empty_tensors() -> None:
    assert sigmoid(torch.tensor([0, 2])).dtype == torch.float32
    assert sigmoid(torch.tensor([0, 2])).tolist() == expit(torch.tensor([0.0, 2.0])).tolist()
    assert sigmoid(torch.empty(0)).shape == (0,)
    assert sigmoid(torch.empty(0, 3, dtype=torch.bfloat16)).shape == (0, 3)


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_rows_do_not_depend_on_the_position(dtype: torch.dtype) -> None:
    x = (torch.randn(999, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 4).to(dtype)
    whole = package_softmax(x)
    assert whole.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)  # 16-bit logits: float32
    assert torch.equal(torch.cat([package_softmax(x[i : i + 7]) for i in range(0, 999, 7)]), whole)
    assert torch.equal(package_softmax(x.t().contiguous().t()), whole)
    if dtype != torch.float64:
        assert torch.equal(whole, softmax(x))


def test_equal_float64_logits_stay_tied_in_one_batch_and_in_four() -> None:
    """The issue's first row: 20 equal float64 logits (labels 8 / 12) gave AUROC 1/3 in one batch, 0.5 in four."""
    logits = torch.full((20,), -3.08, dtype=torch.float64)
    target = torch.tensor([0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1])
    assert float(auroc(logits, target)) == 0.5
    batched = VarlenAUROC()
    for i in range(0, 20, 5):
        batched.update(logits[i : i + 5], target[i : i + 5])
    assert float(batched.compute()) == 0.5
    assert float(auroc_interval(logits, target).std) == 0.0  # pROC's DeLong standard error of one tie: 0


def _bf16_logits(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """bfloat16 logits upcast to float32 (autocast's output), with many equal values."""
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(n, generator=gen) * 2).bfloat16().float()
    target = (torch.rand(n, generator=gen) < torch.sigmoid(logits.double() * 1.5)).long()
    return logits, target


def test_bf16_logits_give_one_value_for_every_batch_size() -> None:
    """The issue's second row (N = 10,000; it moved in the 7th digit with B = 100)."""
    logits, target = _bf16_logits(10_000, 0)
    expected = f32(roc_auc_score(target.numpy(), expit(logits).double().numpy()))
    expected_ap = f32(average_precision_score(target.numpy(), expit(logits).double().numpy()))
    for batch in (64, 100, 1000, 10_000):
        metric, ap = VarlenAUROC(), VarlenAveragePrecision()
        for i in range(0, 10_000, batch):
            metric.update(logits[i : i + batch], target[i : i + batch])
            ap.update(logits[i : i + batch], target[i : i + batch])
        assert float(metric.compute()) == expected, batch
        assert float(ap.compute()) == expected_ap, batch


def case_world_sizes(rank: int, world: int, n: int, batch: int) -> list[float]:
    logits, target = _bf16_logits(n, 1)
    mine = torch.tensor(sampler_indices(n, world, rank, shuffle=True, drop_last=False), dtype=torch.long)
    out = []
    for extra in ({}, {"compute_on_rank": 0}, {"compute_sharded": True}, {"thresholds": torch.bfloat16}):
        metric = VarlenAUROC(dataset_size=n, sync_timeout=30, **extra)  # type: ignore[arg-type]
        for i in range(0, mine.numel(), batch):
            metric.update(logits[mine[i : i + batch]], target[mine[i : i + batch]])
        out.append(metric.compute().item())
    return out


@pytest.mark.distributed
def test_bf16_logits_give_one_value_at_every_world_size(pool: DistPool) -> None:
    """The issue's third row: N = 4,001 through a padded, shuffled sampler; it moved with W (1, 2, 3) before."""
    n = 4001
    logits, target = _bf16_logits(n, 1)
    scores = expit(logits)
    expected = f32(roc_auc_score(target.numpy(), scores.double().numpy()))
    expected_16 = f32(roc_auc_score(target.numpy(), scores.bfloat16().double().numpy()))
    for world, batch in ((1, 64), (2, 100), (3, 37)):
        for values in pool.values(case_world_sizes, world, n, batch):
            assert values == [expected, expected, expected, expected_16], world
