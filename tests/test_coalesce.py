"""Stored batches are merged as they arrive (``_core/intake.py``): the number of stored pieces stays small whatever the
batch size, and every value is the bits of the same data in one piece (or, with mixed float widths, of the same
pieces never merged). Single process, and on 2 / 3 gloo ranks for every way to sync.
"""

from __future__ import annotations

import copy
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from _data import flat_tensors
from _dist import DistPool
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score
from torchmetrics import MetricCollection

import torchmetrics_varlen as tv
from torchmetrics_varlen._core import intake as _coalesce

C = 4
ROW_STATES = ("preds", "target", "ids", "ids_sub", "weight", "groups")


def _data(kind: str, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    if kind == "multiclass":
        target = torch.randint(0, C, (n,), generator=gen)
        return torch.softmax(torch.randn(n, C, generator=gen), dim=1), target
    if kind == "multilabel":
        return torch.rand(n, C, generator=gen), torch.randint(0, 2, (n, C), generator=gen)
    target = torch.randint(0, 2, (n,), generator=gen)
    return torch.round(torch.rand(n, generator=gen) * 200) / 200, target  # ties across pieces


def _sizes(n: int, seed: int = 1) -> list[int]:
    """Batch sizes 0 .. 9 (empty batches included) summing to ``n``."""
    gen = torch.Generator().manual_seed(seed)
    sizes: list[int] = []
    while sum(sizes) < n:
        sizes.append(min(int(torch.randint(0, 10, (1,), generator=gen)), n - sum(sizes)))
    return sizes


def _feed(metric: Any, sizes: list[int], *columns: torch.Tensor, call: str = "update", **named: torch.Tensor) -> Any:
    start = 0
    for size in sizes:
        part = slice(start, start + size)
        getattr(metric, call)(*(c[part] for c in columns), **{k: v[part] for k, v in named.items()})
        start += size
    return metric


def _stored(metric: Any) -> dict[str, int]:
    """Pieces held by each non-empty row state."""
    return {
        n: len(getattr(metric, n))
        for n in ROW_STATES
        if isinstance(getattr(metric, n, None), list) and getattr(metric, n)
    }


def _bound(batches: int) -> int:
    """Fewer than FAN_IN pieces not merged yet, plus one piece per FAN_IN batches at most (merged further when the
    merged scores stay small enough).
    """
    return (_coalesce.FAN_IN - 1) + batches // _coalesce.FAN_IN + 1


def _same(a: Any, b: Any) -> bool:
    fa, fb = flat_tensors(a), flat_tensors(b)
    return len(fa) == len(fb) and all(torch.equal(x, y) for x, y in zip(fa, fb, strict=True))


CASES: dict[str, tuple[str, Callable[[], Any], tuple[str, ...]]] = {
    "auroc": ("binary", lambda: tv.VarlenAUROC(), ()),
    "auroc ids": ("binary", lambda: tv.VarlenAUROC(), ("sample_ids",)),
    "auroc weights": ("binary", lambda: tv.VarlenAUROC(), ("sample_weight",)),
    "ap ids and weights": ("binary", lambda: tv.VarlenAveragePrecision(), ("sample_ids", "sample_weight")),
    "multiclass auroc": ("multiclass", lambda: tv.VarlenMulticlassAUROC(num_classes=C), ()),
    "multiclass ap ignore_index": (
        "multiclass",
        lambda: tv.VarlenMulticlassAveragePrecision(num_classes=C, ignore_index=1),
        (),
    ),
    "multilabel auroc ignore_index": (
        "multilabel",
        lambda: tv.VarlenMultilabelAUROC(num_labels=C, ignore_index=0, average="micro"),
        (),
    ),
    "roc": ("binary", lambda: tv.VarlenROC(), ()),
    "precision recall curve ids": ("binary", lambda: tv.VarlenPrecisionRecallCurve(), ("sample_ids",)),
    "best f1": ("binary", lambda: tv.VarlenBestF1(), ()),
    "group auroc": ("binary", lambda: tv.VarlenGroupAUROC(return_per_group=True), ("groups",)),
    "group auroc ids": ("binary", lambda: tv.VarlenGroupAUROC(), ("groups", "sample_ids")),
    # the 12,000 rows fed: one process never pads (88ed689); the clones' second pass is cut whole, as padding
    "dataset_size": ("binary", lambda: tv.VarlenAUROC(dataset_size=12_000), ()),
}


def _columns(kind: str, extras: tuple[str, ...], n: int) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
    preds, target = _data(kind, n)
    gen = torch.Generator().manual_seed(2)
    named: dict[str, torch.Tensor] = {}
    if "sample_ids" in extras:  # every id twice, the copies identical: dedup keeps each once
        named["sample_ids"] = torch.arange(n) % (n // 2)
        preds, target = preds[named["sample_ids"]], target[named["sample_ids"]]
    if "sample_weight" in extras:
        named["sample_weight"] = torch.rand(n, generator=gen, dtype=torch.float64)
    if "groups" in extras:
        named["groups"] = torch.randint(0, 3, (n,), generator=gen)
    return (preds, target), named


@pytest.mark.parametrize("name", sorted(CASES))
def test_pieces_stay_few_and_values_are_those_of_one_piece(name: str) -> None:
    kind, make, extras = CASES[name]
    n = 12_000
    columns, named = _columns(kind, extras, n)
    sizes = _sizes(n)
    many = _feed(make(), sizes, *columns, **named)
    one = make()
    one.update(*columns, **named)
    stored = _stored(many)
    assert stored["preds"] <= _bound(len(sizes)) < len(sizes) / 10
    assert len(set(stored.values())) == 1  # every row state merged at the same positions
    for state in stored:  # the same rows, in the same order, as the batches appended them
        assert torch.equal(torch.cat(getattr(many, state)), torch.cat(getattr(one, state)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some classes of a problem may lack positives: the same warning both ways
        assert _same(many.compute(), one.compute())
        if kind != "binary":
            return
        # the copies are counted the same way, and keep merging on the pieces they were given
        for clone in (copy.deepcopy(many), pickle.loads(pickle.dumps(many))):
            _feed(clone, sizes[:300], *(c[:n] for c in columns), **{k: v[:n] for k, v in named.items()})
            assert _stored(clone)["preds"] <= _bound(len(sizes) + 300)


def test_mixed_float_widths_give_the_value_of_pieces_never_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge promotes mixed widths as the concatenation at compute time does: the same bits as no merge at all."""
    preds, target = _data("binary", 6000)
    sizes = _sizes(6000, seed=4)
    dtypes = (torch.float16, torch.float32, torch.bfloat16, torch.float64)
    widths = [p.to(dtypes[i % 4]) for i, p in enumerate(torch.split(preds, sizes))]

    def feed(metric: Any) -> Any:
        for p, t in zip(widths, torch.split(target, sizes), strict=True):
            metric.update(p, t)
        return metric

    for make in (tv.VarlenAUROC, tv.VarlenAveragePrecision, tv.VarlenROC):
        merged = feed(make())
        assert len(merged.preds) < len(sizes) / 10
        with monkeypatch.context() as patch:
            patch.setattr(_coalesce, "FAN_IN", 10**9)
            unmerged = feed(make())
        assert len(unmerged.preds) == len(sizes)
        assert _same(merged.compute(), unmerged.compute())


def test_forward_reset_and_loaded_states_keep_merging() -> None:
    preds, target = _data("binary", 8000)
    sizes = _sizes(8000, seed=5)
    metric = tv.VarlenAUROC()
    batch_values = _batch_values(metric, sizes, preds, target)
    assert len(metric.preds) <= _bound(len(sizes))
    one = tv.VarlenAUROC()
    one.update(preds, target)
    assert torch.equal(metric.compute(), one.compute())
    single = tv.VarlenAUROC()
    start = 0
    for size, value in zip(sizes, batch_values, strict=True):  # each batch's own value, as forward returned it
        if size and value is not None and not torch.isnan(value):
            single.reset()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                single.update(preds[start : start + size], target[start : start + size])
                assert torch.equal(value, single.compute())
        start += size

    # A loaded checkpoint's pieces are left as they are; the batches after it are merged again.
    metric.persistent(True)
    restored = tv.VarlenAUROC()
    restored.persistent(True)
    restored.load_state_dict(metric.state_dict())
    loaded = len(restored.preds)
    assert loaded == len(metric.preds)
    _feed(restored, sizes, preds, target)
    assert len(restored.preds) <= loaded + _bound(len(sizes))
    both = tv.VarlenAUROC()
    both.update(torch.cat([preds, preds]), torch.cat([target, target]))
    assert torch.equal(restored.compute(), both.compute())

    metric.reset()
    assert metric.preds == []
    _feed(metric, sizes, preds, target)
    assert len(metric.preds) <= _bound(len(sizes))
    assert torch.equal(metric.compute(), one.compute())


def _batch_values(metric: Any, sizes: list[int], preds: torch.Tensor, target: torch.Tensor) -> list[Any]:
    values, start = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one-class batches: their AUROC is undefined, as torchmetrics says
        for size in sizes:
            values.append(metric(preds[start : start + size], target[start : start + size]))
            start += size
    return values


def test_compute_group_members_share_the_merged_states() -> None:
    preds, target = _data("binary", 9000)
    sizes = _sizes(9000, seed=6)
    for collection in (
        MetricCollection({"auroc": tv.VarlenAUROC(), "ap": tv.VarlenAveragePrecision(), "roc": tv.VarlenROC()}),
        tv.VarlenCollection({"auroc": tv.VarlenAUROC(), "ap": tv.VarlenAveragePrecision()}),
    ):
        _feed(collection, sizes, preds, target)
        members = dict(collection.items(keep_base=True))
        first = next(iter(members.values()))
        assert len(first.preds) <= _bound(len(sizes))
        values = collection.compute()
        for key, member in members.items():
            one = type(member)()
            one.update(preds, target)
            assert _same(values[key], one.compute())


def test_merging_skips_states_it_cannot_concatenate() -> None:
    """Pieces that torch.cat refuses (here trailing shapes that differ) are left alone: nothing raises at update."""
    lists = [[torch.zeros(2, 3)] * (_coalesce.FAN_IN - 1) + [torch.zeros(2, 4)], [torch.zeros(2)] * _coalesce.FAN_IN]
    assert not _coalesce._merge_tail(lists)
    assert [len(s) for s in lists] == [_coalesce.FAN_IN] * 2
    aligned = [[torch.arange(3)] * _coalesce.FAN_IN, [torch.arange(3.0)] * _coalesce.FAN_IN]
    assert _coalesce._merge_tail(aligned)
    assert [len(s) for s in aligned] == [1, 1]
    assert torch.equal(aligned[0][0], torch.arange(3).repeat(_coalesce.FAN_IN))


# ---------------------------------------------------------------------------- every way to sync, on 2 and 3 ranks


def case_sync(rank: int, world: int, n: int, how: str) -> dict[str, Any]:
    preds, target = _data("binary", n, seed=9)
    gen = torch.Generator().manual_seed(3)
    weight = torch.rand(n, generator=gen, dtype=torch.float64)
    ids = torch.arange(n)
    mine = torch.arange(rank, n, world)
    mine = torch.cat([mine, mine[:50]])  # padding-like copies of this rank's first ids
    kwargs: dict[str, Any] = {"sync_timeout": 30}
    kwargs.update({"gather": {}, "on_rank": {"compute_on_rank": 0}, "sharded": {"compute_sharded": True}}[how])
    out: dict[str, Any] = {}
    for name, cls in (("auroc", tv.VarlenAUROC), ("ap", tv.VarlenAveragePrecision)):
        metric = cls(**kwargs)
        named = {"sample_ids": ids[mine]}
        if how != "sharded":
            named["sample_weight"] = weight[mine]
        _feed(metric, _sizes(mine.numel(), seed=rank), preds[mine], target[mine], **named)
        out[name + "_pieces"] = len(metric.preds)
        out[name + "_batches"] = len(_sizes(mine.numel(), seed=rank))
        out[name] = metric.compute().item()
    return out


@pytest.mark.distributed
@pytest.mark.parametrize("how", ["gather", "on_rank", "sharded"])
@pytest.mark.parametrize("world", [2, 3])
def test_merged_pieces_sync_to_the_exact_value(pool: DistPool, world: int, how: str) -> None:
    n = 9000
    preds, target = _data("binary", n, seed=9)
    weight = (
        None if how == "sharded" else torch.rand(n, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    )
    expected = {
        "auroc": roc_auc_score(target, preds, sample_weight=weight),
        "ap": average_precision_score(target, preds, sample_weight=weight),
    }
    outcomes = pool.values(case_sync, world, n, how)
    for out in outcomes:
        for name in ("auroc", "ap"):
            assert out[name] == pytest.approx(f32(expected[name]), abs=1e-6)
            assert out[name] == outcomes[0][name]
            assert out[name + "_pieces"] <= _bound(out[name + "_batches"]) < out[name + "_batches"] / 5
