"""Many small stored pieces give the bits of one piece: the small-batch compute path (issue 20) trades no exactness.

Every class is fed the same data once in one piece and once in batches whose sizes mix tiny pieces, pieces around
the streaming chunk and pieces above it (so groups of small pieces and big pieces alternate); ``compute()`` must be
``torch.equal`` on every output tensor. The functional encoder is checked the same way on raw pieces.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import pytest
import torch
import torch.multiprocessing  # noqa: F401  (registers the shared-memory reductions ForkingPickler uses)
import torchmetrics.classification as tmc
from _data import flat_tensors

import torchmetrics_varlen as tv
from torchmetrics_varlen.functional import _sort

N = 160_000
C = 5
# 1 .. 700 at random, then one piece above the chunk, then small again: groups, a big piece, groups.
_gen = torch.Generator().manual_seed(3)
SIZES = torch.randint(1, 700, (120,), generator=_gen).tolist() + [_sort.CHUNK + 17] + [1, 2, 3] * 10
SIZES.append(N - sum(SIZES))


def _data(kind: str, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    if kind == "multiclass":
        target = torch.randint(0, C, (N,), generator=gen)
        logits = torch.randn(N, C, generator=gen) + 2 * torch.nn.functional.one_hot(target, C)
        return torch.softmax(logits, dim=1).to(dtype), target
    if kind == "multilabel":
        target = torch.randint(0, 2, (N, C), generator=gen)
        return (torch.rand(N, C, generator=gen) * 0.8 + 0.2 * target).to(dtype), target
    target = torch.randint(0, 2, (N,), generator=gen)
    preds = torch.rand(N, generator=gen) * 0.8 + 0.2 * target
    if kind == "ties":
        preds = torch.round(preds * 50) / 50
    if kind == "logits":
        preds = torch.logit(preds.clamp(1e-4, 1 - 1e-4))
    return preds.to(dtype), target


CASES: dict[str, tuple[str, Callable[[], Any]]] = {
    "auroc": ("binary", lambda: tv.VarlenAUROC()),
    "auroc ties": ("ties", lambda: tv.VarlenAUROC()),
    "auroc logits": ("logits", lambda: tv.VarlenAUROC(normalization=None)),
    "auroc max_fpr": ("binary", lambda: tv.VarlenAUROC(max_fpr=0.3)),
    "average precision": ("ties", lambda: tv.VarlenAveragePrecision()),
    "multiclass auroc": ("multiclass", lambda: tv.VarlenMulticlassAUROC(num_classes=C)),
    "multiclass ap weighted": (
        "multiclass",
        lambda: tv.VarlenMulticlassAveragePrecision(num_classes=C, average="weighted"),
    ),
    "multilabel auroc": ("multilabel", lambda: tv.VarlenMultilabelAUROC(num_labels=C)),
    "multilabel ap micro": ("multilabel", lambda: tv.VarlenMultilabelAveragePrecision(num_labels=C, average="micro")),
    "roc": ("ties", lambda: tv.VarlenROC()),
    "precision recall curve": ("ties", lambda: tv.VarlenPrecisionRecallCurve()),
    "best f1": ("ties", lambda: tv.VarlenBestF1()),
    "group auroc": ("ties", lambda: tv.VarlenGroupAUROC(return_per_group=True)),
    "bfloat16 mode": ("binary", lambda: tv.VarlenAUROC(thresholds=torch.bfloat16)),
    "float16 mode, multiclass": (
        "multiclass",
        lambda: tv.VarlenMulticlassAUROC(num_classes=C, thresholds=torch.float16),
    ),
    "Varlen(BinaryAUROC)": ("binary", lambda: tv.Varlen(tmc.BinaryAUROC())),
    "VarlenCollection": (
        "ties",
        lambda: tv.VarlenCollection({"auroc": tv.VarlenAUROC(), "ap": tv.VarlenAveragePrecision()}),
    ),
}


def _feed(make: Callable[[], Any], kind: str, sizes: list[int]) -> Any:
    preds, target = _data(kind)
    groups = torch.arange(N) // 37
    metric = make()
    start = 0
    for size in sizes:
        kw = {"groups": groups[start : start + size]} if isinstance(metric, tv.VarlenGroupAUROC) else {}
        metric.update(preds[start : start + size], target[start : start + size], **kw)
        start += size
    return metric.compute()


@pytest.mark.parametrize("name", list(CASES))
def test_many_small_pieces_give_the_bits_of_one_piece(name: str) -> None:
    kind, make = CASES[name]
    one, many = flat_tensors(_feed(make, kind, [N])), flat_tensors(_feed(make, kind, SIZES))
    assert len(one) == len(many)
    for a, b in zip(one, many, strict=True):
        assert a.dtype == b.dtype
        assert torch.equal(a, b) or (a.isnan().all() and b.isnan().all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["binary", "logits"])
def test_encode_of_pieces_is_encode_of_the_concatenation(dtype: torch.dtype, kind: str) -> None:
    preds, target = _data(kind, dtype)
    bounds = torch.tensor([0, *SIZES]).cumsum(0).tolist()
    pieces = [preds[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    labels = [target[a:b].to(torch.bool) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    pieces[5] = pieces[5].reshape(-1, 1) if pieces[5].numel() else pieces[5]  # a 2-D piece among 1-D ones
    assert _sort.fits_compact(pieces) == _sort.fits_compact(preds) == (kind == "binary")
    assert torch.equal(_sort.encode(pieces, labels), _sort.encode(preds, target.to(torch.bool)))
    many, one = _sort.sorted_keys(pieces, labels), _sort.sorted_keys(preds, target)
    assert torch.equal(many.keys, one.keys)
    assert (many.n_pos, many.compact) == (one.n_pos, one.compact) == (int(target.sum()), kind == "binary")


@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel"])
@pytest.mark.parametrize("thresholds", [torch.float16, torch.bfloat16, 7])
def test_count_into_adds_the_integers_count_adds(task: str, thresholds: Any) -> None:
    """The in-place per-batch count (16-bit and binned modes) gives ``state + count(...)``, batch after batch, for
    batches below and above the sparse / dense switch.
    """
    from torchmetrics_varlen.functional._count import CountMode, count, count_into, empty_state, threshold_tensor
    from torchmetrics_varlen.functional._validation import format_inputs

    kind = {"binary": "logits", "multiclass": "multiclass", "multilabel": "multilabel"}[task]
    preds, target = _data(kind)
    if task == "multilabel":
        target = target.clone()
        target[::7, 1] = -1  # ignored entries are not counted
    mode, thr = CountMode.of(thresholds), threshold_tensor(thresholds)
    expected = empty_state(mode, task, C, 7)
    state = expected.clone()
    start = 0
    for size in (1, 5, 300, 40_000, 3, 100_000):
        scores, labels, _ = format_inputs(
            preds[start : start + size], target[start : start + size], task, -1 if task == "multilabel" else None, None
        )
        expected = expected + count(mode, scores, labels, task, thr)
        assert count_into(mode, state, scores, labels, task, thr) is state
        assert torch.equal(state, expected)
        start += size


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["ties", "logits"])
@pytest.mark.parametrize("step", [7, 1000, 1 << 20])
def test_whole_keys_area_is_the_chunked_area(
    dtype: torch.dtype, kind: str, step: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU AUROC pass over all the sorted keys at once gives the integer the chunk-by-chunk pass gives, with
    runs of both classes straddling its blocks, and with offsets (a range of a sharded problem).
    """
    from torchmetrics_varlen.functional import _ranking

    monkeypatch.setattr(_ranking, "AREA_BLOCK", step)
    preds, target = _data(kind, dtype)
    preds, target = preds[:30_000], target[:30_000]
    if kind == "ties":
        preds = (torch.round(preds.float() * 7) / 7).to(dtype)
    col = _sort.sorted_keys(preds, target)
    for pos_before, all_before in ((0, 0), (123, 4567)):
        chunked = 0
        for p, a, chunk in _sort.chunks(col):
            assert isinstance(chunk, torch.Tensor)
            chunked += _ranking._twice_area_of_keys(chunk, p + pos_before, a + all_before)
        assert _ranking._twice_area_of_keys_cpu(col.keys, pos_before, all_before) == chunked


@pytest.mark.parametrize("thresholds", [torch.bfloat16, 5])
def test_summed_state_counted_in_place_never_touches_a_copy(thresholds: Any) -> None:
    """The 16-bit / binned count goes into the metric's own summed state in place: a deep copy, a pickled copy (what
    ddp_spawn sends each rank, possibly sharing storage) and the state before a reset keep their counts.
    """
    gen = torch.Generator().manual_seed(3)
    preds, target = torch.rand(300, generator=gen), torch.randint(0, 2, (300,), generator=gen)
    metric = tv.VarlenAUROC(thresholds=thresholds)
    metric.update(preds[:100], target[:100])
    twin = copy.deepcopy(metric)
    shared = pickle.loads(ForkingPickler.dumps(metric))  # as torch.multiprocessing sends it: shared memory
    state, its_copy = getattr(metric, metric._summed), getattr(shared, shared._summed)
    # the unpickled metric owns its states (its ``__setstate__`` clones them), as the in-place counts need
    assert its_copy.untyped_storage().data_ptr() != state.untyped_storage().data_ptr()
    before = metric.compute().clone()
    metric.update(preds[100:], target[100:])
    for other in (twin, shared):
        assert torch.equal(other.compute(), before)
        other.update(preds[100:], target[100:])
    whole = tv.VarlenAUROC(thresholds=thresholds)
    whole.update(preds, target)
    for m in (metric, twin, shared):
        assert torch.equal(m.compute(), whole.compute())
    metric.reset()
    metric.update(preds[:100], target[:100])
    assert torch.equal(metric.compute(), before)
