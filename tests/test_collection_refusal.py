"""A batch one member of a ``VarlenCollection`` refuses reaches none of them: the package's metrics check it before
any member takes it, in ``update`` and ``forward``, so the loop can catch the error and go on with every member
exact (one process, and on two ranks over several epochs).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _dist import DistPool
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score
from torchmetrics.classification import BinaryAUROC

from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision, VarlenBestF1, VarlenCollection


def _batches(seed: int, count: int, size: int = 40) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        target = torch.randint(0, 2, (size,), generator=gen)
        out.append((torch.rand(size, generator=gen) * 0.7 + 0.3 * target, target))
    return out


def _reference(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    preds = torch.cat([p for p, _ in batches]).double().numpy()
    target = torch.cat([t for _, t in batches]).numpy()
    return {"auroc": f32(roc_auc_score(target, preds)), "ap": f32(average_precision_score(target, preds))}


def _mixed(order: tuple[str, ...]) -> VarlenCollection:
    """AUROC ignoring the label -1, AP without ``ignore_index`` (it refuses -1): separate states, so both take every
    batch (``compute_groups=False``), in ``order`` (a collection updates its members in the order of their names).
    """
    members = {"auroc": VarlenAUROC(ignore_index=-1, sync_timeout=20), "ap": VarlenAveragePrecision(sync_timeout=20)}
    return VarlenCollection({f"{i}_{name}": members[name] for i, name in enumerate(order)}, compute_groups=False)


def _values(metrics: VarlenCollection) -> dict[str, float]:
    return {name.split("_", 1)[1]: float(value) for name, value in metrics.compute().items()}


def _member(metrics: VarlenCollection, name: str) -> Any:
    return next(metric for key, metric in metrics.items() if key.endswith(name))


def _with_a_refused_label(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    preds, target = batch
    target = target.clone()
    target[3] = -1
    return preds, target


@pytest.mark.parametrize("order", [("auroc", "ap"), ("ap", "auroc")])
@pytest.mark.parametrize("call", ["update", "forward"])
def test_a_batch_one_member_refuses_reaches_no_member(order: tuple[str, ...], call: str) -> None:
    batches = _batches(0, 5)
    metrics = _mixed(order)
    step = metrics.update if call == "update" else metrics.forward
    for i, batch in enumerate(batches):
        step(*batch)
        if i == 1:  # the AP member refuses the label -1 (its error); the AUROC member would have taken the batch
            with pytest.raises(ValueError, match="target"):
                step(*_with_a_refused_label(batches[4]))
    values = _values(metrics)
    expected = _reference(batches)
    assert values["auroc"] == pytest.approx(expected["auroc"], abs=1e-7)
    assert values["ap"] == pytest.approx(expected["ap"], abs=1e-7)
    assert sum(p.numel() for p in _member(metrics, "auroc").preds) == sum(p.numel() for p, _ in batches)
    assert metrics.sync_report.rejected == 40
    assert metrics.sync_report.kept == 200


def test_a_member_that_takes_no_weights_refuses_a_weighted_batch_for_all() -> None:
    """The first batch has weights that best F1 does not take: AUROC does not keep it either, so the epoch goes on
    without weights (before, AUROC had decided on a weighted epoch and refused every later batch).
    """
    batches = _batches(1, 3)
    metrics = VarlenCollection({"auroc": VarlenAUROC(), "f1": VarlenBestF1()})
    with pytest.raises(ValueError, match="does not take `sample_weight`"):
        metrics.update(*batches[0], sample_weight=torch.ones(40))
    assert metrics["auroc"].preds == []
    for batch in batches:
        metrics.update(*batch)
    assert float(metrics.compute()["auroc"]) == pytest.approx(_reference(batches)["auroc"], abs=1e-7)


def test_a_check_that_no_update_used_is_not_kept() -> None:
    """A member checked the batch, then another refused it: the first keeps no record of the batch (the same tensors
    refilled with bad values and passed again are checked again, and refused).
    """
    metrics = _mixed(("auroc", "ap"))
    preds, target = _with_a_refused_label(_batches(2, 1)[0])
    with pytest.raises(ValueError, match="target"):  # AUROC checked it (and ignores -1), AP refused it
        metrics.update(preds, target)
    assert _member(metrics, "auroc").preds == []
    preds[0], target[3] = float("nan"), 1  # the same tensors refilled: now AUROC refuses them
    with pytest.raises(ValueError, match="finite"):
        metrics.update(preds, target)
    assert _member(metrics, "auroc").preds == []


def case_refused_then_exact(rank: int, world: int, call: str) -> list[dict[str, float]]:
    """Three epochs; in the first, rank 1 gets a batch its AP member refuses, catches the error and goes on."""
    metrics = _mixed(("auroc", "ap"))
    step = metrics.update if call == "update" else metrics.forward
    out = []
    for epoch in range(3):
        batches = _batches(100 * epoch + rank, 4)
        for i, batch in enumerate(batches):
            step(*batch)
            if epoch == 0 and rank == 1 and i == 2:
                with pytest.raises(ValueError, match="target"):
                    step(*_with_a_refused_label(batch))
        out.append(_values(metrics))
        metrics.reset()
    return out


@pytest.mark.distributed
@pytest.mark.parametrize("call", ["update", "forward"])
def test_a_refused_batch_on_one_rank_leaves_every_epoch_exact(pool: DistPool, call: str) -> None:
    results = pool.values(case_refused_then_exact, 2, call)
    for epoch in range(3):
        expected = _reference([b for rank in range(2) for b in _batches(100 * epoch + rank, 4)])
        for per_rank in results:
            assert per_rank[epoch]["auroc"] == pytest.approx(expected["auroc"], abs=1e-7)
            assert per_rank[epoch]["ap"] == pytest.approx(expected["ap"], abs=1e-7)


def test_the_checks_run_once_per_member_and_batch(monkeypatch: Any) -> None:
    """The members' own updates use the check made before (the same tensors): a batch is validated once."""
    import torchmetrics_varlen._core.intake as intake

    calls = []
    original = intake.check_batch

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(type(args[0]).__name__)
        return original(*args, **kwargs)

    monkeypatch.setattr(intake, "check_batch", counting)
    metrics = _mixed(("auroc", "ap"))
    metrics.update(*_batches(3, 1)[0])
    assert sorted(calls) == ["VarlenAUROC", "VarlenAveragePrecision"]


@pytest.mark.parametrize(
    ("first", "second", "batch"),
    [
        ({"ignore_index": -1}, {}, "ignored"),
        ({"validate_args": False}, {}, "plain"),
        ({"normalization": None}, {"normalization": "sigmoid"}, "logits"),
        ({"dataset_size": 120}, {}, "plain"),  # the 3 x 40 rows fed: one process never pads (88ed689)
    ],
)
def test_members_that_take_batches_by_other_rules_share_no_compute_group(
    first: dict[str, Any], second: dict[str, Any], batch: str
) -> None:
    """Torchmetrics groups members whose states are equal after the first batch; a group's later batches reach its
    first member only. Members whose settings change how a batch is stored are kept apart, so each keeps the value it
    has alone (before, the AP member took AUROC's rules: a label -1 it refuses, logits left raw, padding dropped).
    """
    makers = {"a": lambda: VarlenAUROC(**first), "b": lambda: VarlenAveragePrecision(**second)}
    metrics = VarlenCollection({name: make() for name, make in makers.items()})
    taken = []
    for i, (preds, target) in enumerate(_batches(4, 3)):
        if i and batch == "logits":
            preds = (preds - 0.5) * 8
        if i and batch == "ignored":
            target = target.clone()
            target[0] = -1
        if all(_takes(make(), preds, target) for make in makers.values()):
            metrics.update(preds, target)
            taken.append((preds, target))
        else:  # one member alone refuses it: the collection refuses it whole
            with pytest.raises(ValueError, match="target"):
                metrics.update(preds, target)
    assert len(metrics.compute_groups) == 2
    values = metrics.compute()
    for name, make in makers.items():
        alone = make()
        for preds, target in taken:
            alone.update(preds, target)
        assert float(values[name]) == float(alone.compute())


def _takes(metric: Any, preds: torch.Tensor, target: torch.Tensor) -> bool:
    try:
        metric.update(preds, target)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("names", [("a_wrapped", "b_package"), ("b_wrapped", "a_package")])
def test_a_forward_that_fails_after_its_update_leaves_every_member_as_it_was(names: tuple[str, str]) -> None:
    """The package's metric takes the batch, then its value fails (a sample id with two targets within the batch);
    the wrapped torchmetrics metric, whichever comes first, must not keep it (before, it did when it came first, and
    every later compute() of the epoch failed on the conflicting id).
    """
    preds, target = _batches(5, 1)[0]
    metrics = VarlenCollection({names[0]: BinaryAUROC(), names[1]: VarlenAUROC()})
    metrics.update(preds, target, sample_ids=torch.arange(40))
    with pytest.raises(ValueError, match="Sample id 50 was seen twice"):
        metrics(preds[:4], torch.tensor([0, 1, 0, 1]), sample_ids=torch.tensor([50, 50, 51, 52]))
    expected = _reference([(preds, target)])["auroc"]
    for value in metrics.compute().values():
        assert float(value) == pytest.approx(expected, abs=1e-7)
    assert metrics.sync_report.rejected == 4


@pytest.mark.parametrize("call", ["update", "forward"])
def test_a_misspelt_keyword_is_refused_not_dropped(call: str) -> None:
    """``MetricCollection`` drops a keyword no metric takes; a misspelt ``sample_id=`` would silently turn the dedup
    off. The collection refuses it (nothing taken, the rows counted as rejected), the loop goes on, and a batch fed
    twice with the right keyword is counted once.
    """
    batches = _batches(11, 3, size=16)
    ids = [torch.arange(16 * i, 16 * (i + 1)) for i in range(3)]
    collection = VarlenCollection({"auroc": VarlenAUROC(), "ap": VarlenAveragePrecision()})
    feed = collection.update if call == "update" else collection
    method = "update" if call == "update" else "forward"
    with pytest.raises(TypeError, match=rf"{method}\(\) got the keyword argument\(s\) \['sample_id'\], which none"):
        feed(*batches[0], sample_id=ids[0])
    for (preds, target), batch_ids in zip([*batches, batches[0]], [*ids, ids[0]], strict=True):
        feed(preds=preds, target=target, sample_ids=batch_ids)  # keywords the metrics take pass
    values = {k: float(v) for k, v in collection.compute().items()}
    assert values == pytest.approx(_reference(batches), abs=1e-6)
    assert collection.sync_report is not None
    assert collection.sync_report.rejected == 16
    assert collection.sync_report.kept == 48


def _accuracy(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    from sklearn.metrics import accuracy_score

    preds = torch.cat([p for p, _ in batches]).numpy()
    target = torch.cat([t for _, t in batches]).numpy()
    return f32(accuracy_score(target, preds >= 0.5))


@pytest.mark.parametrize("order", [("auroc", "acc"), ("acc", "auroc")])
@pytest.mark.parametrize("call", ["update", "forward"])
def test_a_batch_a_wrapped_torchmetrics_metric_refuses_reaches_no_member(order: tuple[str, ...], call: str) -> None:
    """``BinaryAccuracy`` refuses the label -1 that ``VarlenAUROC(ignore_index=-1)`` accepts, inside its own update:
    whichever member comes first, neither keeps the batch (before, the AUROC member kept it when updated first), the
    rows count as rejected in the collection and in each member, and the loop goes on exact over several epochs.
    """
    from torchmetrics.classification import BinaryAccuracy

    members = {"auroc": lambda: VarlenAUROC(ignore_index=-1), "acc": BinaryAccuracy}
    metrics = VarlenCollection({f"{i}_{name}": members[name]() for i, name in enumerate(order)}, compute_groups=False)
    step = metrics.update if call == "update" else metrics.forward
    for epoch in range(3):
        batches = _batches(10 + epoch, 4)
        for i, batch in enumerate(batches):
            step(*batch)
            if i in (0, 2):  # (torchmetrics raises a RuntimeError)
                with pytest.raises(RuntimeError, match="target"):
                    step(*_with_a_refused_label(batches[3]))
        values = _values(metrics)
        assert values["auroc"] == pytest.approx(_reference(batches)["auroc"], abs=1e-7)
        assert values["acc"] == pytest.approx(_accuracy(batches), abs=1e-7)
        assert sum(p.numel() for p in _member(metrics, "auroc").preds) == 160
        assert metrics.sync_report.rejected == 80
        for _, member in metrics.items():
            assert member.sync_report.rejected == 80
            assert member.sync_report.kept == 160
        metrics.reset()


def test_a_compute_group_that_took_a_refused_batch_is_put_back_whole() -> None:
    """Two 16-bit members share one compute group (its first member takes each batch, the other reads the same
    states); a third member, after them in name order, refuses the label -1 they ignore. The shared histogram and
    counters are put back in place, so both members of the group keep scikit-learn's values (scores k / 64 are exact
    in bfloat16, so the 16-bit mode gives the exact value).
    """
    gen = torch.Generator().manual_seed(7)
    batches = []
    for _ in range(4):
        target = torch.randint(0, 2, (32,), generator=gen)
        batches.append((torch.randint(0, 65, (32,), generator=gen) / 64, target))
    metrics = VarlenCollection(
        {
            "a": VarlenAUROC(thresholds=torch.bfloat16, ignore_index=-1),
            "b": VarlenAveragePrecision(thresholds=torch.bfloat16, ignore_index=-1),
            "c": VarlenAveragePrecision(),
        }
    )
    for i, batch in enumerate(batches):
        metrics.update(*batch)
        if i == 1:
            assert sorted(map(sorted, metrics.compute_groups.values())) == [["a", "b"], ["c"]]
            with pytest.raises(ValueError, match="target"):
                metrics.update(*_with_a_refused_label(batches[3]))
    values = metrics.compute()
    expected = _reference(batches)
    assert float(values["a"]) == pytest.approx(expected["auroc"], abs=1e-7)
    assert float(values["b"]) == pytest.approx(expected["ap"], abs=1e-7)
    assert float(values["c"]) == pytest.approx(expected["ap"], abs=1e-7)
    assert metrics.sync_report.rejected == 32


@pytest.mark.parametrize("call", ["update", "forward"])
def test_a_refused_batch_keeps_the_members_cached_values(call: str) -> None:
    """A batch the collection refuses leaves its members as they were, their cached values too, so that a rank that
    refused a batch after ``compute()`` does not sync again alone (guard.md): the next ``compute()`` reads the cache.
    """
    from torchmetrics.classification import BinaryAccuracy

    metrics = VarlenCollection({"acc": BinaryAccuracy(), "auroc": VarlenAUROC(ignore_index=-1)})
    batches = _batches(20, 2)
    for batch in batches:
        metrics.update(*batch)
    first = {name: float(value) for name, value in metrics.compute().items()}
    with pytest.raises(RuntimeError, match="target"):
        getattr(metrics, call)(*_with_a_refused_label(batches[0]))
    assert all(member._computed is not None for _, member in metrics.items())
    assert {name: float(value) for name, value in metrics.compute().items()} == first
    assert first["auroc"] == pytest.approx(_reference(batches)["auroc"], abs=1e-7)


def test_a_wrapper_member_that_took_a_refused_batch_is_put_back() -> None:
    """``ClasswiseWrapper(Varlen(metric))`` holds its states two metrics down; updated first (name order), it is put
    back when the multiclass AUROC after it refuses a NaN score, and its per-class recall stays scikit-learn's.
    """
    from sklearn.metrics import recall_score
    from torchmetrics.classification import MulticlassAccuracy
    from torchmetrics.wrappers import ClasswiseWrapper

    from torchmetrics_varlen import Varlen, VarlenMulticlassAUROC

    gen = torch.Generator().manual_seed(0)
    metrics = VarlenCollection(
        {
            "a_recall": ClasswiseWrapper(Varlen(MulticlassAccuracy(num_classes=3, average=None))),
            "b_auroc": VarlenMulticlassAUROC(num_classes=3),
        }
    )
    kept = []
    for i in range(4):
        batch = (torch.rand(16, 3, generator=gen).softmax(1), torch.randint(0, 3, (16,), generator=gen))
        metrics.update(*batch)
        kept.append(batch)
        if i == 1:
            bad = batch[0].clone()
            bad[0, 0] = float("nan")
            with pytest.raises(ValueError, match="finite"):
                metrics.update(bad, batch[1])
    values = metrics.compute()
    preds, target = torch.cat([p for p, _ in kept]), torch.cat([t for _, t in kept])
    recall = [float(values[f"varlen_{k}"]) for k in range(3)]
    assert recall == pytest.approx(f32(recall_score(target, preds.argmax(1), average=None)), abs=1e-7)


def test_an_update_hashes_no_metric(monkeypatch: Any) -> None:
    """The ``Metric.__hash__`` of torchmetrics hashes every tensor of every state: a collection that put a metric in
    a set per batch (``Module.modules()`` does) would cost O(stored pieces) per batch, O(batches^2) an epoch.
    """
    from torchmetrics import Metric

    from torchmetrics_varlen import Varlen

    calls = []
    original = Metric.__hash__

    def counting(self: Any) -> int:
        calls.append(type(self).__name__)
        return original(self)

    metrics = VarlenCollection({"a": Varlen(BinaryAUROC(ignore_index=-1)), "b": VarlenAveragePrecision()})
    batches = _batches(30, 3)
    metrics.update(*batches[0])
    monkeypatch.setattr(Metric, "__hash__", counting)
    for batch in batches[1:]:
        metrics.update(*batch)
    with pytest.raises(ValueError, match="target"):
        metrics.update(*_with_a_refused_label(batches[0]))
    assert calls == []
