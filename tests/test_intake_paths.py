"""The per-batch fast paths of ``update()`` say exactly what the general checks say.

The device path of the input checks (every end read with one ``tolist()``, one sync on CUDA) is run here on the CPU
against the CPU path; the mode checks that skip working out the mode raise exactly where the full checks raise.
"""

from __future__ import annotations

import math

import pytest
import torch

from torchmetrics_varlen import VarlenAUROC, VarlenMulticlassAUROC
from torchmetrics_varlen._checks import _score_range, check_inputs, host_pair, validate_sample_ids, within
from torchmetrics_varlen._intake import _zeros

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


@pytest.mark.parametrize("high", [True, False])
def test_sample_ids_range(high: bool) -> None:
    ids = torch.tensor([4, 2, 9])
    assert validate_sample_ids(ids, torch.Size([3]), high=high) == ((2, 9) if high else (2, 2))
    with pytest.raises(ValueError, match="Expected `sample_ids` to be >= 0, but found -1"):
        validate_sample_ids(torch.tensor([4, -1, 9]), torch.Size([3]), high=high)


def test_id_out_of_the_data_set_is_still_found_with_dataset_size() -> None:
    metric = VarlenAUROC(dataset_size=5)
    with pytest.raises(ValueError, match="sample id 5 is outside"):
        metric.update(torch.tensor([0.2, 0.7]), torch.tensor([0, 1]), sample_ids=torch.tensor([1, 5]))
    metric.update(torch.tensor([0.2, 0.7]), torch.tensor([0, 1]), sample_ids=torch.tensor([1, 4]))
    assert metric.sync_report is None
    assert metric.rejected == 2


def test_zero_views_are_zeros_of_the_length_asked() -> None:
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
    assert torch.equal(logits.preds[0], torch.tensor([0.2, 3.0, 0.6]).sigmoid())


@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel"])
def test_logit_batches_are_normalised_as_before(task: str) -> None:
    """Scores the checks found outside [0, 1] get the normalisation without a second test: the same stored rows."""
    gen = torch.Generator().manual_seed(3)
    if task == "binary":
        metric, preds = VarlenAUROC(), torch.randn(50, generator=gen) * 3
        target = torch.randint(0, 2, (50,), generator=gen)
        expected = preds.sigmoid()
    elif task == "multiclass":
        metric, preds = VarlenMulticlassAUROC(num_classes=4), torch.randn(50, 4, generator=gen) * 3
        target = torch.randint(0, 4, (50,), generator=gen)
        expected = preds.softmax(dim=1)
    else:
        from torchmetrics_varlen import VarlenMultilabelAUROC

        metric, preds = VarlenMultilabelAUROC(num_labels=4), torch.randn(50, 4, generator=gen) * 3
        target = torch.randint(0, 2, (50, 4), generator=gen)
        expected = preds.sigmoid()
    metric.update(preds, target)
    assert torch.equal(metric.preds[0], expected)
