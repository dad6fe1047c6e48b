"""Nothing changes on read or copy (issue 38): ``deepcopy`` and pickling leave the source as it was, wrapping a
metric in ``Varlen`` leaves the user's metric object as it was, and one metric's update does not forget another
metric's sync.
"""

from __future__ import annotations

import copy
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from _data import scores_and_labels
from _dist import DistPool, count_syncs
from sklearn.metrics import accuracy_score, average_precision_score, roc_auc_score
from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import BinaryAccuracy, BinaryAUROC

import torchmetrics_varlen as tv
from torchmetrics_varlen import Varlen, VarlenCollection
from torchmetrics_varlen._core.guarded_sync import _fingerprint, _unchanged

N = 300


def _data(seed: int = 0) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (N,), generator=gen)
    preds = (torch.rand(N, generator=gen) * 0.7 + 0.3 * target).clamp(0, 1)
    return preds, target


def _look(obj: Any, path: str = "", out: dict[str, Any] | None = None, seen: set[int] | None = None) -> dict[str, Any]:
    """Everything ``obj`` holds, recursively, by path: each tensor by identity, storage and content; each object
    (metrics, modules, the ledger, reports) by identity and its attributes.
    """
    out = {} if out is None else out
    seen = set() if seen is None else seen
    if isinstance(obj, Tensor):
        out[path] = ("tensor", id(obj), obj.dtype, str(obj.device), tuple(obj.shape), obj.data_ptr(), obj.tolist())
    elif isinstance(obj, (list, tuple)):
        out[path] = (type(obj).__name__, id(obj) if isinstance(obj, list) else 0, len(obj))
        for i, v in enumerate(obj):
            _look(v, f"{path}[{i}]", out, seen)
    elif isinstance(obj, dict):
        out[path] = ("dict", id(obj), sorted(map(repr, obj)))
        for k, v in obj.items():
            _look(v, f"{path}[{k!r}]", out, seen)
    elif isinstance(obj, (set, frozenset)):
        out[path] = (type(obj).__name__, sorted(map(repr, obj)))
    elif obj is None or isinstance(obj, (bool, int, float, str, bytes, torch.dtype, torch.device)):
        out[path] = obj
    elif id(obj) in seen:
        out[path] = ("seen", id(obj))
    else:
        seen.add(id(obj))
        attrs = getattr(obj, "__dict__", None)
        out[path] = (type(obj).__name__, id(obj))
        if attrs is not None and not callable(obj) or isinstance(obj, torch.nn.Module):
            for k, v in (attrs or {}).items():
                _look(v, f"{path}.{k}", out, seen)
    return out


def _changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What differs between two looks: path -> (before, after)."""
    return {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)}


def _auroc_exact() -> Metric:
    return tv.VarlenAUROC()


def _auroc_16bit() -> Metric:
    return tv.VarlenAUROC(thresholds=torch.bfloat16)


def _auroc_sized() -> Metric:
    return tv.VarlenAUROC(dataset_size=N)


def _accuracy() -> Metric:
    return Varlen(BinaryAccuracy(), dataset_size=N)


def _collection() -> Metric:
    return VarlenCollection({"auroc": tv.VarlenAUROC(), "acc": BinaryAccuracy()})  # type: ignore[return-value]


def _value(metric: Any) -> float:
    value = metric.compute()
    return float(value["auroc"] + value["acc"]) if isinstance(value, dict) else float(value)


def _reference(factory: Callable[[], Metric], preds: Tensor, target: Tensor) -> float:
    scores = preds.bfloat16().float() if factory is _auroc_16bit else preds  # the 16-bit mode ranks 16-bit scores
    auroc, acc = roc_auc_score(target, scores), accuracy_score(target, preds >= 0.5)
    if factory is _accuracy:
        return float(acc)
    return float(auroc + acc) if factory is _collection else float(auroc)


FACTORIES = [_auroc_exact, _auroc_16bit, _auroc_sized, _accuracy, _collection]


@pytest.mark.parametrize("copier", ["deepcopy", "pickle", "clone"])
@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("computed", [False, True], ids=["updated", "computed"])
def test_copying_leaves_the_source_untouched(factory: Callable[[], Metric], copier: str, computed: bool) -> None:
    """Every state, attribute and the ledger of the source are the same objects with the same values after a copy;
    the copy, fed the rest of the data, computes what scikit-learn computes on all of it, and so does the source.
    """
    preds, target = _data()
    metric = factory()
    for start in range(0, 200, 50):
        metric.update(preds[start : start + 50], target[start : start + 50])
    if computed:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # dataset_size: "100 were never seen" (a partial pass)
            _value(metric)
    before = _look(metric)
    if copier == "deepcopy":
        twin = copy.deepcopy(metric)
    elif copier == "pickle":
        twin = pickle.loads(pickle.dumps(metric))
    else:
        twin = metric.clone()
    assert _changes(before, _look(metric)) == {}
    for m in (metric, twin):
        m.update(preds[200:], target[200:])
        assert _value(m) == pytest.approx(_reference(factory, preds, target), abs=1e-6)


_SYNC_SWITCHES = (
    "_to_sync",
    "sync_on_compute",
    "dist_sync_on_step",
    "dist_sync_fn",
    "process_group",
    "distributed_available_fn",
    "_should_unsync",
    "_is_synced",
    "compute_on_cpu",
    "compute_with_cache",
)


def test_wrapping_leaves_the_users_metric_settings_as_they_were() -> None:
    """``Varlen(metric)`` changes none of the settings torchmetrics syncs by on the user's metric, neither when
    wrapping nor after update, forward and compute; the wrapper still computes the value of every sample.
    """
    preds, target = _data(1)
    inner = BinaryAccuracy()
    before = {name: getattr(inner, name) for name in _SYNC_SWITCHES}
    acc = Varlen(inner, dataset_size=N)
    assert {name: getattr(inner, name) for name in _SYNC_SWITCHES} == before
    acc.update(preds[:100], target[:100])
    batch = acc(preds[100:200], target[100:200])
    assert float(batch) == pytest.approx(accuracy_score(target[100:200], preds[100:200] >= 0.5), abs=1e-6)
    acc.update(preds[200:], target[200:])
    assert float(acc.compute()) == pytest.approx(accuracy_score(target, preds >= 0.5), abs=1e-6)
    assert {name: getattr(inner, name) for name in _SYNC_SWITCHES} == before
    assert inner._computed is None  # no value of the wrapper's compute left cached on the user's metric
    assert float(inner.compute()) == pytest.approx(accuracy_score(target, preds >= 0.5), abs=1e-6)


def test_a_state_written_in_place_is_never_taken_for_its_sync() -> None:
    """A compute group's sync is reused only for the very same states holding what they held: a float state added
    to in place (weighted sums: no integer sum tells), a list with one more batch or another batch in its place, are
    changed; an inference tensor (no version counter) too.
    """
    weights, batches = torch.zeros(4, dtype=torch.float64), [torch.ones(3)]
    objs = [weights, batches]
    kept = [_fingerprint(o) for o in objs]
    assert _unchanged(kept, objs)
    weights += 0.5
    assert not _unchanged(kept, objs)
    kept = [_fingerprint(o) for o in objs]
    batches.append(torch.ones(2))
    assert not _unchanged(kept, objs)
    kept = [_fingerprint(o) for o in objs]
    batches[-1] = torch.ones(2)
    assert not _unchanged(kept, objs)
    with torch.inference_mode():
        made = torch.zeros(2)
        kept = [_fingerprint(made)]
        assert _unchanged(kept, [made])
        made += 1
    assert not _unchanged(kept, [made])


def case_group_sync_outlives_other_updates(rank: int, world: int) -> dict[str, Any]:
    preds, target = scores_and_labels(90, 4)
    part = slice(rank, 90, world)
    group = MetricCollection({"auroc": tv.VarlenAUROC(), "ap": tv.VarlenAveragePrecision()}, compute_groups=True)
    other = tv.VarlenAUROC()
    group.update(preds[part].float(), target[part])
    other.update(preds[part].float(), target[part])
    members = dict(group.items(keep_base=True, copy_state=False))
    auroc = float(members["auroc"].compute())
    other.update(preds[part].float(), target[part])  # another metric's batch: the group's states did not change
    ap, reused = count_syncs(members["ap"].compute)
    group.update(preds[part].float(), target[part])  # the group's own batch: its sync is stale
    members = dict(group.items(keep_base=True, copy_state=False))
    members["auroc"].reset()  # (a member's reset outside the collection: the group's states stay with "ap")
    again, moved = count_syncs(members["ap"].compute)
    return {"auroc": auroc, "ap": float(ap), "reused": reused, "again": float(again), "moved": moved}


@pytest.mark.distributed
def test_another_metrics_update_keeps_a_compute_groups_sync(pool: DistPool) -> None:
    """The second member of a compute group reuses the first one's sync (a check-in, no data) although another
    metric took a batch in between; after a batch of the group itself, the data moves again.
    """
    preds, target = scores_and_labels(90, 4)
    p = preds.float().double()
    twice_p, twice_t = torch.cat([p, p]), torch.cat([target, target])
    for out in pool.values(case_group_sync_outlives_other_updates, 2):
        assert out["auroc"] == pytest.approx(roc_auc_score(target, p), abs=1e-6)
        assert out["ap"] == pytest.approx(average_precision_score(target, p), abs=1e-6)
        assert out["reused"] == {"collectives": 1, "check_ins": 1}
        assert out["again"] == pytest.approx(average_precision_score(twice_t, twice_p), abs=1e-6)
        assert out["moved"] == {"collectives": 3, "check_ins": 1}


def _states(metric: Any) -> dict[str, Any]:
    """The metric's states (every member's, for a collection), each by identity and content, and its update count."""
    members = dict(metric.items(keep_base=True, copy_state=False)) if isinstance(metric, VarlenCollection) else {}
    out: dict[str, Any] = {}
    for prefix, m in members.items() or [("", metric)]:
        inner = m.metric if isinstance(m, Varlen) else None
        for owner in (m, inner) if inner is not None else (m,):
            for name in owner._defaults:
                _look(owner.__dict__.get(name), f"{prefix}.{type(owner).__name__}.{name}", out)
        out[f"{prefix}._update_count"] = m._update_count
    return out


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__.strip("_"))
def test_compute_is_a_pure_read(factory: Callable[[], Metric]) -> None:
    """``compute()`` twice gives the same value and leaves every state as it was (the same objects, the same
    contents: the 16-bit mode's held batches stay held); reading ``sync_report`` changes nothing either.
    """
    preds, target = _data(2)
    metric = factory()
    for start in range(0, N, 50):
        metric.update(preds[start : start + 50], target[start : start + 50])
    before = _states(metric)
    first = _value(metric)
    assert _changes(before, _states(metric)) == {}
    report = metric.sync_report
    assert report is not None
    assert metric.sync_report is report
    assert _value(metric) == first == pytest.approx(_reference(factory, preds, target), abs=1e-6)
    assert _changes(before, _states(metric)) == {}
    assert metric.sync_report == report  # (the second compute's report: the same evaluation)


def _auroc_wrapped() -> Metric:
    return Varlen(BinaryAUROC(), dataset_size=N)  # the wrapped metric's own list states


@pytest.mark.parametrize("factory", [*FACTORIES, _auroc_wrapped], ids=lambda f: f.__name__.strip("_"))
def test_a_state_dict_loads_the_same_states_every_time(factory: Callable[[], Metric]) -> None:
    """One saved ``state_dict`` loaded into two metrics, and again into the first after it took more batches: each
    load starts from the saved states (torchmetrics installs the state_dict's list objects, which later batches would
    append to), and each metric, fed the rest of the data, computes scikit-learn's value on all of it.
    """
    preds, target = _data()
    source = factory()
    source.persistent(True)
    source.update(preds[:200], target[:200])
    saved = source.state_dict()
    first, second = factory(), factory()
    for metric in (first, second, first):
        metric.persistent(True)
        metric.load_state_dict(saved)
        metric.update(preds[200:], target[200:])
        reference = roc_auc_score(target, preds) if factory is _auroc_wrapped else _reference(factory, preds, target)
        assert _value(metric) == pytest.approx(reference, abs=1e-6)
    source.update(preds[200:], target[200:])
    assert _value(source) == pytest.approx(reference, abs=1e-6)


@pytest.mark.parametrize("first", ["auroc", "ap"])
def test_a_collection_reads_its_members_without_relinking_a_compute_group(first: str) -> None:
    """``collection[name]`` gives the member its own copy of the compute group's states (torchmetrics' rule), so a
    batch given to that member directly stays out of the others. The collection's own reads of its members (compute,
    the report, the checks) must not link them back: each member keeps its value, as in a ``MetricCollection``
    (before, the first member of the group took the batch of the member updated directly).
    """
    gen = torch.Generator().manual_seed(0)
    preds, target = torch.rand(40, generator=gen), torch.randint(0, 2, (40,), generator=gen)
    from torchmetrics.classification import BinaryAveragePrecision

    ours = VarlenCollection({"auroc": tv.VarlenAUROC(), "ap": tv.VarlenAveragePrecision()})
    theirs = MetricCollection({"auroc": BinaryAUROC(), "ap": BinaryAveragePrecision()})
    other = "ap" if first == "auroc" else "auroc"
    values = []
    for metrics in (ours, theirs):
        metrics.update(preds[:20], target[:20])
        metrics[other].update(preds[20:], target[20:])  # one member alone gets 20 more samples
        values.append({name: float(value) for name, value in metrics.compute().items()})
    expected = {
        first: {"auroc": roc_auc_score, "ap": average_precision_score}[first](target[:20], preds[:20]),
        other: {"auroc": roc_auc_score, "ap": average_precision_score}[other](target, preds),
    }
    assert values[0] == pytest.approx(expected, abs=1e-6)
    assert values[1] == pytest.approx(expected, abs=1e-6)
    assert len(ours.compute_groups) == 1  # the two members share their states between the collection's updates
