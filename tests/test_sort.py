"""The sort-free core: packed keys, their decoding, and the chunked streaming of AUROC / AP sums."""

from __future__ import annotations

import pytest
import torch
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from torchmetrics_varlen.functional import _sort, auroc, average_precision, roc
from torchmetrics_varlen.functional._ranking import rank_sums

RAW = {"normalization": None}  # rank the scores themselves (logits included), not their sigmoid

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _data(n: int, seed: int, levels: int | None, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    preds = torch.randn(n, generator=gen, dtype=torch.float64) + 0.7 * target
    if levels is not None:  # heavy ties, with runs of both classes at one score
        preds = torch.round(preds * levels) / levels
    return preds.to(dtype), target


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compact", [False, True])
def test_decode_inverts_encode_for_every_sign_and_zero(dtype: torch.dtype, compact: bool) -> None:
    values = [-3.5, -1.0, -1e-3, -0.0, 0.0, 1e-3, 0.5, 1.0, 1.99, 2.0, 65000.0]
    if compact:  # compact keys hold scores in [0, 2) only (-0.0 included)
        values = [v for v in values if 0 <= v < 2]
    scores = torch.tensor(values, dtype=dtype)
    target = torch.arange(len(values)) % 2
    assert _sort.fits_compact(scores) == compact
    keys = _sort.encode(scores, target)
    assert keys.element_size() == scores.element_size() * (1 if compact else 2)
    assert torch.equal(keys & 1, target.to(keys.dtype))
    decoded = _sort.decode(keys >> 1, dtype, compact)
    assert torch.equal(decoded, scores)  # -0.0 == +0.0: both decode to +0.0
    assert bool((torch.diff(keys >> 1) >= 0).all())  # increasing with the score
    zeros = [i for i, v in enumerate(values) if v == 0]
    assert int(keys[zeros[0]] >> 1) == int(keys[zeros[1]] >> 1)  # signed zeros share one code


@pytest.mark.parametrize("dtype", DTYPES)
def test_compact_and_wide_keys_give_the_same_bits(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(9)
    target = torch.randint(0, 2, (3000,), generator=gen)
    probs = (torch.rand(3000, generator=gen) * 0.7 + 0.3 * target).to(dtype)
    compact = _sort.sort_problem(probs, target.bool())
    assert isinstance(compact, _sort.SortedKeys)
    assert compact.compact
    wide_keys = _sort.sort_keys_(_sort.encode(probs, target.bool(), compact=False))
    wide = _sort.SortedKeys(wide_keys, dtype, int(target.sum()), False)
    assert rank_sums(compact) == rank_sums(wide)
    torch.testing.assert_close(_sort.materialize(compact, True), _sort.materialize(wide, True), atol=0, rtol=0)
    assert float(auroc(probs, target)) == pytest.approx(f32(roc_auc_score(target, probs.double())), abs=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "levels", "chunk"), [(1, None, 1), (50, 2, 1), (997, 3, 7), (3000, None, 64)])
@pytest.mark.parametrize("probabilities", [False, True])
def test_streamed_sums_match_sklearn_for_any_chunk_size(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, n: int, levels: int | None, chunk: int, probabilities: bool
) -> None:
    """Chunks far smaller than the data (and ones that must grow over long runs of ties) give exact values, with
    wide keys (logits) and compact keys (probabilities).
    """
    preds, target = _data(n, 7, levels, dtype)
    if probabilities:
        preds = preds.float().sigmoid().to(dtype)
    assert _sort.fits_compact(preds) == (probabilities or n == 1)  # one standard normal sample may fit too
    target[0] = 1 - target[1] if n > 1 else target[0]
    monkeypatch.setattr(_sort, "CHUNK", chunk)
    reference = preds.double().numpy()
    if target.unique().numel() == 2:
        assert float(auroc(preds, target, **RAW)) == pytest.approx(f32(roc_auc_score(target, reference)), abs=1e-12)
    if int(target.sum()):
        assert float(average_precision(preds, target, **RAW)) == pytest.approx(
            f32(average_precision_score(target, reference)), abs=1e-12
        )


@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 18])
def test_keys_and_counts_stream_the_same_bits(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """float32 scores stream packed keys; the same scores as float64 stream counts: the chunking is the same."""
    monkeypatch.setattr(_sort, "CHUNK", chunk)
    preds, target = _data(2000, 3, 4, torch.float32)
    keys = _sort.sort_problem(preds, target.bool())
    counts = _sort.sort_problem(preds.double(), target.bool())
    assert isinstance(keys, _sort.SortedKeys)
    assert isinstance(counts, _sort.Counts)
    assert rank_sums(keys) == rank_sums(counts)
    assert average_precision(preds, target, **RAW).item() == average_precision(preds.double(), target, **RAW).item()
    assert auroc(preds, target, **RAW).item() == auroc(preds.double(), target, **RAW).item()


def test_area_does_not_depend_on_the_chunk_size(monkeypatch: pytest.MonkeyPatch) -> None:
    preds, target = _data(5000, 4, 2, torch.float32)
    areas = set()
    for chunk in (1, 3, 100, 1 << 18):
        monkeypatch.setattr(_sort, "CHUNK", chunk)
        areas.add(rank_sums(_sort.sort_problem(preds, target.bool()), ap=False).twice_area)
    assert len(areas) == 1


def test_thresholds_are_decoded_from_the_keys() -> None:
    preds, target = _data(500, 5, 8, torch.float32)
    fpr, tpr, thr = roc(preds, target, **RAW)
    sk_fpr, sk_tpr, sk_thr = roc_curve(target, preds.double(), drop_intermediate=False)
    assert torch.equal(thr[1:].double(), torch.from_numpy(sk_thr[1:]))
    torch.testing.assert_close(fpr, torch.from_numpy(sk_fpr).float(), atol=1e-12, rtol=0)  # float32 rates
    torch.testing.assert_close(tpr, torch.from_numpy(sk_tpr).float(), atol=1e-12, rtol=0)


def test_in_place_sort_leaves_the_inputs_alone() -> None:
    preds, target = _data(1000, 6, None, torch.float32)
    before = preds.clone()
    auroc(preds, target)
    average_precision(preds, target)
    assert torch.equal(preds, before)
