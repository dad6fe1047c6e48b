"""The functional core against scikit-learn (exact values) and torchmetrics (binned values, degenerate input)."""

from __future__ import annotations

import warnings

import pytest
import torch
from _float32 import expit, f32
from sklearn.metrics import average_precision_score, roc_auc_score
from torchmetrics.functional.classification import binary_auroc, binary_average_precision

from torchmetrics_varlen.functional import auroc, average_precision


def _data(n: int, seed: int, levels: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = torch.rand(n, generator=gen, dtype=torch.float64) * 0.8 + 0.2 * target
    if levels is not None:  # heavy ties
        preds = torch.round(preds * levels) / levels
    return preds, target


CASES = [(2, 0, None), (3, 1, None), (10, 2, None), (257, 3, None), (5000, 4, None), (1000, 5, 3), (400, 6, 1)]


@pytest.mark.parametrize(("n", "seed", "levels"), CASES)
def test_auroc_equals_sklearn(n: int, seed: int, levels: int | None) -> None:
    """Random data, heavy ties and tiny inputs: exact AUROC, roc_auc_score rounded to float32 (the output dtype)."""
    preds, target = _data(n, seed, levels)
    if target.unique().numel() < 2:
        target[0] = 1 - target[0]
    value = auroc(preds, target)
    assert value.dtype == torch.float32
    assert float(value) == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-12)


@pytest.mark.parametrize(("n", "seed", "levels"), CASES)
@pytest.mark.parametrize("max_fpr", [0.01, 0.3, 0.5, 1.0])
def test_partial_auroc_equals_sklearn(n: int, seed: int, levels: int | None, max_fpr: float) -> None:
    """The McClish-corrected partial AUC matches scikit-learn's max_fpr."""
    preds, target = _data(n, seed, levels)
    if target.unique().numel() < 2:
        target[0] = 1 - target[0]
    expected = roc_auc_score(target, preds, max_fpr=max_fpr)
    assert float(auroc(preds, target, max_fpr=max_fpr)) == pytest.approx(f32(expected), abs=1e-12)


@pytest.mark.parametrize(("n", "seed", "levels"), CASES)
def test_average_precision_equals_sklearn(n: int, seed: int, levels: int | None) -> None:
    """Exact AP: average_precision_score rounded to float32, ties included."""
    preds, target = _data(n, seed, levels)
    if not target.any():
        target[0] = 1
    value = average_precision(preds, target)
    assert value.dtype == torch.float32
    assert float(value) == pytest.approx(f32(average_precision_score(target, preds)), abs=1e-12)


@pytest.mark.parametrize(("n", "seed", "levels"), CASES[2:])
def test_exact_equals_torchmetrics(n: int, seed: int, levels: int | None) -> None:
    """Single-process drop-in: the same values as torchmetrics' exact functions (float32 there)."""
    preds, target = _data(n, seed, levels)
    p = preds.float()
    assert float(auroc(p, target)) == pytest.approx(float(binary_auroc(p, target)), abs=1e-6)
    assert float(auroc(p, target, max_fpr=0.2)) == pytest.approx(float(binary_auroc(p, target, max_fpr=0.2)), abs=1e-6)
    assert float(average_precision(p, target)) == pytest.approx(float(binary_average_precision(p, target)), abs=1e-6)


def test_all_equal_scores() -> None:
    """All scores tied: one step from (0, 0) to (1, 1), AUROC 0.5 and AP the positive rate."""
    target = torch.tensor([0, 1, 1, 0, 1])
    preds = torch.full((5,), 0.3)
    assert float(auroc(preds, target)) == pytest.approx(f32(roc_auc_score(target, preds)), abs=1e-12)
    assert float(average_precision(preds, target)) == pytest.approx(f32(0.6), abs=1e-12)


def test_order_does_not_change_a_single_bit() -> None:
    """The value depends on the multiset of samples only: any permutation gives the same bits."""
    preds, target = _data(3000, 9, levels=50)
    perm = torch.randperm(3000, generator=torch.Generator().manual_seed(1))
    assert auroc(preds, target).item() == auroc(preds[perm], target[perm]).item()
    assert average_precision(preds, target).item() == average_precision(preds[perm], target[perm]).item()


def test_logits_are_normalised_like_torchmetrics_or_ranked_raw() -> None:
    """By default a batch of logits goes through a sigmoid as in torchmetrics (float32 saturation included: 18, 20,
    25 and 30 all become 1.0, ties); ``normalization=None`` ranks the logits as they are.
    """
    logits = torch.tensor([18.0, 20.0, -3.0, 25.0, 30.0], dtype=torch.float32)
    target = torch.tensor([0, 1, 0, 0, 1])
    probs = expit(logits)
    assert probs.tolist() == [1.0, 1.0, probs[2].item(), 1.0, 1.0]
    assert float(auroc(logits, target)) == pytest.approx(f32(roc_auc_score(target, probs)), abs=1e-12)
    assert float(auroc(logits, target)) == pytest.approx(float(binary_auroc(logits, target)), abs=1e-6)
    ap = average_precision(logits, target)
    assert float(ap) == pytest.approx(f32(average_precision_score(target, probs)), abs=1e-12)
    assert float(ap) == pytest.approx(float(binary_average_precision(logits, target)), abs=1e-6)
    raw_auroc = auroc(logits, target, normalization=None)
    assert float(raw_auroc) == pytest.approx(f32(roc_auc_score(target, logits)), abs=1e-12)
    raw_ap = average_precision(logits, target, normalization=None)
    assert float(raw_ap) == pytest.approx(f32(average_precision_score(target, logits)), abs=1e-12)


def test_any_shape_is_flattened_and_ignore_index_dropped() -> None:
    """2-D input is flattened; positions with target == ignore_index are removed."""
    preds, target = _data(60, 10)
    target2 = target.clone()
    target2[::7] = -100
    keep = target2 != -100
    expected = roc_auc_score(target[keep], preds[keep])
    got = auroc(preds.view(6, 10), target2.view(6, 10), ignore_index=-100)
    assert float(got) == pytest.approx(f32(expected), abs=1e-12)
    ap = average_precision(preds.view(6, 10), target2.view(6, 10), ignore_index=-100)
    assert float(ap) == pytest.approx(f32(average_precision_score(target[keep], preds[keep])), abs=1e-12)


@pytest.mark.parametrize("thresholds", [2, 5, 100, [0.0, 0.3, 0.5, 0.9], torch.tensor([0.1, 0.2, 0.7, 1.0])])
@pytest.mark.parametrize("max_fpr", [None, 0.4])
def test_binned_equals_torchmetrics(thresholds: int | list[float] | torch.Tensor, max_fpr: float | None) -> None:
    """Binned mode reproduces torchmetrics' binned AUROC / AP (float32 there, float64 inside here)."""
    preds, target = _data(700, 11)
    p = preds.float()
    assert float(auroc(p, target, thresholds=thresholds, max_fpr=max_fpr)) == pytest.approx(
        float(binary_auroc(p, target, thresholds=thresholds, max_fpr=max_fpr)), abs=1e-6
    )
    assert float(average_precision(p, target, thresholds=thresholds)) == pytest.approx(
        float(binary_average_precision(p, target, thresholds=thresholds)), abs=1e-6
    )


def test_binned_applies_sigmoid_to_logits_like_torchmetrics() -> None:
    """In binned mode a batch with scores outside [0, 1] is squashed by a sigmoid, as torchmetrics does."""
    preds, target = _data(300, 12)
    logits = (preds.float() - 0.5) * 8
    assert float(auroc(logits, target, thresholds=20)) == pytest.approx(
        float(binary_auroc(logits, target, thresholds=20)), abs=1e-6
    )


@pytest.mark.parametrize("target", [[0, 0, 0, 0], [1, 1, 1, 1]])
def test_one_class_only_behaves_as_torchmetrics(target: list[int]) -> None:
    """One class only: the same value and the same warning as torchmetrics."""
    preds = torch.tensor([0.1, 0.4, 0.35, 0.8])
    t = torch.tensor(target)
    for ours, theirs in [(auroc, binary_auroc), (average_precision, binary_average_precision)]:
        with warnings.catch_warnings(record=True) as tm_warnings:
            warnings.simplefilter("always")
            expected = float(theirs(preds, t))
        tm_messages = sorted({str(w.message) for w in tm_warnings})
        with warnings.catch_warnings(record=True) as our_warnings:
            warnings.simplefilter("always")
            got = float(ours(preds, t))
        assert got == pytest.approx(expected, abs=1e-12)
        assert sorted({str(w.message) for w in our_warnings}) == tm_messages


def test_empty_input_warns_and_returns_zero() -> None:
    """No samples at all (torchmetrics raises an IndexError here): 0.0 with the 'no samples' warnings."""
    empty_p, empty_t = torch.zeros(0), torch.zeros(0, dtype=torch.long)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert float(auroc(empty_p, empty_t)) == 0.0
    assert {str(w.message).split(" ")[1] for w in caught} == {"positive", "negative"}
    with pytest.warns(UserWarning, match="No positive samples found in target"):
        assert float(average_precision(empty_p, empty_t)) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_fpr": 0.0}, r"Expected argument `max_fpr` to be a float in the range \(0, 1\], but got 0.0"),
        ({"max_fpr": 1.5}, r"`max_fpr`.*but got 1.5"),
        ({"thresholds": 1}, r"`thresholds` given as an int to be at least 2, but got 1"),
        ({"thresholds": [0.5, 2.0]}, r"`thresholds` given as a list to hold floats in \[0, 1\]"),
        ({"thresholds": torch.ones(2, 2)}, r"`thresholds` given as a tensor to be 1-D and floating point"),
        ({"thresholds": "10"}, r"Expected argument `thresholds` to be None, an int"),
        ({"ignore_index": 0.5}, r"Expected argument `ignore_index` to be None or an int, but got 0.5"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        auroc(torch.rand(4), torch.tensor([0, 1, 0, 1]), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("preds", "target", "match"),
    [
        (torch.rand(3), torch.tensor([0, 1]), r"same shape, but got \(3,\) and \(2,\)"),
        (torch.tensor([1, 0]), torch.tensor([0, 1]), r"`preds` to be a floating point tensor.*torch.int64"),
        (torch.rand(2), torch.tensor([0.0, 0.5]), r"`target` to hold only \{0, 1\}, but found values \[0.0, 0.5\]"),
        (torch.rand(2), torch.tensor([0.0, float("nan")]), r"`target` to hold only \{0, 1\}, but found values"),
        (torch.rand(2), torch.tensor([0, 1j]), r"`target` to be an integer, bool or floating point tensor"),
        (torch.tensor([0.1, float("nan")]), torch.tensor([0, 1]), r"found 1 NaN or infinite value"),
        (torch.tensor([0.1, float("inf")]), torch.tensor([0, 1]), r"found 1 NaN or infinite value\(s\) \(first: inf\)"),
        (torch.rand(3), torch.tensor([0, 1, 2]), r"`target` to hold only \{0, 1\}, but found values \[0, 1, 2\]"),
    ],
)
def test_bad_tensors(preds: torch.Tensor, target: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        auroc(preds, target)
    with pytest.raises(ValueError, match=match):
        average_precision(preds, target)


def test_non_tensor_input_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Expected `preds` and `target` to be tensors, but got list and Tensor"):
        auroc([0.1, 0.2], torch.tensor([0, 1]))  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_every_float_dtype_ranks_exactly_including_negative_scores_and_signed_zeros(dtype: torch.dtype) -> None:
    """The packed-key sort (16/32-bit) and the float sort (64-bit) give scikit-learn's values on the same numbers:
    negative and positive scores, subnormals, extremes, and -0.0 tied with +0.0.
    """
    gen = torch.Generator().manual_seed(21)
    info = torch.finfo(dtype)
    sub, big = info.tiny / 4, info.max  # a subnormal and the largest finite value of the dtype
    special = torch.tensor([-0.0, 0.0, -0.0, 0.0, sub, -sub, big, -big, 1.0, -1.0], dtype=torch.float64)
    values = torch.cat([torch.randn(3000, generator=gen, dtype=torch.float64) * 3, special]).to(dtype)
    target = torch.randint(0, 2, (values.numel(),), generator=gen)
    target[-10:] = torch.tensor([1, 0, 0, 1, 1, 0, 1, 0, 1, 0])
    as64 = values.double().numpy()
    raw = {"normalization": None}  # the raw scores, not their sigmoid
    assert float(auroc(values, target, **raw)) == pytest.approx(f32(roc_auc_score(target, as64)), abs=1e-12)
    ap = average_precision(values, target, **raw)
    assert float(ap) == pytest.approx(f32(average_precision_score(target, as64)), abs=1e-12)
    zeros = torch.tensor([-0.0, 0.0, 0.5], dtype=dtype)
    assert float(auroc(zeros, torch.tensor([1, 0, 1]))) == pytest.approx(0.75, abs=1e-12)  # -0.0 ties with +0.0
