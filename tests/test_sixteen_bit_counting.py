"""The 16-bit mode counts every batch into its histogram state at once, in place (as torchmetrics adds to its tensor
states): no batch is lost or counted twice, whatever copies, resets, loads or syncs the state in between (a copy, a
pickle, a shared-memory pickle and a loaded metric count into tensors of their own); reading a state writes nothing.

The reference histogram is an independent ``torch.bincount`` of the raw bit patterns of all the scores fed (the
integers the state must hold); values are compared with scikit-learn on the rounded scores and with the metric fed
the same data in one piece (bit for bit).
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
from _dist import DistPool
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score
from torchmetrics import MetricCollection

import torchmetrics_varlen as tv
from torchmetrics_varlen.functional import _hist

DTYPES = [torch.float16, torch.bfloat16]
# Many tiny batches, big ones (over 2**15 scores: the scatter of a big batch) and a tail of small ones.
_gen = torch.Generator().manual_seed(5)
SIZES = [*torch.randint(1, 40, (286,), generator=_gen).tolist(), 3000, 5000, (1 << 15) + 7, 2, 9, 700, 1]
N = sum(SIZES)


def _data(n: int = N, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (n,), generator=gen)
    return torch.rand(n, generator=gen) * 0.8 + 0.2 * target, target


def _batches(preds: torch.Tensor, target: torch.Tensor, sizes: list[int] = SIZES) -> list[tuple[Any, Any]]:
    out, start = [], 0
    for size in sizes:
        out.append((preds[start : start + size], target[start : start + size]))
        start += size
    assert start == preds.shape[0]
    return out


def _reference(preds: torch.Tensor, target: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The raw-pattern histogram of ``preds`` rounded to ``dtype``, by ``bincount`` (not the package's code)."""
    bits = preds.to(dtype).view(torch.int16).to(torch.int64) & 0xFFFF
    return torch.bincount(bits + 65536 * target.long(), minlength=2 * 65536).view(2, 65536)


def _counted(metric: Any) -> torch.Tensor:
    """The metric's histogram state, as anyone reads it."""
    return metric.hist


def _fed(make: Callable[[], Any], batches: list[tuple[Any, Any]]) -> Any:
    metric = make()
    for p, t in batches:
        metric.update(p, t)
    return metric


@pytest.mark.parametrize("dtype", DTYPES)
def test_batches_count_every_score_once(dtype: torch.dtype) -> None:
    """Read after every batch, the state holds exactly the batches fed so far; the value is scikit-learn's."""
    preds, target = _data()
    metric = tv.VarlenAUROC(thresholds=dtype)
    start = 0
    for i, (p, t) in enumerate(_batches(preds, target)):
        metric.update(p, t)
        start += p.shape[0]
        if i % 37 == 0 or p.shape[0] > 100:
            assert torch.equal(_counted(metric), _reference(preds[:start], target[:start], dtype))
    assert torch.equal(_counted(metric), _reference(preds, target, dtype))
    assert torch.equal(_counted(metric), _reference(preds, target, dtype))  # a second read adds nothing
    rounded = preds.to(dtype).double()
    assert float(metric.compute()) == pytest.approx(f32(roc_auc_score(target, rounded)), abs=1e-12)
    whole = tv.VarlenAUROC(thresholds=dtype)
    whole.update(preds, target)
    assert torch.equal(metric.compute(), whole.compute())


def test_batches_in_any_order_give_the_same_state() -> None:
    preds, target = _data()
    batches = _batches(preds, target)
    forward = _fed(lambda: tv.VarlenAveragePrecision(thresholds=torch.bfloat16), batches)
    backward = _fed(lambda: tv.VarlenAveragePrecision(thresholds=torch.bfloat16), batches[::-1])
    assert torch.equal(_counted(forward), _counted(backward))
    expected = f32(average_precision_score(target, preds.to(torch.bfloat16).double()))
    assert float(forward.compute()) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reset_drops_what_was_counted(dtype: torch.dtype) -> None:
    """Batches counted before ``reset()`` are gone with it; those after it count once."""
    preds, target = _data()
    batches = _batches(preds, target)
    metric = _fed(lambda: tv.VarlenAUROC(thresholds=dtype), batches[:50])  # 50 small batches
    metric.reset()
    for p, t in batches[50:]:
        metric.update(p, t)
    tail = sum(p.shape[0] for p, _ in batches[:50])
    assert torch.equal(_counted(metric), _reference(preds[tail:], target[tail:], dtype))
    metric.update(*batches[0])
    metric.reset()  # a reset right after a batch, then nothing: an empty state
    assert not _counted(metric).any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_state_dict_round_trip(dtype: torch.dtype) -> None:
    """Loading replaces the state and whatever the loading metric held; the two metrics then count apart (the saved
    ``state_dict``'s tensors share memory with the saved metric's states).
    """
    preds, target = _data()
    batches = _batches(preds, target)
    saved = _fed(lambda: tv.VarlenAUROC(thresholds=dtype), batches[:100])
    saved.persistent(True)
    state = saved.state_dict()
    loaded = _fed(lambda: tv.VarlenAUROC(thresholds=dtype), batches[100:103])  # replaced by the load
    loaded.persistent(True)
    loaded.load_state_dict(state)
    for metric in (saved, loaded):
        for p, t in batches[100:]:
            metric.update(p, t)
    assert torch.equal(_counted(loaded), _reference(preds, target, dtype))
    assert torch.equal(_counted(saved), _reference(preds, target, dtype))
    assert torch.equal(saved.compute(), loaded.compute())


@pytest.mark.parametrize("dtype", DTYPES)
def test_copies_and_pickles_count_apart(dtype: torch.dtype) -> None:
    """A clone after every batch, a deep copy, a pickle and a shared-memory pickle (what ddp_spawn sends each rank)
    each hold the batches fed so far, once; the original and the copies go on independently.
    """
    preds, target = _data(4000, 1)
    sizes = [7, 1, 30, 500, 2, 60] * 10 + [4000 - 600 * 10]
    batches = _batches(preds, target, sizes)
    metric = tv.VarlenAUROC(thresholds=dtype)
    start = 0
    for p, t in batches[:20]:  # clone per batch, as a callback that snapshots the metric would
        metric.update(p, t)
        start += p.shape[0]
        snapshot = metric.clone()
        assert torch.equal(_counted(snapshot), _reference(preds[:start], target[:start], dtype))
    copies = [
        copy.deepcopy(metric),
        pickle.loads(pickle.dumps(metric)),
        pickle.loads(ForkingPickler.dumps(metric)),  # may share the counted state's storage
    ]
    for m in (metric, *copies):
        for p, t in batches[20:]:
            m.update(p, t)
    whole = tv.VarlenAUROC(thresholds=dtype)
    whole.update(preds, target)
    for m in (metric, *copies):
        assert torch.equal(_counted(m), _reference(preds, target, dtype))
        assert torch.equal(m.compute(), whole.compute())


def test_inputs_changed_in_place_after_update_change_nothing() -> None:
    """A caller that refills its input tensors (16-bit scores, bool labels) after ``update`` changes nothing."""
    preds, target = _data(600, 2)
    half, labels = preds.to(torch.bfloat16), target.bool()
    metric = tv.VarlenAUROC(thresholds=torch.bfloat16)
    buffer_p, buffer_t = torch.empty(60, dtype=torch.bfloat16), torch.empty(60, dtype=torch.bool)
    for start in range(0, 600, 60):
        buffer_p.copy_(half[start : start + 60])
        buffer_t.copy_(labels[start : start + 60])
        metric.update(buffer_p, buffer_t)
    buffer_p.fill_(0.5)
    buffer_t.fill_(True)
    assert torch.equal(_counted(metric), _reference(preds, target, torch.bfloat16))


def test_forward_and_multiclass_multilabel_count_exactly() -> None:
    """``forward`` per batch (its batch value and the epoch's), multiclass and multilabel with ``ignore_index``."""
    gen = torch.Generator().manual_seed(3)
    n, c = 800, 4
    mc_target = torch.randint(0, c, (n,), generator=gen)
    mc_preds = torch.softmax(torch.randn(n, c, generator=gen) + 2 * torch.nn.functional.one_hot(mc_target, c), 1)
    ml_target = torch.randint(0, 2, (n, c), generator=gen)
    ml_target[torch.rand(n, c, generator=gen) < 0.1] = -1
    ml_preds = torch.rand(n, c, generator=gen) * 0.8 + 0.2 * ml_target.clamp(min=0)
    cases = [
        (lambda: tv.VarlenMulticlassAUROC(num_classes=c, thresholds=torch.float16), mc_preds, mc_target),
        (
            lambda: tv.VarlenMultilabelAveragePrecision(num_labels=c, ignore_index=-1, thresholds=torch.bfloat16),
            ml_preds,
            ml_target,
        ),
        (lambda: tv.VarlenAUROC(thresholds=torch.float16), *_data(n, 4)),
    ]
    for make, preds, target in cases:
        batched, exact = make(), make()
        for start in range(0, n, 100):
            p, t = preds[start : start + 100], target[start : start + 100]
            one = make()
            one.update(p, t)
            assert torch.equal(batched(p, t), one.compute())
        exact.update(preds, target)
        assert torch.equal(batched.compute(), exact.compute())


def test_collection_compute_groups_see_every_batch() -> None:
    """A ``MetricCollection`` compares states to form compute groups after the first batch and shares them after
    each: float16 and bfloat16 histograms must not be grouped, and every member's value is its own.
    """
    preds, target = _data(5000, 6)
    members = {
        "auroc16": lambda: tv.VarlenAUROC(thresholds=torch.float16),
        "auroc_bf16": lambda: tv.VarlenAUROC(thresholds=torch.bfloat16),
        "ap_bf16": lambda: tv.VarlenAveragePrecision(thresholds=torch.bfloat16),
    }
    collection = MetricCollection({k: make() for k, make in members.items()})
    for start in range(0, 5000, 64):
        collection.update(preds[start : start + 64], target[start : start + 64])
    values = collection.compute()
    for key, make in members.items():
        alone = make()
        alone.update(preds, target)
        assert torch.equal(values[key], alone.compute()), key


def case_small_batch_sync(rank: int, world: int, dtype_name: str) -> list[float]:
    """Rank r feeds its share in small batches (r = 1 only 20 rows), syncs, then goes on and syncs again; ``forward``
    in between.
    """
    dtype = getattr(torch, dtype_name)
    preds, target = _data(3000, 7)
    share = slice(0, 2980) if rank == 0 else slice(2980, 3000)
    p, t = preds[share], target[share]
    metric = tv.VarlenAUROC(thresholds=dtype, sync_timeout=20)
    step = 37 if rank == 0 else 20
    for start in range(0, p.shape[0], step):
        metric.update(p[start : start + step], t[start : start + step])
    first = float(metric.compute())
    more_p, more_t = preds[rank * 10 : rank * 10 + 10], target[rank * 10 : rank * 10 + 10]
    metric(more_p, more_t)
    return [first, float(metric.compute())]


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_small_batches_sync_across_two_ranks(pool: DistPool, dtype_name: str) -> None:
    dtype = getattr(torch, dtype_name)
    preds, target = _data(3000, 7)
    first = f32(roc_auc_score(target, preds.to(dtype).double()))
    union_p, union_t = torch.cat([preds, preds[:20]]), torch.cat([target, target[:20]])
    second = f32(roc_auc_score(union_t, union_p.to(dtype).double()))
    for values in pool.values(case_small_batch_sync, 2, dtype_name):
        assert values == pytest.approx([first, second], abs=1e-12)


@pytest.mark.parametrize("uint16", [True, False], ids=["uint16 view", "int16 view and mask"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_histogram_into_counts_every_bit_pattern(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, uint16: bool
) -> None:
    """Both ways to the raw pattern (the uint16 view where torch has it on the CPU, the masked int16 view elsewhere)
    count every one of the 65,536 patterns, signs and zeros included, one problem or several, with ignored entries.
    """
    if not uint16:
        monkeypatch.setattr(_hist, "_UINT16", None)
    elif _hist._UINT16 is None:
        pytest.skip("this torch has no uint16")
    patterns = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype)
    gen = torch.Generator().manual_seed(8)
    scores = torch.cat([patterns, patterns[torch.randint(0, 65536, (5000,), generator=gen)]])
    labels = torch.randint(0, 2, (scores.shape[0],), generator=gen)
    state = torch.zeros(2, 65536, dtype=torch.int64)
    _hist.histogram_into(state, scores, labels.bool(), dtype)
    assert torch.equal(state, _reference(scores, labels, dtype))
    columns = torch.stack([scores, scores.flip(0), -scores], dim=1)
    column_labels = torch.stack([labels, 1 - labels, labels], dim=1).to(torch.int8)
    column_labels[::7, 1] = -1  # not counted
    wide = torch.zeros(3, 2, 65536, dtype=torch.int64)
    _hist.histogram_into(wide, columns, column_labels, dtype)
    for k in range(3):
        kept = column_labels[:, k] >= 0
        assert torch.equal(wide[k], _reference(columns[kept, k], column_labels[kept, k], dtype))


def test_class_histogram_into_is_the_one_hot_count() -> None:
    """Multiclass rows counted with the class added once per row are the one-hot count, classes outside 0 .. K-1
    (what an unvalidated batch may hold) negative in every column as before.
    """
    gen = torch.Generator().manual_seed(9)
    preds = torch.rand(3000, 5, generator=gen) * 2 - 1
    classes = torch.randint(-1, 6, (3000,), generator=gen)
    for dtype in DTYPES:
        got = _hist.class_histogram_into(torch.zeros(5, 2, 65536, dtype=torch.int64), preds, classes, dtype)
        for k in range(5):
            assert torch.equal(got[k], _reference(preds[:, k], classes == k, dtype))


def test_reading_the_states_writes_nothing() -> None:
    """``hist`` is a plain state: reading it (as torchmetrics, Lightning or a user does) changes nothing, nor does
    ``compute()``; the value is the one of all batches.
    """
    preds, target = _data(640, 8)
    metric = tv.VarlenAUROC(thresholds=torch.bfloat16)
    for start in range(0, 640, 64):
        metric.update(preds[start : start + 64], target[start : start + 64])
    hist = metric.hist.clone()
    assert torch.equal(hist, _reference(preds, target, torch.bfloat16))
    for _ in range(2):
        assert torch.equal(metric.hist, hist)
    rounded = preds.to(torch.bfloat16).double()
    assert float(metric.compute()) == pytest.approx(f32(roc_auc_score(target, rounded)), abs=1e-12)
    assert torch.equal(metric.hist, hist)
