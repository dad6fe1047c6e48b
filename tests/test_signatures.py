"""Every public metric class names its keywords: the synchronisation options keyword-only and visible to
``inspect.signature`` (so to IDEs and mypy), ``**kwargs`` only for torchmetrics' own ``Metric`` keywords (a typo is a
``TypeError`` naming it), no private parameter on ``update``, and an ``Args`` list that names every parameter.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from torchmetrics import Metric

import torchmetrics_varlen as tv
from torchmetrics_varlen.classification import __all__ as PUBLIC
from torchmetrics_varlen.classification._base import METRIC_KEYWORDS, _VarlenMetric

CLASSES = [getattr(tv, name) for name in PUBLIC if issubclass(getattr(tv, name), Metric)]
SYNC_KEYWORDS = ("dataset_size", "sync_timeout", "compute_on_rank", "compute_sharded", "sync_key")
REQUIRED = {"num_classes": 3, "num_labels": 3}  # the task classes' required sizes
WRAPPERS = [tv.VarlenAUROC, tv.VarlenAveragePrecision, tv.VarlenROC, tv.VarlenPrecisionRecallCurve]
_BASE = inspect.signature(_VarlenMetric.__init__).parameters


def _required(cls: type) -> dict[str, int]:
    params = inspect.signature(cls).parameters
    return {
        name: REQUIRED[name] for name, p in params.items() if p.default is inspect.Parameter.empty and name in REQUIRED
    }


def test_every_public_metric_class_is_covered() -> None:
    assert len(CLASSES) == len(PUBLIC) - 1  # all but the BootstrapInterval tuple
    assert tv.VarlenBootstrap in CLASSES


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_synchronisation_keywords_are_named_keyword_only(cls: type) -> None:
    """``inspect.signature(cls)`` (what IDEs show: not the task wrapper's ``__new__``) is the constructor's, and
    every synchronisation keyword is in it by name, keyword-only, with the default of every other class.
    """
    params = inspect.signature(cls).parameters
    init = dict(inspect.signature(cls.__init__).parameters)
    init.pop("self")
    assert list(params) == list(init)
    kinds = {p.kind for p in params.values()}
    assert inspect.Parameter.VAR_POSITIONAL not in kinds
    if cls is tv.VarlenBootstrap:  # the wrapped metric carries the options: nothing else is taken
        assert inspect.Parameter.VAR_KEYWORD not in kinds
        return
    for name in SYNC_KEYWORDS:
        assert name in params, f"{cls.__name__} hides `{name}`"
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default == _BASE[name].default, name
    assert list(params.values())[-1].kind is inspect.Parameter.VAR_KEYWORD  # torchmetrics' Metric keywords


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_update_has_no_private_parameter(cls: type) -> None:
    params = inspect.signature(cls.update).parameters
    assert not [name for name in params if name.startswith("_")]
    assert inspect.Parameter.VAR_KEYWORD not in {p.kind for p in params.values()}


@pytest.mark.parametrize("cls", [c for c in CLASSES if c is not tv.VarlenBootstrap], ids=lambda c: c.__name__)
def test_a_misspelt_keyword_is_a_type_error_naming_it(cls: type) -> None:
    with pytest.raises(TypeError, match="dataset_sise"):
        cls(**_required(cls), dataset_sise=3)


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
@pytest.mark.parametrize("cls", WRAPPERS, ids=lambda c: c.__name__)
def test_a_misspelt_keyword_through_task_is_a_type_error(cls: type, task: str) -> None:
    with pytest.raises(TypeError, match="sync_timout"):
        cls(task=task, **REQUIRED, sync_timout=3)


def test_bootstrap_refuses_unknown_keywords() -> None:
    with pytest.raises(TypeError, match="dataset_size"):
        tv.VarlenBootstrap(tv.VarlenAUROC(), dataset_size=3)  # type: ignore[call-arg]


def test_metric_keywords_are_torchmetrics_own() -> None:
    """The names torchmetrics' ``Metric.__init__`` takes from its ``**kwargs`` (read from its source, so a release
    that adds one fails here), each accepted and set.
    """
    popped = set(re.findall(r"kwargs\.pop\(\s*[\"'](\w+)[\"']", inspect.getsource(Metric.__init__)))
    assert popped == METRIC_KEYWORDS
    metric = tv.VarlenAUROC(compute_on_cpu=True, dist_sync_on_step=False, sync_on_compute=False)
    assert (metric.compute_on_cpu, metric.sync_on_compute) == (True, False)


def test_sync_keywords_reach_the_metric_by_name() -> None:
    """Each named keyword is passed on, positionally-declared arguments keep their places."""
    metric = tv.VarlenAUROC(0.5, None, -1, False, dataset_size=9, sync_timeout=None, compute_on_rank=0, sync_key="k")
    assert (metric.max_fpr, metric.ignore_index, metric.validate_args) == (0.5, -1, False)
    assert (metric.dataset_size, metric.sync_timeout, metric.compute_on_rank) == (9, None, 0)
    assert tv.VarlenAveragePrecision(compute_sharded=True).compute_sharded is True
    group = tv.VarlenGroupAUROC("uniform", dataset_size=4, return_per_group=True)
    assert (group.weighting, group.dataset_size, group.return_per_group) == ("uniform", 4, True)
    interval = tv.VarlenAUROCInterval(0.9, sync_timeout=5.0)
    assert (interval.level, interval.sync_timeout) == (0.9, 5.0)
    with pytest.raises(ValueError, match="compute_sharded"):
        tv.VarlenAUROCComparison(compute_sharded=True)


def _args_section(doc: str) -> list[str]:
    section = doc.split("\n    Args:\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^        (\w+):", section, flags=re.MULTILINE)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_docstring_args_name_every_parameter(cls: type) -> None:
    """The class docstring's ``Args`` list: the constructor's parameters, in its order."""
    assert cls.__doc__ is not None
    assert _args_section(cls.__doc__) == list(inspect.signature(cls).parameters)


def test_forward_continues_the_sampler_positions() -> None:
    """``forward`` passes the batch's sampler position to ``update`` without a parameter: the bootstrap seeds a
    sample by its position (one process: the position is the key), so stepping through the epoch with ``forward``
    resamples as ``update`` does, and as ids ``0 .. N - 1`` do (a restart at each batch would repeat keys 0 to 3).
    """
    gen = torch.Generator().manual_seed(3)
    target = torch.randint(0, 2, (12,), generator=gen)
    preds = (torch.rand(12, generator=gen) + 0.4 * target).clamp(max=1)
    stepped, updated = (tv.VarlenBootstrap(tv.VarlenAUROC(dataset_size=12), num_bootstraps=64) for _ in range(2))
    by_ids = tv.VarlenBootstrap(tv.VarlenAUROC(), num_bootstraps=64)
    for i in range(0, 12, 4):
        stepped(preds[i : i + 4], target[i : i + 4])
        updated.update(preds[i : i + 4], target[i : i + 4])
        by_ids.update(preds[i : i + 4], target[i : i + 4], sample_ids=torch.arange(i, i + 4))
    assert stepped.compute() == updated.compute() == by_ids.compute()
    assert stepped._forward_start is None
