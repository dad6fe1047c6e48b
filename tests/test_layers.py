"""The shape of the code: which layer may import which, no import circles, one compute strategy per metric."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import torchmetrics_varlen
from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision, VarlenROC
from torchmetrics_varlen._core.sharded import Sharded
from torchmetrics_varlen._core.strategies import GatherToAll, GatherToOne, Summed

PACKAGE = Path(torchmetrics_varlen.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """The package's modules that ``path`` imports, anywhere in the file (``TYPE_CHECKING`` blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchmetrics_varlen"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("torchmetrics_varlen"))
    return found


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("torchmetrics_varlen._dist.")))
def test_dist_knows_no_metric_math(module: str) -> None:
    """``_dist`` is transport: it imports nothing from ``functional`` (the per-shard math is passed in) nor from the
    metrics.
    """
    outside = {m for m in _imports(MODULES[module]) if not m.startswith("torchmetrics_varlen._dist")}
    assert outside <= {"torchmetrics_varlen._compat"}, f"{module} imports {sorted(outside)}"


def test_no_import_circle() -> None:
    """The package's modules import each other without a circle (imports under ``TYPE_CHECKING`` count too)."""
    graph = {m: {d for d in _imports(p) if d in MODULES} for m, p in MODULES.items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError(" -> ".join([*path[path.index(module) :], module]))
        if module in done:
            return
        for dep in sorted(graph[module]):
            visit(dep, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


@pytest.mark.parametrize(
    ("make", "strategy", "joins"),
    [
        (lambda: VarlenAUROC(), GatherToAll, True),
        (lambda: VarlenAUROC(compute_on_rank=1), GatherToOne, False),
        (lambda: VarlenAveragePrecision(compute_sharded=True), Sharded, False),
        (lambda: VarlenAUROC(thresholds=11), Summed, True),
        (lambda: VarlenAUROC(thresholds=torch.float16), Summed, True),
        (lambda: VarlenROC(thresholds=torch.bfloat16, compute_on_rank=0), Summed, False),
    ],
)
def test_one_strategy_chosen_in_the_constructor(make: object, strategy: type, joins: bool) -> None:
    """Each configuration gets its strategy object once; the sync seam asks it, never the flags."""
    metric = make()  # type: ignore[operator]
    assert type(metric._strategy) is strategy
    assert metric._joins_collection_sync() is joins
    names = metric._strategy.state_names(metric)
    if strategy is Summed:
        assert names == (metric.mode.state_name,)
        assert metric._sync_payload().cat == {}
    else:
        assert names[:4] == ("preds", "target", "ids", "ids_sub")
    if strategy is GatherToOne:
        assert metric._sync_payload().dst == 1


CLASSES = sorted(
    m
    for m in MODULES
    if m.startswith("torchmetrics_varlen.classification")
    or m in ("torchmetrics_varlen.wrappers", "torchmetrics_varlen.collection")
)


@pytest.mark.parametrize("module", CLASSES)
def test_classes_reach_the_transport_through_the_core(module: str) -> None:
    """The metric classes, ``Varlen`` and ``VarlenCollection`` import nothing of ``_dist``: the core
    (``_core/guarded_sync.py`` and the strategies) is their one way to the transport.
    """
    transport = {m for m in _imports(MODULES[module]) if m.startswith("torchmetrics_varlen._dist")}
    assert not transport, f"{module} imports {sorted(transport)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("torchmetrics_varlen.functional")))
def test_functional_knows_no_metric_side(module: str) -> None:
    """``functional`` is pure math: it imports nothing of the core, the classes or the transport."""
    outside = {m for m in _imports(MODULES[module]) if not m.startswith("torchmetrics_varlen.functional")}
    assert not outside, f"{module} imports {sorted(outside)}"


def test_internals_example_runs() -> None:
    """The worked example of docs/pages/internals.md (how to add a metric) runs and gives its stated value."""
    page = (PACKAGE.parent / "docs" / "pages" / "internals.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "internals.md", "exec"), {})


def test_internals_names_files_that_exist() -> None:
    """Every file docs/pages/internals.md names (in backticks, or as a path in its diagrams) exists, and every module
    of ``_core/`` has its row in the map: the map cannot drift from the tree (issue #38).
    """
    import re

    root = PACKAGE.parent
    page = (root / "docs" / "pages" / "internals.md").read_text()
    named = set(re.findall(r"`([\w/.]+\.py)`", page))
    named |= set(re.findall(r"\b((?:_core|_dist|functional|classification)/\w+\.py)", page))
    assert len(named) > 20  # the parse found the map
    bases = (root, PACKAGE, PACKAGE / "_core", PACKAGE / "functional")  # `dedup.py`-style names in a row of _core/
    missing = sorted(name for name in named if not any((base / name).is_file() for base in bases))
    assert not missing, f"internals.md names files that do not exist: {missing}"
    mapped = {n for n in named if n.startswith("_core/")}
    modules = {f"_core/{p.name}" for p in (PACKAGE / "_core").glob("*.py") if p.name != "__init__.py"}
    assert not modules - mapped, f"_core modules missing from internals.md: {sorted(modules - mapped)}"


def test_no_descriptor_or_setattr_override_on_the_metric_side() -> None:
    """Plain state (issue #30): no metric or collection class of the package holds a data descriptor (a state that
    would write when read; ``property`` aside) or overrides ``__setattr__``, except ``Varlen``, whose ``__setattr__``
    forwards the wrapped metric's state names to it (what it proxies, not a faster path).
    """
    import inspect

    found = []
    for module_name in MODULES:
        module = __import__(module_name, fromlist=["_"])
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if not cls.__module__.startswith("torchmetrics_varlen") or not issubclass(cls, torch.nn.Module):
                continue
            for name, value in vars(cls).items():
                if name == "__setattr__" and cls.__name__ != "Varlen":
                    found.append(f"{cls.__qualname__}.__setattr__")
                kind = type(value)
                if name.startswith("__") or isinstance(value, property):
                    continue
                if hasattr(kind, "__get__") and hasattr(kind, "__set__"):
                    found.append(f"{cls.__qualname__}.{name}: a data descriptor ({kind.__name__})")
    assert not found, found
