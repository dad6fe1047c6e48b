"""The sort-free core: packed keys, their decoding, and the chunked streaming of AUROC / AP sums."""

from __future__ import annotations

import pytest
import torch
from _float32 import expit, f32
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


@pytest.mark.parametrize("label_dtype", [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.float32])
@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("parts", [False, True])
def test_any_nonzero_label_is_a_positive_in_the_keys(
    label_dtype: torch.dtype, compact: bool, parts: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Labels go into the keys as they are (no bool copy): a non-zero label of any dtype but uint8 (a stored 0 / 1
    form) is a positive, as ``.bool()`` makes it, on one thread and in parts on several.
    """
    if parts:
        monkeypatch.setattr(_sort, "PART_MIN", 500)
        monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    gen = torch.Generator().manual_seed(7)
    n = 5003
    preds = torch.rand(n, generator=gen) if compact else torch.randn(n, generator=gen)
    flags = torch.rand(n, generator=gen) < 0.4
    if label_dtype in (torch.bool, torch.uint8):
        labels = flags.to(label_dtype)
    else:  # other non-zero values than 1, negative ones included
        labels = flags.to(torch.int64) * torch.randint(1, 5, (n,), generator=gen) * (1 - 2 * (torch.arange(n) % 2))
        labels = labels.to(label_dtype)
    keys, n_pos, _ = _sort._encode(preds, labels, compact)
    expected, expected_pos, _ = _sort._encode(preds, flags, compact)
    assert torch.equal(keys, expected)
    assert n_pos == expected_pos == int(flags.sum())
    if label_dtype != torch.float32:  # the functional API takes integer / bool targets
        value = auroc(preds, labels, validate_args=False, normalization=None)
        assert torch.equal(value, auroc(preds, flags, normalization=None))
        assert float(value) == pytest.approx(f32(roc_auc_score(flags, preds.double())), abs=1e-6)


@pytest.mark.parametrize("bad_at", [None, 0, 3, 150])
def test_pieces_tested_while_encoding_start_over_wide_at_a_score_outside(bad_at: int | None) -> None:
    """Stored pieces are range-tested block by block as they are encoded; a score outside [0, 2) in any block
    (the first, or one after compact blocks were written) gives the wide keys of the whole data.
    """
    gen = torch.Generator().manual_seed(3)
    pieces = [torch.rand(int(m), generator=gen) for m in torch.randint(1, 900, (160,), generator=gen)]
    labels = [torch.rand(p.numel(), generator=gen) < 0.5 for p in pieces]
    if bad_at is not None:
        pieces[bad_at][-1] = -0.5
    keys, n_pos, compact = _sort._encode(pieces, labels, None)
    assert compact is (bad_at is None)
    whole, whole_labels = torch.cat(pieces), torch.cat(labels)
    assert torch.equal(keys, _sort.encode(whole, whole_labels, compact))
    assert n_pos == int(whole_labels.sum())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("normalization", ["sigmoid", None])
def test_nan_scores_rank_above_every_score_whatever_their_sign(
    dtype: torch.dtype, normalization: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With validate_args=False a NaN score is not refused. Every NaN is one score above +inf, where torch.sort (and
    so torchmetrics) ranks NaN, whatever its sign and payload: torch's sigmoid of NaN sets the sign bit, and in
    bfloat16 its payload changes with the batch's length. Checked on one thread and in parts, batched and whole.
    """
    from torchmetrics_varlen import VarlenAUROC

    gen = torch.Generator().manual_seed(11)
    n = 4001
    target = torch.rand(n, generator=gen) < 0.4
    preds = (torch.rand(n, generator=gen) * 4 - 2).to(dtype)  # outside [0, 1]: the sigmoid applies
    preds[torch.rand(n, generator=gen) < 0.05] = float("nan")
    preds[:3] = -float("nan")
    # the package's sigmoid: float32 scores, 16-bit logits too (a 16-bit sigmoid merges logits it ranks apart)
    shown = expit(preds) if normalization is not None else preds
    finite = shown.double()  # every NaN one score above the others, whatever its sign and payload
    reference = torch.where(finite.isnan(), finite.nan_to_num(0.0).max() + 1, finite)
    expected = f32(roc_auc_score(target, reference))
    for parts in (False, True):
        if parts:
            monkeypatch.setattr(_sort, "PART_MIN", 500)
            monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
        value = auroc(preds, target, validate_args=False, normalization=normalization)
        assert float(value) == pytest.approx(expected, abs=1e-6)
        metric = VarlenAUROC(validate_args=False, normalization=normalization)
        for piece, label in zip(preds.split(700), target.split(700), strict=True):
            metric.update(piece, label)
        assert torch.equal(metric.compute(), value)
        if dtype != torch.float32:  # the 16-bit mode counts the scores rounded to its dtype
            binned = VarlenAUROC(thresholds=dtype, validate_args=False, normalization=normalization)
            binned.update(preds, target)
            rounded = shown.to(dtype)  # 16-bit logits' float32 sigmoids rounded once more; raw scores as they are
            assert torch.equal(binned.compute(), auroc(rounded, target, validate_args=False, normalization=None))
