"""Varlen's per-batch update path: the decisions it reuses from the first batch (which states are lists, whether
ids are possible, whether the wrapped metric's ``update`` is torchmetrics' own wrapper, then run once for both
metrics) change nothing a caller can see: the same states, counters, grad mode and errors as torchmetrics' update of
the bare metric, on the first batch and on every later one.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
import torch
from sklearn.metrics import roc_auc_score
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.classification import BinaryAccuracy, BinaryAUROC, BinaryF1Score
from torchmetrics.utilities.data import dim_zero_cat

from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenAveragePrecision, VarlenCollection
from torchmetrics_varlen.functional._validation import int_ends

SCORES = torch.tensor([0.9, 0.2, 0.6, 0.3, 0.8, 0.1, 0.7, 0.4])
LABELS = torch.tensor([1, 0, 1, 0, 0, 1, 1, 0])


class GradProbe(Metric):
    """Records the grad mode its update runs under; ``flip`` leaves the grad mode switched by the update."""

    full_state_update = False

    def __init__(self, flip: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("x", [], dist_reduce_fx="cat")
        self.flip = flip
        self.modes: list[bool] = []

    def update(self, x: Tensor) -> None:
        """Append ``x``."""
        self.modes.append(torch.is_grad_enabled())
        if self.flip:
            torch.set_grad_enabled(not torch.is_grad_enabled())
        self.x.append(x)

    def compute(self) -> Tensor:
        """The sum."""
        return dim_zero_cat(self.x).sum()


class Devices(Metric):
    """Raises torchmetrics' "different devices" case on its second update."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("x", [], dist_reduce_fx="cat")

    def update(self, x: Tensor) -> None:
        """Append ``x``; the second time, fail as torch does for tensors on two devices."""
        self.x.append(x)
        if len(self.x) == 2:
            msg = "Expected all tensors to be on the same device, but found at least two devices"
            raise RuntimeError(msg)

    def compute(self) -> Tensor:
        """The sum."""
        return dim_zero_cat(self.x).sum()


class Late(Metric):
    """Appends a tensor per batch; on batch ``bad``: ``what`` (``"text"``: a str; ``"twice"``: the batch twice)."""

    full_state_update = False

    def __init__(self, bad: int, what: str) -> None:
        super().__init__()
        self.add_state("x", [], dist_reduce_fx="cat")
        self.add_state("y", [], dist_reduce_fx="cat")
        self.bad, self.what, self.calls = bad, what, 0

    def update(self, x: Tensor) -> None:
        """Append ``x`` to both states (misbehaving on batch ``bad``)."""
        self.calls += 1
        self.x.append(x)
        if self.calls == self.bad:
            self.y.append("oops" if self.what == "text" else torch.cat([x, x]))
        else:
            self.y.append(x)

    def compute(self) -> Tensor:
        """The sum."""
        return dim_zero_cat(self.x).sum()


class OwnSetattr(BinaryAUROC):
    """A metric that sets its attributes its own way: the wrapper calls its ``update`` attribute."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)


def _states(metric: Metric) -> dict[str, Any]:
    return {n: [t.clone() for t in getattr(metric, n)] for n in metric._defaults}


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    same = [(x, y) for n in a for x, y in zip(a[n], b.get(n, []), strict=False)]
    lengths = {n: len(v) for n, v in a.items()} == {n: len(v) for n, v in b.items()}
    return lengths and all(torch.equal(x, y) and x.dtype == y.dtype for x, y in same)


@pytest.mark.parametrize("caller_grad", [True, False])
@pytest.mark.parametrize("enable_grad", [False, True])
@pytest.mark.parametrize("flip", [False, True])
def test_grad_mode_inside_and_after_update_is_torchmetrics(caller_grad: bool, enable_grad: bool, flip: bool) -> None:
    bare, inner = GradProbe(flip), GradProbe(flip)
    wrapped = Varlen(inner)
    for m in (bare, inner, wrapped):
        m._enable_grad = enable_grad
    for _ in range(3):  # the first batch and the later ones
        for metric in (bare, wrapped):
            with torch.set_grad_enabled(caller_grad):
                metric.update(torch.ones(2))
                assert torch.is_grad_enabled() is caller_grad  # put back, whatever the update did
    assert inner.modes == bare.modes == [enable_grad] * 3
    assert (inner._update_count, wrapped._update_count, bare._update_count) == (3, 3, 3)


def test_states_and_counters_equal_the_bare_metric_batch_by_batch() -> None:
    bare, wrapped = BinaryAUROC(), Varlen(BinaryAUROC())
    for start in range(0, 8, 3):
        for metric in (bare, wrapped):
            metric.update(SCORES[start : start + 3], LABELS[start : start + 3])
        assert _equal(_states(wrapped.metric), _states(bare))
        assert wrapped.metric._update_count == bare._update_count == wrapped._update_count
        assert wrapped.metric._computed is None
    assert float(wrapped.compute()) == pytest.approx(roc_auc_score(LABELS, SCORES), abs=1e-7)
    assert torch.equal(wrapped.compute(), bare.compute())


def test_the_device_error_is_torchmetrics_and_rolls_back() -> None:
    bare = Devices()
    bare.update(torch.ones(1))
    with pytest.raises(RuntimeError) as expected:
        bare.update(torch.ones(1))
    wrapped = Varlen(Devices())
    wrapped.update(torch.ones(1))
    with pytest.raises(RuntimeError) as got:
        wrapped.update(torch.ones(2))
    assert str(got.value) == str(expected.value)
    assert str(got.value).startswith("Encountered different devices in metric calculation")
    assert isinstance(got.value.__cause__, RuntimeError)
    assert [t.numel() for t in wrapped.metric.x] == [1]  # the failed batch left nothing behind
    assert (wrapped._update_count, wrapped.metric._update_count) == (1, 1)
    assert wrapped.sync_report is None
    wrapped.compute()
    assert wrapped.sync_report is not None
    assert (wrapped.sync_report.received, wrapped.sync_report.rejected) == (1, 2)


def test_compute_on_cpu_moves_the_lists_as_torchmetrics_does() -> None:
    bare, wrapped = GradProbe(compute_on_cpu=True), Varlen(GradProbe(compute_on_cpu=True))
    for _ in range(2):
        before = (bare.x, wrapped.metric.x)
        bare.update(torch.ones(2))
        wrapped.update(torch.ones(2))
        assert bare.x is not before[0]
        assert wrapped.metric.x is not before[1]  # new lists, as torchmetrics' move makes them
    assert _equal(_states(wrapped.metric), _states(bare))


@pytest.mark.parametrize(("what", "error", "text"), [("text", TypeError, "to hold tensors, but got a str")])
def test_a_later_batch_that_stores_no_tensor_is_refused_and_rolled_back(what: str, error: type, text: str) -> None:
    wrapped = Varlen(Late(bad=3, what=what))
    wrapped.update(torch.ones(2))
    wrapped.update(torch.ones(3))
    with pytest.raises(error, match=text):
        wrapped.update(torch.ones(4))
    assert [t.numel() for t in wrapped.metric.x] == [2, 3]
    assert [t.numel() for t in wrapped.metric.y] == [2, 3]
    assert wrapped._update_count == wrapped.metric._update_count == 2


def test_a_later_batch_of_two_rows_per_id_is_refused_and_rolled_back() -> None:
    wrapped = Varlen(Late(bad=2, what="twice"))
    wrapped.update(torch.ones(2), sample_ids=torch.arange(2))
    text = r"grow by one row per sample with `sample_ids` \(3 rows\), but `y` grew by 6"
    with pytest.raises(ValueError, match=text):
        wrapped.update(torch.ones(3), sample_ids=torch.arange(2, 5))
    assert [t.numel() for t in wrapped.metric.y] == [2]
    assert [t.numel() for t in wrapped.varlen_ids] == [2]
    wrapped.update(torch.ones(3), sample_ids=torch.arange(2, 5))  # batch 3 behaves
    assert int(wrapped.compute()) == 5
    assert wrapped.sync_report is not None
    assert (wrapped.sync_report.kept, wrapped.sync_report.rejected) == (5, 3)


BAD_IDS = [
    ([0, 1, 2], TypeError, "Expected `sample_ids` to be an integer tensor, but got list."),
    (torch.tensor([0.0, 1.0, 2.0]), ValueError, "Expected `sample_ids` to be an integer tensor, one id per sample"),
    (torch.tensor([True, False, True]), ValueError, "integer tensor, one id per sample, but got dtype torch.bool"),
    (torch.arange(4), ValueError, r"Expected `sample_ids` to have shape \(3,\), one id per sample, but got \(4,\)."),
    (torch.arange(3).reshape(3, 1), ValueError, r"to have shape \(3,\), one id per sample, but got \(3, 1\)."),
    (torch.tensor([5, 6, 40]), ValueError, r"sample id 40 is outside \[0, dataset_size=10\)"),
    (torch.tensor([-1, 6, 7]), ValueError, r"sample id -1 is outside \[0, dataset_size=10\)"),
]


@pytest.mark.parametrize(("bad", "error", "text"), BAD_IDS)
@pytest.mark.parametrize("later", [False, True])
def test_bad_ids_raise_the_same_on_the_first_and_on_a_later_batch(
    bad: Any, error: type[Exception], text: str, later: bool
) -> None:
    wrapped = Varlen(BinaryAUROC(), dataset_size=10)
    if later:
        wrapped.update(SCORES[:3], LABELS[:3], sample_ids=torch.arange(3))
    with pytest.raises(error, match=text):
        wrapped.update(SCORES[3:6], LABELS[3:6], sample_ids=bad)
    assert len(wrapped.metric.preds) == len(wrapped.varlen_ids) == int(later)
    assert wrapped._update_count == wrapped.metric._update_count == int(later)
    if later:  # the epoch goes on
        wrapped.update(SCORES[3:6], LABELS[3:6], sample_ids=torch.arange(3, 6))
        assert [p.shape for p in wrapped.metric.preds] == [(3,), (3,)]


def test_other_integer_ids_are_taken_as_int64_on_every_batch() -> None:
    wrapped = Varlen(BinaryAUROC())
    for dtype, part in ((torch.int64, slice(0, 3)), (torch.int32, slice(3, 6)), (torch.uint8, slice(6, 8))):
        wrapped.update(SCORES[part], LABELS[part], sample_ids=torch.arange(8)[part].to(dtype))
    assert [ids.dtype for ids in wrapped.varlen_ids] == [torch.int64] * 3
    wrapped.update(SCORES[7:], LABELS[7:], sample_ids=torch.tensor(7))  # a 0-d id of a one-sample batch
    assert float(wrapped.compute()) == pytest.approx(roc_auc_score(LABELS, SCORES), abs=1e-7)
    assert wrapped.sync_report is not None
    assert wrapped.sync_report.duplicates_dropped == 1


def test_a_mode_switch_raises_on_every_later_batch() -> None:
    wrapped = Varlen(BinaryAUROC())
    wrapped.update(SCORES[:2], LABELS[:2], sample_ids=torch.arange(2))
    for _ in range(2):
        with pytest.raises(ValueError, match="this update has no `sample_ids` but earlier updates had"):
            wrapped.update(SCORES[2:4], LABELS[2:4])
    wrapped.update(SCORES[2:4], LABELS[2:4], sample_ids=torch.arange(2, 4))
    wrapped.reset()
    wrapped.update(SCORES[:2], LABELS[:2])
    for _ in range(2):
        with pytest.raises(ValueError, match="this update has `sample_ids` but earlier updates had none"):
            wrapped.update(SCORES[2:4], LABELS[2:4], sample_ids=torch.arange(2, 4))
    assert len(wrapped.metric.preds) == 1


def test_ids_for_tensor_states_are_refused_on_every_batch() -> None:
    wrapped = Varlen(BinaryAccuracy())
    for _ in range(2):
        with pytest.raises(ValueError, match=r"whose states \['fn', 'fp', 'tn', 'tp'\] are tensors"):
            wrapped.update(SCORES[:2], LABELS[:2], sample_ids=torch.arange(2))
    wrapped.update(SCORES, LABELS)
    assert float(wrapped.compute()) == pytest.approx(float(BinaryAccuracy()(SCORES, LABELS)))


def test_an_update_replaced_after_the_first_batch_is_the_one_called() -> None:
    wrapped = Varlen(BinaryAUROC())
    wrapped.update(SCORES[:4], LABELS[:4])
    inner, seen = wrapped.metric, []
    original = inner.update

    def spy(*args: Any, **kwargs: Any) -> None:
        seen.append(len(args[0]))
        original(*args, **kwargs)

    inner.update = spy
    wrapped.update(SCORES[4:], LABELS[4:])
    assert seen == [4]
    assert inner._update_count == 2
    assert float(wrapped.compute()) == pytest.approx(roc_auc_score(LABELS, SCORES), abs=1e-7)


def test_a_metric_with_its_own_setattr_is_updated_through_its_update() -> None:
    wrapped = Varlen(OwnSetattr())
    for start in (0, 4):
        wrapped.update(SCORES[start : start + 4], LABELS[start : start + 4])
    assert wrapped.metric._update_count == 2
    assert float(wrapped.compute()) == pytest.approx(roc_auc_score(LABELS, SCORES), abs=1e-7)


@pytest.mark.parametrize("how", ["deepcopy", "clone", "pickle"])
def test_a_copy_updates_its_own_metric(how: str) -> None:
    wrapped = Varlen(BinaryAUROC())
    wrapped.update(SCORES[:4], LABELS[:4])
    if how == "pickle":
        twin = pickle.loads(pickle.dumps(wrapped))
    else:
        twin = copy.deepcopy(wrapped) if how == "deepcopy" else wrapped.clone()
    twin.update(SCORES[4:], LABELS[4:])
    assert [len(m.metric.preds) for m in (wrapped, twin)] == [1, 2]
    assert [m.metric._update_count for m in (wrapped, twin)] == [1, 2]
    wrapped.update(SCORES[4:6], LABELS[4:6])
    assert [len(m.metric.preds) for m in (wrapped, twin)] == [2, 2]
    assert float(twin.compute()) == pytest.approx(roc_auc_score(LABELS, SCORES), abs=1e-7)


class OwnUpdate(Varlen):
    """A subclass with its own ``update``: torchmetrics' bookkeeping still wraps it."""

    def update(self, *args: Any, sample_ids: Tensor | None = None, **kwargs: Any) -> None:
        """Count the call, then the wrapper's update."""
        self.calls = getattr(self, "calls", 0) + 1
        super().update(*args, sample_ids=sample_ids, **kwargs)


def test_a_subclass_update_is_wrapped_as_torchmetrics_does() -> None:
    wrapped = OwnUpdate(GradProbe())
    with torch.enable_grad():
        wrapped.update(torch.ones(2))
    for _ in range(2):  # refused: the epoch has no ids
        with pytest.raises(ValueError, match="earlier updates had none"):
            wrapped.update(torch.ones(3), sample_ids=torch.arange(3))
    assert wrapped.calls == 3
    assert wrapped._update_count == wrapped.metric._update_count == 1
    assert wrapped.metric.modes == [False]


# ----------------------------------------------------------------------------- VarlenCollection's compute groups


def _counts(metric: Metric) -> dict[str, int]:
    return {n: int(getattr(metric, n)) for n in metric._defaults if n in ("num_samples", "rows_seen", "varlen_rows")}


@pytest.mark.parametrize("read_between", [False, True])
def test_compute_group_members_see_the_first_members_states_after_every_update(read_between: bool) -> None:
    """AUROC and AP share one compute group, Varlen(F1) and Varlen(Accuracy) another (the first of each updates):
    every member reads the first member's lists and counts after every batch, whether or not they were read in
    between, and the values and the state_dict are those of metrics updated alone with the rows the collection keeps:
    all 8 of its ``dataset_size=8`` (one process never pads, 88ed689; padding cut on real ranks:
    test_collection_distributed).
    """
    coll = VarlenCollection(
        {"auroc": VarlenAUROC(), "ap": VarlenAveragePrecision(), "f1": BinaryF1Score(), "acc": BinaryAccuracy()},
        dataset_size=8,
    )
    alone = {"auroc": VarlenAUROC(), "ap": VarlenAveragePrecision()}  # fed what the collection keeps
    for start in range(0, 8, 3):
        coll.update(SCORES[start : start + 3], LABELS[start : start + 3])
        for metric in alone.values():
            metric.update(SCORES[start : min(start + 3, 8)], LABELS[start : min(start + 3, 8)])
        if read_between or start == 6:
            members = coll._modules
            assert members["ap"].preds is members["auroc"].preds
            assert _counts(members["ap"]) == _counts(members["auroc"]) == _counts(alone["ap"])
            assert _counts(members["acc"]) == _counts(members["f1"])
            assert members["acc"].metric.tp is members["f1"].metric.tp
            assert members["ap"]._update_count == members["auroc"]._update_count
    assert sorted(coll._groups.values()) == [["acc", "f1"], ["ap", "auroc"]]  # the first of each updates
    coll.persistent(True)
    saved = coll.state_dict()
    for name, metric in alone.items():
        metric.persistent(True)
        for key, value in metric.state_dict().items():
            mine = saved[f"{name}.{key}"]
            assert (
                all(torch.equal(a, b) for a, b in zip(mine, value, strict=True))
                if isinstance(value, list)
                else (torch.equal(mine, value))
            ), key
    values = coll.compute()
    assert torch.equal(values["auroc"], alone["auroc"].compute())
    assert torch.equal(values["ap"], alone["ap"].compute())
    assert float(values["auroc"]) == pytest.approx(roc_auc_score(LABELS, SCORES), abs=1e-7)
    assert float(values["acc"]) == pytest.approx(float(BinaryAccuracy()(SCORES, LABELS)))
    assert coll.sync_report is not None
    assert (coll.sync_report.received, coll.sync_report.duplicates_dropped, coll.sync_report.missing) == (8, 0, 0)


def test_compute_group_counts_follow_reset_and_rejected_batches() -> None:
    coll = VarlenCollection({"auroc": VarlenAUROC(), "ap": VarlenAveragePrecision()})
    coll.update(SCORES[:4], LABELS[:4])
    with pytest.raises(ValueError, match="Expected `preds` to be finite"):
        coll.update(torch.tensor([0.5, float("nan")]), LABELS[:2])
    coll.update(SCORES[4:], LABELS[4:])
    members = coll._modules
    assert _counts(members["ap"]) == _counts(members["auroc"]) == {"num_samples": 8, "rows_seen": 8}
    assert int(members["ap"].rejected) == int(members["auroc"].rejected) == 2
    coll.reset()
    assert _counts(members["ap"]) == _counts(members["auroc"]) == {"num_samples": 0, "rows_seen": 0}
    coll.update(SCORES[:5], LABELS[:5])
    assert _counts(members["ap"]) == _counts(members["auroc"]) == {"num_samples": 5, "rows_seen": 5}
    assert float(coll.compute()["ap"]) == pytest.approx(float(VarlenAveragePrecision()(SCORES[:5], LABELS[:5])))


# ----------------------------------------------------------------------------- the ids' range


@pytest.mark.parametrize("n", [1, 63, 1023, 1024, 5000])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
@pytest.mark.parametrize("high", [True, False])
def test_int_ends_is_the_exact_range(n: int, dtype: torch.dtype, high: bool) -> None:
    gen = torch.Generator().manual_seed(n)
    top = torch.iinfo(dtype).max
    values = torch.randint(0 if dtype == torch.uint8 else -top, top, (2 * n,), generator=gen, dtype=torch.int64)
    if dtype == torch.int64:
        values[0], values[-1] = -(2**63), 2**63 - 1  # the extremes, exactly
    for piece in (values.to(dtype), values.to(dtype)[::2]):  # contiguous and strided
        low, highest = int_ends(piece, high=high)
        assert (type(low), type(highest)) == (int, int)
        assert low == int(piece.min())
        assert highest == (int(piece.max()) if high else low)


def test_negative_ids_are_refused_on_big_batches_too() -> None:
    for n in (10, 4096):
        metric = VarlenAUROC()
        ids = torch.arange(n)
        ids[n // 2] = -3
        with pytest.raises(ValueError, match=r"Expected `sample_ids` to be >= 0, but found -3."):
            metric.update(torch.rand(n), torch.randint(0, 2, (n,)), sample_ids=ids)
        wrapped = Varlen(BinaryAUROC(), dataset_size=n)
        with pytest.raises(ValueError, match=rf"sample id -3 is outside \[0, dataset_size={n}\)"):
            wrapped.update(torch.rand(n), torch.randint(0, 2, (n,)), sample_ids=ids)
        ids[n // 2] = n
        with pytest.raises(ValueError, match=rf"sample id {n} is outside \[0, dataset_size={n}\)"):
            wrapped.update(torch.rand(n), torch.randint(0, 2, (n,)), sample_ids=ids)
        assert wrapped.metric.preds == []
