"""The private names of torch and torchmetrics the package relies on exist in the installed versions, and the
package uses no private name of either that ``_compat.py`` does not declare.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torchmetrics
from torchmetrics.classification import BinaryAUROC

import torchmetrics_varlen
from torchmetrics_varlen import _compat

PACKAGE = Path(torchmetrics_varlen.__file__).parent
VERSIONS = f"torch {torch.__version__}, torchmetrics {torchmetrics.__version__}"


@pytest.mark.parametrize("name", _compat.TORCH_PRIVATE)
def test_torch_distributed_private_resolves(name: str) -> None:
    assert callable(getattr(dist.distributed_c10d, name, None)), f"torch.distributed.distributed_c10d.{name} is gone"


@pytest.mark.parametrize("name", _compat.TORCH_C_PRIVATE)
def test_torch_c_private_resolves(name: str) -> None:
    assert callable(getattr(torch._C, name, None)), f"torch._C.{name} is gone ({VERSIONS})"


def test_the_grad_mode_switch_is_what_set_grad_enabled_sets() -> None:
    before = torch.is_grad_enabled()
    try:
        for mode in (False, True, False):
            _compat.set_grad_mode(mode)
            assert torch.is_grad_enabled() is mode
            with torch.set_grad_enabled(not mode):
                assert torch.is_grad_enabled() is (not mode)
            assert torch.is_grad_enabled() is mode
    finally:
        torch.set_grad_enabled(before)


@pytest.mark.parametrize("name", _compat.TORCH_MODULE_OVERRIDDEN)
def test_torch_module_method_exists(name: str) -> None:
    assert callable(getattr(torch.nn.Module, name, None)), f"torch.nn.Module.{name} is gone ({VERSIONS})"


@pytest.mark.parametrize("name", _compat.TORCHMETRICS_OVERRIDDEN)
def test_torchmetrics_method_exists(name: str) -> None:
    """An overridden method that torchmetrics renamed would silently stop being called."""
    assert callable(getattr(torchmetrics.Metric, name, None)), f"torchmetrics.Metric.{name} is gone ({VERSIONS})"


@pytest.mark.parametrize("name", _compat.TORCHMETRICS_ATTRIBUTES)
def test_torchmetrics_attribute_exists(name: str) -> None:
    metric = BinaryAUROC()
    assert name in vars(metric) or hasattr(metric, name), f"torchmetrics.Metric().{name} is gone ({VERSIONS})"


def test_torchmetrics_attributes_mean_what_the_package_assumes() -> None:
    """The counter counts updates, the cache holds the computed value, a sync sets the flags."""
    metric = BinaryAUROC()
    assert (metric._update_count, metric._computed, metric._is_synced, metric._to_sync) == (0, None, False, True)
    metric.update(torch.tensor([0.2, 0.8]), torch.tensor([0, 1]))
    value = metric.compute()
    assert metric._update_count == 1
    assert metric._computed is not None
    assert torch.equal(metric._computed, value)
    assert set(metric._defaults) == set(metric._reductions) == set(metric._persistent)


def _private_names(text: str) -> set[str]:
    """Private attributes read (``x._name``) and private methods defined (``def _name``) in a source file."""
    return set(re.findall(r"\.(_[a-z][a-z0-9_]*)\b", text)) | set(re.findall(r"def (_[a-z][a-z0-9_]*)\(", text))


def test_every_private_name_used_is_declared() -> None:
    """A private name of torchmetrics.Metric / torch.nn.Module used anywhere in the package is declared in
    ``_compat`` (so the tests above check it), and only ``_compat`` reaches into ``torch.distributed``'s privates.
    """
    declared = set(_compat.TORCHMETRICS_OVERRIDDEN + _compat.TORCHMETRICS_ATTRIBUTES + _compat.TORCH_MODULE_OVERRIDDEN)
    metric = BinaryAUROC()
    undeclared: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if path.name != "_compat.py":
            assert "distributed_c10d._" not in text, f"{path.name} calls a private of torch.distributed"
        upstream = {
            n
            for n in _private_names(text)
            if (hasattr(torchmetrics.Metric, n) or n in vars(metric)) and n not in vars(torch.nn.Module())
        }
        upstream |= {n for n in _private_names(text) if n.startswith("_load_") and hasattr(torch.nn.Module, n)}
        if upstream - declared:
            undeclared[path.name] = upstream - declared
    assert not undeclared, f"private names used but not declared in _compat: {undeclared}"
