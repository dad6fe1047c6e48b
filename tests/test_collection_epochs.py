"""A ``VarlenCollection`` is exact over epochs whichever way its values are taken: the collection's ``compute()`` and
``reset()``, or each member's, in Lightning's order (``log_dict(collection)``: compute every member, then reset every
member) or member by member, with ``update`` or ``forward``, after a partial pass (Lightning's sanity check).

The schedules are drawn: one process by Hypothesis, W = 2 and 3 by seeded draws on real gloo ranks with a
``DistributedSampler`` that pads. The reference is scikit-learn on the samples of each epoch.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import pytest
import torch
from _data import scores_and_labels
from _dist import DistPool
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import accuracy_score, average_precision_score, roc_auc_score
from torch.utils.data import DistributedSampler
from torchmetrics.classification import BinaryAccuracy

from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision, VarlenCollection

N = 61
ENDINGS = ("log_dict", "member_by_member", "collection")


def _collection(dataset_size: int | None) -> VarlenCollection:
    members = {"auroc": VarlenAUROC(), "ap": VarlenAveragePrecision(), "acc": BinaryAccuracy()}
    return VarlenCollection(members, dataset_size=dataset_size)


def _truth(preds: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    return {
        "auroc": float(roc_auc_score(target, preds)),
        "ap": float(average_precision_score(target, preds)),
        "acc": float(accuracy_score(target, preds > 0.5)),
    }


def _end_epoch(collection: VarlenCollection, ending: str) -> dict[str, float]:
    """Take the epoch's values the way ``ending`` says, and reset."""
    if ending == "collection":
        values = {k: float(v) for k, v in collection.compute().items()}
        collection.reset()
        return values
    members = dict(collection.items(keep_base=True, copy_state=False))
    if ending == "log_dict":  # Lightning: every logged metric computed, then every one reset
        values = {name: float(m.compute()) for name, m in members.items()}
        for m in members.values():
            m.reset()
        return values
    values = {}
    for name, m in members.items():
        values[name] = float(m.compute())
        m.reset()
    return values


def _run(schedule: dict[str, Any], rank: int = 0, world: int = 1) -> list[tuple[dict[str, float], list[int]]]:
    """Run a schedule on this rank; per epoch its values and the sample indices of the whole epoch (every rank's)."""
    preds, target = scores_and_labels(N, schedule["seed"])
    collection = _collection(N if schedule["dataset_size"] else None)
    out = []
    for number, (ending, batch, forward, sanity_batches) in enumerate(schedule["epochs"]):
        sampler = DistributedSampler(range(N), num_replicas=world, rank=rank, shuffle=True, seed=number)
        rows = list(sampler)
        if sanity_batches is not None:  # a partial pass: the first batches of every rank only
            rows = rows[: sanity_batches * batch]
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            if forward:
                with warnings.catch_warnings():  # a batch value of one class warns; the epoch's value is checked
                    warnings.simplefilter("ignore", UserWarning)
                    collection(preds[part].float(), target[part])
            else:
                collection.update(preds[part].float(), target[part])
        every = sorted({i for r in range(world) for i in _rank_rows(number, world, r, sanity_batches, batch)})
        with warnings.catch_warnings():
            if sanity_batches is not None:  # a partial pass may hold one class: its values warn (and are not checked)
                warnings.simplefilter("ignore", UserWarning)
            out.append((_end_epoch(collection, ending), every))
    return out


def _rank_rows(epoch: int, world: int, rank: int, sanity_batches: int | None, batch: int) -> list[int]:
    rows = list(DistributedSampler(range(N), num_replicas=world, rank=rank, shuffle=True, seed=epoch))
    return rows if sanity_batches is None else rows[: sanity_batches * batch]


def _check(schedule: dict[str, Any], results: list[tuple[dict[str, float], list[int]]]) -> None:
    preds, target = scores_and_labels(N, schedule["seed"])
    for values, every in results:
        if target[every].unique().numel() < 2:
            continue  # a partial pass of one class: no reference value
        truth = _truth(preds[every].double(), target[every])
        assert values.keys() == truth.keys()
        for name, value in values.items():
            assert value == pytest.approx(truth[name], abs=1e-6), (schedule, name)


_EPOCH = st.tuples(
    st.sampled_from(ENDINGS),
    st.sampled_from([1, 4, 16, 64]),
    st.booleans(),
    st.none(),
)
_SANITY = st.tuples(st.sampled_from(ENDINGS), st.sampled_from([4, 16]), st.booleans(), st.sampled_from([1, 2]))


@settings(max_examples=25, deadline=None)
@given(
    sanity=st.lists(_SANITY, max_size=1),
    epochs=st.lists(_EPOCH, min_size=1, max_size=4),
    dataset_size=st.booleans(),
    seed=st.integers(0, 5),
)
def test_every_compute_and_reset_order_is_exact_over_epochs(
    sanity: list[Any], epochs: list[Any], dataset_size: bool, seed: int
) -> None:
    schedule = {"epochs": sanity + epochs, "dataset_size": dataset_size, "seed": seed}
    _check(schedule, _run(schedule))


def case_schedule(rank: int, world: int, schedule: dict[str, Any]) -> list[Any]:
    return _run(schedule, rank, world)


def _drawn_schedules(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    schedules = []
    for _ in range(count):
        epochs: list[Any] = [(rng.choice(ENDINGS), 8, rng.random() < 0.5, 2)]  # Lightning's sanity check first
        epochs += [(rng.choice(ENDINGS), rng.choice([4, 8, 32]), rng.random() < 0.3, None) for _ in range(3)]
        schedules.append({"epochs": epochs, "dataset_size": True, "seed": rng.randrange(6)})
    return schedules


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 3])
def test_drawn_schedules_are_exact_on_every_rank(pool: DistPool, world: int) -> None:
    for schedule in _drawn_schedules(3, world):
        ranks = pool.values(case_schedule, world, schedule)
        for results in ranks:
            _check(schedule, results)
        assert all(r == ranks[0] for r in ranks)


def test_resetting_some_members_alone_raises_then_a_collection_reset_recovers() -> None:
    preds, target = scores_and_labels(N, 7)
    collection = _collection(N)
    collection.update(preds[:30].float(), target[:30])
    collection["auroc"].reset()  # e.g. self.log("auroc", collection["auroc"]) alone
    with pytest.raises(ValueError, match=r"\['auroc'\] were reset on their own, but \['acc', 'ap'\]"):
        collection.update(preds[30:].float(), target[30:])
    collection.reset()
    collection.update(preds.float(), target)
    values = {k: float(v) for k, v in collection.compute().items()}
    truth = _truth(preds, target)
    assert values == pytest.approx(truth, abs=1e-6)


def test_without_dataset_size_a_partial_member_reset_is_that_members_new_epoch() -> None:
    """No padding to cut: a member outside a compute group holds what it was given since its own reset, as in
    torchmetrics (AUROC and AP share their states: they keep everything).
    """
    preds, target = scores_and_labels(N, 8)
    collection = _collection(None)
    collection.update(preds[:30].float(), target[:30])
    collection["acc"].reset()
    collection.update(preds[30:].float(), target[30:])
    assert float(collection["acc"].compute()) == pytest.approx(accuracy_score(target[30:], preds[30:] > 0.5), abs=1e-6)
    assert float(collection["auroc"].compute()) == pytest.approx(roc_auc_score(target, preds), abs=1e-6)


def case_partial_passes(rank: int, world: int, ending: str) -> list[Any]:
    """Three epochs of a partial pass (``limit_val_batches``: the first 2 batches of 4 rows of every rank), each
    ended by ``ending``: per epoch the "never seen" warnings and every member's ``sync_report.missing``.
    """
    preds, target = scores_and_labels(N, 9)
    collection = _collection(N)
    out = []
    for epoch in range(3):
        rows = list(DistributedSampler(range(N), num_replicas=world, rank=rank, shuffle=True, seed=epoch))[:8]
        for start in range(0, len(rows), 4):
            collection.update(preds[rows[start : start + 4]].float(), target[rows[start : start + 4]])
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            _end_epoch(collection, ending)
        texts = [str(w.message) for w in seen if "never seen" in str(w.message)]
        members = dict(collection.items(keep_base=True, copy_state=False))
        out.append((texts, {name: m.sync_report.missing for name, m in members.items()}))
    return out


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_partial_pass_warns_whichever_way_the_values_are_taken(ending: str) -> None:
    """``limit_val_batches`` with ``dataset_size`` on the collection: the "never seen" warning comes every epoch,
    naming the collection's dataset_size, whether the collection computes (one warning) or Lightning's
    ``log_dict(collection)`` computes each member (the members warn, with the collection's text); every member's
    ``sync_report`` counts the samples never seen.
    """
    for texts, missing in case_partial_passes(0, 1, ending):
        assert texts, ending
        assert set(texts) == {texts[0]}
        assert texts[0].startswith(f"VarlenCollection: dataset_size={N} but only 8 samples were evaluated:")
        if ending == "collection":
            assert len(texts) == 1  # the collection warns for its members: once
        assert missing == dict.fromkeys(("acc", "ap", "auroc"), N - 8)


@pytest.mark.distributed
@pytest.mark.parametrize("ending", ENDINGS)
def test_a_partial_pass_warns_on_every_rank_whichever_way_the_values_are_taken(pool: DistPool, ending: str) -> None:
    for rank_out in pool.values(case_partial_passes, 2, ending):
        for texts, missing in rank_out:
            assert texts
            assert set(texts) == {texts[0]}
            assert texts[0].startswith(f"VarlenCollection: dataset_size={N} but only 16 samples were evaluated:")
            assert missing == dict.fromkeys(("acc", "ap", "auroc"), N - 16)
