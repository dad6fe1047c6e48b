"""The per-batch fast paths of ``update()`` say exactly what the general checks say.

The device path of the input checks (every end read with one ``tolist()``, one sync on CUDA) is run here on the CPU
against the CPU path; the mode checks that skip working out the mode raise exactly where the full checks raise.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from _float32 import expit, f32, softmax
from sklearn.metrics import roc_auc_score

from torchmetrics_varlen import VarlenAUROC, VarlenMulticlassAUROC
from torchmetrics_varlen._core.columns import columns as _columns
from torchmetrics_varlen._core.columns import columns_shape as sample_shape
from torchmetrics_varlen._core.columns import expand_per_sample
from torchmetrics_varlen._core.columns import zeros as _zeros
from torchmetrics_varlen.functional._validation import (
    _score_range,
    check_inputs,
    host_pair,
    ints_within,
    validate_sample_ids,
    within,
)

_SCORES = {
    "unit": torch.tensor([0.0, 0.25, 1.0]),
    "logits": torch.tensor([-3.0, 0.5, 7.0]),
    "nan": torch.tensor([0.2, math.nan, 0.4]),
    "inf": torch.tensor([0.2, math.inf, 0.4]),
    "-inf": torch.tensor([-math.inf, 0.1, 0.4]),
    "half": torch.tensor([0.1, 0.9, 0.5], dtype=torch.float16),
    "double": torch.tensor([-1e300, 0.5, 1e300], dtype=torch.float64),
}
_LABELS = {
    "none": None,
    "binary": torch.tensor([0, 1, 1]),
    "negative": torch.tensor([0, -1, 1]),
    "two": torch.tensor([0, 2, 1]),
    "huge": torch.tensor([0, 2**62 + 1, 1]),
    "lowest": torch.tensor([0, -(2**63), 1]),
    "int8": torch.tensor([1, 0, 1], dtype=torch.int8),
    "past 2**53": torch.tensor([0, 2**53 + 1, 1]),
}


def _same(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool:
    if a is None or b is None:
        return a is b
    return all((x == y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("labels", list(_LABELS))
@pytest.mark.parametrize("scores", list(_SCORES))
@pytest.mark.parametrize("top", [1, 2**53 - 1, 2**53])
def test_device_path_of_the_score_range_matches_the_cpu_path(scores: str, labels: str, top: int) -> None:
    preds, target = _SCORES[scores], _LABELS[labels]
    cpu = _score_range(preds, target, top, fused=False)
    device = _score_range(preds, target, top, fused=True)
    assert _same(cpu, device), (cpu, device)
    if target is not None:  # the expectation, worked out by hand
        assert (cpu is None) == (int(target.min()) < 0 or int(target.max()) > top)
    if cpu is not None:
        assert _same(cpu, (float(preds.min()), float(preds.max()))) or math.isnan(cpu[0])


@pytest.mark.parametrize("n", [3, 2048])
def test_sample_ids_range(n: int) -> None:
    ids = torch.arange(n) + 2
    validate_sample_ids(ids, torch.Size([n]))
    ids[n // 2] = -1
    with pytest.raises(ValueError, match="Expected `sample_ids` to be >= 0, but found -1"):
        validate_sample_ids(ids, torch.Size([n]))
    validate_sample_ids(ids, torch.Size([n]), name="groups", non_negative=False)


def test_id_out_of_the_data_set_is_still_found_with_dataset_size() -> None:
    metric = VarlenAUROC(dataset_size=5)
    with pytest.raises(ValueError, match="sample id 5 is outside"):
        metric.update(torch.tensor([0.2, 0.7]), torch.tensor([0, 1]), sample_ids=torch.tensor([1, 5]))
    metric.update(torch.tensor([0.2, 0.7]), torch.tensor([0, 1]), sample_ids=torch.tensor([1, 4]))
    assert metric.sync_report is None
    assert metric.rejected == 2


def test_zeros_are_zeros_of_the_length_asked() -> None:
    for n in (3, 64, 5000, 64):
        zeros = _zeros(n, torch.device("cpu"))
        assert zeros.shape == (n,)
        assert zeros.dtype == torch.int32
        assert not zeros.any()


@pytest.mark.parametrize("target", [torch.tensor([0, 1, 1]), torch.tensor([False, True, True])])
def test_one_dimensional_batches_are_stored_as_given(target: torch.Tensor) -> None:
    """No reshape of 1-D scores; labels converted to bool only when they are not bool already (no copy then)."""
    preds = torch.tensor([0.2, 0.9, 0.4])
    metric = VarlenAUROC()
    metric.update(preds, target)
    assert metric.preds[0] is preds
    assert metric.target[0].dtype == torch.bool
    assert (metric.target[0] is target) == (target.dtype == torch.bool)
    assert torch.equal(metric.target[0], target.bool())


def test_check_inputs_says_whether_scores_lie_in_the_unit_interval() -> None:
    assert check_inputs(torch.tensor([0.0, 1.0]), torch.tensor([0, 1]), "binary", None, None, None, "sigmoid")
    assert not check_inputs(torch.tensor([-1.0, 1.0]), torch.tensor([0, 1]), "binary", None, None, None, "sigmoid")
    assert check_inputs(torch.zeros(0), torch.zeros(0, dtype=torch.long), "binary", None, None, None) is True
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    assert check_inputs(logits, torch.tensor([2]), "multiclass", 3, None, None, "softmax") is False
    with pytest.raises(ValueError, match=r"class indices in \[0, 2\], but found values \[3\]"):
        VarlenMulticlassAUROC(num_classes=3).update(logits, torch.tensor([3]))


@pytest.mark.parametrize("thresholds", [None, torch.float16, 5])
def test_mode_switches_raise_after_many_batches(thresholds: object) -> None:
    """The fast mode checks (no mode worked out while the batch keeps it) still raise at the first switch."""
    preds, target = torch.rand(40), torch.randint(0, 2, (40,))
    weight = torch.rand(40)
    metric = VarlenAUROC(thresholds=thresholds)
    for s in range(0, 30, 10):
        metric.update(preds[s : s + 10], target[s : s + 10], sample_weight=weight[s : s + 10])
    with pytest.raises(ValueError, match="this update has no `sample_weight` but earlier updates had"):
        metric.update(preds[30:], target[30:])
    plain = VarlenAUROC(thresholds=thresholds)
    for s in range(0, 30, 10):
        plain.update(preds[s : s + 10], target[s : s + 10])
    with pytest.raises(ValueError, match="this update has `sample_weight` but earlier updates had none"):
        plain.update(preds[30:], target[30:], sample_weight=weight[30:])
    if thresholds is None:
        with pytest.raises(ValueError, match="this update has `sample_ids` but earlier updates had none"):
            plain.update(preds[30:], target[30:], sample_ids=torch.arange(30, 40))
        ids = VarlenAUROC()
        for s in range(0, 30, 10):
            ids.update(preds[s : s + 10], target[s : s + 10], sample_ids=torch.arange(s, s + 10))
        with pytest.raises(ValueError, match="this update has no `sample_ids` but earlier updates had"):
            ids.update(preds[30:], target[30:])
    assert plain.rejected == 10 + (10 if thresholds is None else 0)


@pytest.mark.parametrize(
    ("column", "thresholds"),  # sample_ids need the exact mode
    [("sample_ids", None), ("sample_weight", None), ("sample_weight", torch.bfloat16), ("sample_weight", 5)],
)
@pytest.mark.parametrize("calls", [("update", "forward"), ("forward", "forward"), ("forward", "update")])
def test_a_mode_switch_through_forward_is_refused_and_changes_nothing(
    thresholds: object, column: str, calls: tuple[str, str]
) -> None:
    """``forward`` updates a reset metric inside torchmetrics' forward, yet a batch that switches the epoch's mode
    (ids or weights given or not) is refused there as in ``update``, and the metric keeps scikit-learn's value of the
    batches it took; each way round, after one or several batches.
    """
    gen = torch.Generator().manual_seed(3)
    target = torch.randint(0, 2, (40,), generator=gen)
    preds = torch.randint(0, 65, (40,), generator=gen) / 64  # exact in bfloat16: the 16-bit mode is exact
    extra = {"sample_ids": torch.arange(40), "sample_weight": torch.ones(40)}[column]
    for given_first in (True, False):
        metric = VarlenAUROC(thresholds=thresholds)
        step = {"update": metric.update, "forward": metric.forward}
        for s in range(0, 30, 10):
            first = {column: extra[s : s + 10]} if given_first else {}
            step[calls[0]](preds[s : s + 10], target[s : s + 10], **first)
        second = {} if given_first else {column: extra[30:]}
        with pytest.raises(ValueError, match=f"this update has {'no ' if given_first else ''}`{column}`"):
            step[calls[1]](preds[30:], target[30:], **second)
        assert metric.rejected == 10
        assert float(metric.compute()) == pytest.approx(_taken_value(thresholds, preds[:30], target[:30]), abs=1e-7)


def _taken_value(thresholds: object, preds: torch.Tensor, target: torch.Tensor) -> float:
    """scikit-learn's AUROC; binned: torchmetrics' (the same thresholds count ties as torchmetrics does)."""
    if isinstance(thresholds, int):
        from torchmetrics.classification import BinaryAUROC

        return float(BinaryAUROC(thresholds=thresholds)(preds, target))
    return f32(roc_auc_score(target, preds))


@pytest.mark.parametrize(
    "values",
    [
        torch.tensor([0.1, 0.9], dtype=torch.float16),
        torch.tensor([0.1, 0.9], dtype=torch.bfloat16),
        torch.tensor([0.1, math.nan]),
        torch.tensor([-math.inf, 1.0], dtype=torch.float64),
        torch.tensor([-(2**63), 2**63 - 1]),
        torch.tensor([0, 2], dtype=torch.int8),
    ],
)
def test_both_ends_read_together_are_the_ends_read_one_by_one(values: torch.Tensor) -> None:
    """The device path of ``within`` and of the ids range (one read) gives the numbers of the CPU path exactly."""
    ends = torch.aminmax(values)
    apart, together = host_pair(ends, one_read=False), host_pair(ends, one_read=True)
    assert [type(v) for v in apart] == [type(v) for v in together]
    assert _same(apart, together)
    assert within(values, 0, 1) == (apart[0] >= 0 and apart[1] <= 1)


@pytest.mark.parametrize("validate_args", [True, False])
def test_a_logit_in_a_dropped_padding_row_does_not_normalise_the_kept_rows(validate_args: bool) -> None:
    """The [0, 1] test of the checks covers the whole batch; after the padding cut the kept rows decide."""
    metric = VarlenAUROC(dataset_size=3, validate_args=validate_args)
    metric.update(torch.tensor([0.2, 0.8, 0.6, 5.0]), torch.tensor([0, 1, 1, 0]))  # row 4 is sampler padding
    assert torch.equal(metric.preds[0], torch.tensor([0.2, 0.8, 0.6]))
    logits = VarlenAUROC(dataset_size=3, validate_args=validate_args)
    logits.update(torch.tensor([0.2, 3.0, 0.6, 5.0]), torch.tensor([0, 1, 1, 0]))
    assert torch.equal(logits.preds[0], expit(torch.tensor([0.2, 3.0, 0.6])))


@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel"])
def test_logit_batches_are_normalised_as_before(task: str) -> None:
    """Scores the checks found outside [0, 1] get the normalisation without a second test: the same stored rows."""
    gen = torch.Generator().manual_seed(3)
    if task == "binary":
        metric, preds = VarlenAUROC(), torch.randn(50, generator=gen) * 3
        target = torch.randint(0, 2, (50,), generator=gen)
        expected = expit(preds)
    elif task == "multiclass":
        metric, preds = VarlenMulticlassAUROC(num_classes=4), torch.randn(50, 4, generator=gen) * 3
        target = torch.randint(0, 4, (50,), generator=gen)
        expected = softmax(preds)
    else:
        from torchmetrics_varlen import VarlenMultilabelAUROC

        metric, preds = VarlenMultilabelAUROC(num_labels=4), torch.randn(50, 4, generator=gen) * 3
        target = torch.randint(0, 2, (50, 4), generator=gen)
        expected = expit(preds)
    metric.update(preds, target)
    assert torch.equal(metric.preds[0], expected)


_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


@pytest.mark.parametrize("dtype", _INT_DTYPES)
@pytest.mark.parametrize("n", [1, 64, 1023, 1024, 5000])
def test_the_unsigned_range_check_says_what_both_ends_say(dtype: torch.dtype, n: int) -> None:
    """``ints_within`` (one pass, the values read as unsigned) against the lowest and highest value read apart, over
    dtypes, sizes around the NumPy threshold, strided tensors, both extremes of the dtype and ``top`` at and past its
    range (then it does not tell).
    """
    info = torch.iinfo(dtype)
    gen = torch.Generator().manual_seed(n)
    base = torch.randint(0, min(info.max, 50) + 1, (2 * n,), generator=gen).to(dtype)
    variants = [base[:n], base[::2]]
    for where in (0, n - 1):
        for value in {info.min, -1 if info.min < 0 else 0, info.max, 51}:
            bad = base[:n].clone()
            bad[where] = value
            variants.append(bad)
    for values in variants:
        low, high = int(values.min()), int(values.max())
        for top in (0, 1, 50, 51, info.max, info.max + 1, 2**63 - 1):
            told = ints_within(values, top)
            if top > info.max and dtype != torch.uint8:
                assert told is None
            else:
                assert told is (low >= 0 and high <= top), (values, top)


@pytest.mark.parametrize("dataset_size", [None, 0, 1, 4096, 10_000])
@pytest.mark.parametrize("n", [64, 1023, 1024, 4096])
def test_the_ids_checks_take_exactly_the_valid_ids(n: int, dataset_size: int | None) -> None:
    """``update(..., sample_ids=)`` takes exactly the ids a plain check takes: integers, one per sample, >= 0 and,
    with ``dataset_size``, below it; small and large batches (NumPy's and torch's reductions), ids at either end.
    """
    preds, target = torch.rand(n), torch.randint(0, 2, (n,))
    cases = [torch.arange(n), torch.arange(n).flip(0), torch.arange(2 * n)[::2], torch.arange(n, dtype=torch.int32)]
    for where in (0, n // 2, n - 1):
        for value in (-1, -(2**63), 4095, 4096, 9_999, 10_000, 2**63 - 1):
            ids = torch.arange(n)
            ids[where] = value
            cases.append(ids)
    cases += [torch.arange(n).reshape(1, n), torch.arange(n + 1), torch.arange(n).float()]
    for ids in cases:
        metric = VarlenAUROC(dataset_size=dataset_size)
        valid = not ids.is_floating_point() and tuple(ids.shape) == (n,) and int(ids.min()) >= 0
        valid = valid and (dataset_size is None or int(ids.max()) < dataset_size)
        try:
            metric.update(preds, target, sample_ids=ids)
            taken = True
        except ValueError:
            taken = False
        assert taken == valid, ids
        assert metric.rejected == (0 if valid else n)


@pytest.mark.parametrize("dataset_size", [None, 5000])
@pytest.mark.parametrize("n", [64, 2048])
def test_a_bad_id_raises_the_old_message_on_the_first_and_a_later_batch_and_changes_nothing(
    n: int, dataset_size: int | None
) -> None:
    gen = torch.Generator().manual_seed(n)
    preds, target = torch.rand(2 * n, generator=gen), torch.randint(0, 2, (2 * n,), generator=gen)
    metric = VarlenAUROC(dataset_size=dataset_size)

    def bad(start: int, value: int) -> torch.Tensor:
        ids = torch.arange(start, start + n)
        ids[n // 2] = value
        return ids

    bads = [(-1, r"Expected `sample_ids` to be >= 0, but found -1")]
    if dataset_size is not None:
        bads.append((dataset_size, rf"sample id {dataset_size} is outside \[0, dataset_size={dataset_size}\)"))
    for value, message in bads:  # the first batch of the epoch
        with pytest.raises(ValueError, match=message):
            metric.update(preds[:n], target[:n], sample_ids=bad(0, value))
    metric.update(preds[:n], target[:n], sample_ids=torch.arange(n))
    for value, message in bads:  # a later one
        with pytest.raises(ValueError, match=message):
            metric.update(preds[n:], target[n:], sample_ids=bad(n, value))
    assert len(metric.ids) == len(metric.preds) == len(metric.ids_sub) == 1
    metric.update(preds[n:], target[n:], sample_ids=torch.arange(n, 2 * n))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*were never seen", category=UserWarning)  # a partial data set
        value = float(metric.compute())
    assert value == pytest.approx(roc_auc_score(target.numpy(), preds.numpy()), abs=1e-6)
    assert metric.rejected == 2 * n * len(bads)


@pytest.mark.parametrize("top", [1, 3])
@pytest.mark.parametrize("n", [500, 3000])
def test_big_label_batches_are_checked_as_small_ones(top: int, n: int) -> None:
    """From ``_HOST_REDUCE`` labels on the CPU the labels' range is one unsigned NumPy max: the verdicts of the
    torch path below it, over dtypes and both extremes.
    """
    preds = torch.rand(n)
    for dtype in _INT_DTYPES:
        for bad in (None, -1, top + 1, torch.iinfo(dtype).min, torch.iinfo(dtype).max):
            labels = (torch.arange(n) % (top + 1)).to(dtype)
            if bad is not None:
                labels[n // 2] = bad
            expected = int(labels.min()) >= 0 and int(labels.max()) <= top
            assert (_score_range(preds, labels, top) is not None) == expected, (dtype, bad)


def test_the_common_ids_batch_gets_the_columns_expand_per_sample_gives() -> None:
    """``_columns`` skips ``expand_per_sample`` only for binary scores with int64 CPU ids, one per score: there it
    hands back the same columns (the ids themselves, the shared zeros), elsewhere it is that function.
    """
    cpu = torch.device("cpu")
    cases = [
        ("binary", torch.rand(6), torch.randint(0, 2, (6,)), torch.arange(6)),
        ("binary", torch.rand(6), torch.randint(0, 2, (6,)), torch.arange(6, dtype=torch.int32)),
        ("binary", torch.rand(6, 3), torch.randint(0, 2, (6, 3)), torch.arange(6)),
        ("multiclass", torch.rand(6, 3), torch.randint(0, 3, (6,)), torch.arange(6)),
        ("multilabel", torch.rand(6, 3), torch.randint(0, 2, (6, 3)), torch.arange(6)),
    ]
    for task, preds, target, ids in cases:
        got = _columns(task, preds, target, ids, {})
        want = expand_per_sample({}, ids, sample_shape(task, preds, target), cpu)
        assert set(got) == set(want) == {"ids", "ids_sub"}
        for name in got:
            assert got[name].dtype == want[name].dtype
            assert torch.equal(got[name], want[name])
        if task == "binary" and ids.dtype == torch.int64 and preds.ndim == 1:
            assert got["ids"] is ids
    assert _columns("binary", torch.rand(3), torch.ones(3), None, {}) == {}
    groups = {"groups": torch.tensor([4, 5, 6])}
    got = _columns("binary", torch.rand(3), torch.ones(3), torch.arange(3), groups)
    assert torch.equal(got["groups"], groups["groups"])
    assert torch.equal(got["ids"], torch.arange(3))


@pytest.mark.parametrize("validate_args", [True, False])
@pytest.mark.parametrize(
    ("task", "preds_shape", "target_shape"),
    [
        ("binary", (100,), (1,)),  # one label would broadcast
        ("binary", (99,), (100,)),  # the extra label would be cut
        ("binary", (100,), (99,)),
        ("multiclass", (10, 3), (9,)),
        ("multilabel", (10, 3), (10, 2)),
        ("multilabel", (10, 3), (3, 10)),  # the same count, transposed: stored, every compute() would fail
        ("multiclass", (10,), (10,)),  # no class dimension
    ],
)
def test_mismatched_sizes_are_refused_even_without_validation(
    task: str, preds_shape: tuple[int, ...], target_shape: tuple[int, ...], validate_args: bool
) -> None:
    from torchmetrics_varlen import VarlenAUROC
    from torchmetrics_varlen.functional import auroc

    kwargs: dict[str, Any] = {"task": task, "num_classes": 3, "num_labels": 3 if task == "multilabel" else None}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    preds = torch.rand(preds_shape)
    target = torch.randint(0, 2, target_shape)
    with pytest.raises(
        ValueError,
        match="same samples|Expected `target` of shape|Expected `preds` and `target`|Expected `preds` of shape",
    ):
        auroc(preds, target, validate_args=validate_args, **kwargs)
    metric = VarlenAUROC(validate_args=validate_args, **kwargs)
    good_preds = torch.rand(8, 3) if task != "binary" else torch.rand(8)
    good_target = torch.tensor([[0, 1, 1], [1, 0, 0]] * 4) if task == "multilabel" else torch.tensor([0, 1, 2, 1] * 2)
    if task == "binary":
        good_target = good_target.clamp(max=1)
    metric.update(good_preds, good_target)
    before = metric.compute()
    with pytest.raises(
        ValueError,
        match="same samples|Expected `target` of shape|Expected `preds` and `target`|Expected `preds` of shape",
    ):
        metric.update(preds, target)
    metric._computed = None  # read the states again, not the cached value
    assert torch.equal(metric.compute(), before)  # nothing of the refused batch was stored


def _expected_check(
    preds: torch.Tensor, target: torch.Tensor, task: str, top: int, ignore_index: int | None, normalization: Any
) -> str | bool | None:
    """What a batch must get from ``check_inputs``, worked out plainly in NumPy: the start of the message it raises,
    or whether every score lies in [0, 1] (``None`` with ``ignore_index``).
    """
    p, t = preds.double().numpy(), target.double().numpy()
    keep = np.ones(t.shape, dtype=bool) if ignore_index is None else t != ignore_index
    labels = t[keep]
    scores = p[np.expand_dims(keep, 1).repeat(p.shape[1], 1)] if task == "multiclass" else p[keep]
    whole = (labels == np.trunc(labels)) & (labels >= 0) & (labels <= top)  # NaN: False
    if target.dtype != torch.bool and not whole.all():
        return "Expected `target` to hold"
    if not np.isfinite(scores).all():
        return "Expected `preds` to be finite"
    in_unit = bool(((scores >= 0) & (scores <= 1)).all())
    if task == "binary" and normalization == "softmax" and not in_unit:
        return "Expected `normalization` to be 'sigmoid' or None"
    return in_unit if ignore_index is None else None


@pytest.mark.parametrize("seed", range(300))
def test_check_inputs_raises_exactly_where_a_plain_check_says(seed: int) -> None:
    """Drawn batches (task, label dtype, labels out of range or fractional or NaN, NaN / infinite / logit scores of
    four float dtypes, strided views, ``ignore_index``, normalisation): ``check_inputs`` accepts or refuses each as a
    plain NumPy check does, with its message, and says whether the scores lie in [0, 1] as that check does.
    """
    gen = np.random.default_rng(seed)
    task = str(gen.choice(["binary", "multiclass", "multilabel"]))
    width = int(gen.integers(2, 5))
    n = int(gen.integers(0, 9))
    top = width - 1 if task == "multiclass" else 1
    shape = (n, width) if task != "binary" else (n,)
    scores = gen.random(shape) if gen.random() < 0.5 else gen.normal(0.0, 3.0, shape)
    labels = gen.integers(0, top + 1, shape[:1] if task == "multiclass" else shape).astype(np.float64)
    ignore_index = int(gen.choice([-1, 7])) if gen.random() < 0.3 else None
    for _ in range(int(gen.integers(0, 3))):  # a few broken entries, anywhere
        if n:
            flat = scores.reshape(-1) if gen.random() < 0.5 else labels.reshape(-1)
            flat[gen.integers(0, flat.size)] = gen.choice([np.nan, np.inf, -np.inf, -1.0, 0.5, top + 1.0, 7.0])
    label_dtype = gen.choice(["int64", "int8", "float32", "bool"])
    if label_dtype != "float32":
        labels = np.nan_to_num(np.trunc(labels), nan=0, posinf=0, neginf=0)
    if label_dtype == "bool":
        labels = labels != 0
    dtype = [torch.float16, torch.bfloat16, torch.float32, torch.float64][int(gen.integers(0, 4))]
    preds = torch.tensor(scores, dtype=dtype)
    if gen.random() < 0.3:  # a strided view, as a column of a softmax or a transposed output hands it over
        preds = torch.stack((preds, preds), dim=-1)[..., 0] if task == "binary" else preds.T.contiguous().T
    target = torch.tensor(labels.astype(str(label_dtype)) if label_dtype != "bool" else labels)
    normalization = gen.choice([None, "sigmoid", "softmax"])
    expected = _expected_check(preds, target, task, top, ignore_index, normalization)
    num_classes = width if task == "multiclass" else None
    num_labels = width if task == "multilabel" else None
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=re.escape(expected)):
            check_inputs(preds, target, task, num_classes, num_labels, ignore_index, normalization)
    else:
        assert check_inputs(preds, target, task, num_classes, num_labels, ignore_index, normalization) is expected
