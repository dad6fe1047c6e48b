"""The public API: every exported name is documented with an example that the doctest run executes."""

from __future__ import annotations

import inspect

import pytest

import torchmetrics_varlen
import torchmetrics_varlen.functional

PUBLIC = [(torchmetrics_varlen, name) for name in torchmetrics_varlen.__all__ if name != "__version__"] + [
    (torchmetrics_varlen.functional, name) for name in torchmetrics_varlen.functional.__all__
]


@pytest.mark.parametrize(("module", "name"), PUBLIC, ids=[f"{m.__name__}.{n}" for m, n in PUBLIC])
def test_every_public_name_has_a_runnable_example(module: object, name: str) -> None:
    doc = inspect.getdoc(getattr(module, name)) or ""
    assert "Example:" in doc, f"{name} has no Example section"
    assert ">>> " in doc, f"{name}'s example has no doctest"


def test_all_is_sorted_and_complete() -> None:
    assert torchmetrics_varlen.__all__ == sorted(torchmetrics_varlen.__all__)
    assert torchmetrics_varlen.functional.__all__ == sorted(torchmetrics_varlen.functional.__all__)
    for name in torchmetrics_varlen.__all__:
        assert hasattr(torchmetrics_varlen, name)
