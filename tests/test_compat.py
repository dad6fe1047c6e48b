"""The private names of torch, torchmetrics and the standard library that the package relies on: it uses none that
``_compat.PRIVATE_NAMES`` does not list, each listed one exists in the installed versions, and none is listed that
the package no longer uses.

The names are found in the source, not listed here: every module of the package is parsed, and every private name
(``_x``, not a dunder) it reads, writes, calls, overrides, imports or names in a string (``getattr``, ``__dict__``, a
tuple of attribute names) counts, unless the package defines it itself (a function, class, method, attribute it
sets, parameter, keyword, ``add_state`` name, module global, key constant). A name it defines that a foreign base
class of its own classes also has (an override: ``_sync_dist``, ``_computed``) still counts. Moving code between the
package's files changes nothing here.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import torchmetrics
from torchmetrics import MetricCollection
from torchmetrics.classification import BinaryAUROC

import torchmetrics_varlen
from torchmetrics_varlen import _compat

PACKAGE = Path(torchmetrics_varlen.__file__).parent
VERSIONS = f"torch {torch.__version__}, torchmetrics {torchmetrics.__version__}"
# the registry's own assignments in _compat.py: its strings are not uses
REGISTRY = frozenset(("PRIVATE_NAMES", "MAY_BE_ABSENT"))
# owners whose instance attributes (set in __init__, not on the class) the package uses: how to make one
INSTANCES: dict[str, Callable[[], Any]] = {
    "torch.nn.Module": torch.nn.Module,
    "torch.Tensor": lambda: torch.zeros(1),
    "torchmetrics.Metric": BinaryAUROC,
    "torchmetrics.MetricCollection": lambda: MetricCollection([BinaryAUROC()]),
}
_PRIVATE = re.compile(r"_[A-Za-z_][A-Za-z0-9_]*")


def _is_private(name: str) -> bool:
    return _PRIVATE.fullmatch(name) is not None and not (name.startswith("__") and name.endswith("__"))


@dataclass(frozen=True)
class Use:
    """A private name used at ``where`` (``file:line``); ``owner`` the module it is imported from, ``called`` whether
    it is called or overridden by a method (then it must be callable upstream).
    """

    name: str
    where: str
    owner: str | None = None
    called: bool = False
    attribute: bool = True  # an attribute (``x._name``, a class member), not a string


@dataclass
class Scan:
    """What the package's modules use and define."""

    uses: list[Use] = field(default_factory=list)
    attributes: set[str] = field(default_factory=set)  # attributes and keys the package defines or sets
    names: set[str] = field(default_factory=set)  # every other name it defines (functions, parameters, keywords, ...)


def _own_module(module: str | None) -> bool:
    return module is not None and (module == PACKAGE.name or module.startswith(PACKAGE.name + "."))


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


class _Scanner(ast.NodeVisitor):
    """One module's private names: uses of them (any name), definitions (private or not: a string may name either)."""

    def __init__(self, scan: Scan, path: str, modules: frozenset[str]) -> None:
        self.scan, self.path, self.modules = scan, path, modules
        self.skipped: set[int] = set()  # docstrings
        self.called: set[int] = set()  # attributes that are called
        self.module_aliases: set[str] = set()  # names bound to the package's own modules

    def use(self, name: str, node: ast.AST, **kwargs: Any) -> None:
        self.scan.uses.append(Use(name, f"{self.path}:{getattr(node, 'lineno', 0)}", **kwargs))

    def visit_Module(self, node: ast.Module) -> None:
        for scope in ast.walk(node):
            body = getattr(scope, "body", None)
            scopes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
            if isinstance(scope, scopes) and body and isinstance(body[0], ast.Expr) and _string(body[0].value):
                self.skipped.add(id(body[0].value))
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        """Members are attributes the package defines, and overrides where a foreign base class has them."""
        for member in node.body:
            if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names, method = [member.name], True
            elif isinstance(member, (ast.Assign, ast.AnnAssign)):
                names, method = [t.id for t in _targets(member) if isinstance(t, ast.Name)], False
            else:
                continue
            self.scan.attributes.update(names)
            for name in names:
                if _is_private(name):
                    self.use(name, member, called=method)
        self.scan.names.add(node.name)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scan.names.add(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_arg(self, node: ast.arg) -> None:
        self.scan.names.add(node.arg)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None:
            self.scan.names.add(node.arg)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.scan.names.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Store):
            self.scan.attributes.add(node.attr)
        module_member = isinstance(node.value, ast.Name) and node.value.id in self.module_aliases
        if _is_private(node.attr) and not module_member:
            self.use(node.attr, node, called=id(node) in self.called)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _is_private(node.value) and id(node) not in self.skipped:
            self.use(node.value, node, attribute=False)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        for value in node.values:  # the text between the fields names nothing
            if isinstance(value, ast.FormattedValue):
                self.visit(value)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            parts = alias.name.split(".")
            if _own_module(alias.name):
                self.module_aliases.add(alias.asname or parts[0])
            else:
                for i, part in enumerate(parts):
                    if _is_private(part):
                        self.use(part, node, owner=".".join(parts[:i]))
            self.scan.names.add(alias.asname or parts[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        foreign = node.level == 0 and not _own_module(module)
        for alias in node.names:
            if foreign and (_is_private(alias.name) or any(_is_private(p) for p in module.split("."))):
                self.use(alias.name, node, owner=module)
            if not foreign and f"{module}.{alias.name}" in self.modules:
                self.module_aliases.add(alias.asname or alias.name)
            self.scan.names.add(alias.asname or alias.name)

    def visit_Assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        """``KEY = "_x"``: a key the package names itself. The registry's own values are no uses."""
        names = [t.id for t in _targets(node) if isinstance(t, ast.Name)]
        key = _string(node.value)
        if key is not None and len(names) == len(_targets(node)):
            self.scan.attributes.add(key)
        if REGISTRY.isdisjoint(names):
            self.generic_visit(node)
        else:
            for target in _targets(node):
                self.visit(target)

    visit_AnnAssign = visit_Assign

    def visit_Call(self, node: ast.Call) -> None:
        """``setattr(obj, "_x", v)``, ``add_state("_x", ...)``: attributes the package sets."""
        self.called.add(id(node.func))
        function = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        position = {"setattr": 1, "add_state": 0}.get(function or "")
        if position is not None and len(node.args) > position and _string(node.args[position]) is not None:
            self.scan.attributes.add(str(_string(node.args[position])))
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        """``obj.__dict__["_x"] = v``: a key the package sets."""
        key = _string(node.slice)
        if isinstance(node.ctx, ast.Store) and key is not None:
            self.scan.attributes.add(key)
        self.generic_visit(node)


@functools.cache
def _scan() -> Scan:
    """Every private name the package uses, and every name it defines."""
    files = sorted(PACKAGE.rglob("*.py"))
    modules = frozenset(
        ".".join(f.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__") for f in files
    )
    scan = Scan()
    for path in files:
        relative = path.relative_to(PACKAGE.parent).as_posix()
        _Scanner(scan, relative, modules).visit(ast.parse(path.read_text(), relative))
    return scan


def _resolve(owner: str) -> Any:
    """The object an owner of the registry names: a module, or an attribute path below the longest importable one."""
    parts = owner.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise ImportError(owner)


@functools.cache
def _instance(owner: str) -> Any:
    return INSTANCES[owner]()


def _has(owner: str, name: str) -> bool:
    """Whether ``owner`` (or, for the classes of :data:`INSTANCES`, a new instance of it) has ``name``."""
    try:
        if hasattr(_resolve(owner), name):
            return True
    except (ImportError, AttributeError):
        return False
    return owner in INSTANCES and hasattr(_instance(owner), name)


@functools.cache
def _foreign_bases() -> tuple[type, ...]:
    """The classes of torch, torchmetrics (and others) that the package's own classes derive from."""
    bases: dict[type, None] = {}
    for info in pkgutil.walk_packages(torchmetrics_varlen.__path__, torchmetrics_varlen.__name__ + "."):
        if info.name.endswith("__main__"):
            continue
        for value in vars(importlib.import_module(info.name)).values():
            if isinstance(value, type) and _own_module(value.__module__):
                bases.update((b, None) for b in value.__mro__ if not _own_module(b.__module__) and b is not object)
    return tuple(bases)


def _upstream_names(cls: type) -> set[str]:
    """The private names of a foreign class: its attributes, and those its source sets on instances or names."""
    names = {n for n in dir(cls) if _is_private(n)}
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_private(node.attr):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_private(node.value):
            names.add(node.value)
    return names


@functools.cache
def _overridable() -> frozenset[str]:
    """Private names of the foreign base classes: where the package defines one, it overrides theirs."""
    return frozenset(n for cls in _foreign_bases() for n in _upstream_names(cls))


@functools.cache
def _foreign_uses() -> tuple[Use, ...]:
    """The uses of private names that are not the package's own: an attribute the package does not define or set
    (or that a foreign base class has: an override), a string that names none of its attributes, parameters,
    keywords, functions; anything imported from torch, torchmetrics or other libraries.
    """
    scan, overridable = _scan(), _overridable()
    attributes, names = scan.attributes - overridable, (scan.attributes | scan.names) - overridable
    return tuple(u for u in scan.uses if u.owner is not None or u.name not in (attributes if u.attribute else names))


def _registered() -> list[tuple[str, str]]:
    return [(owner, name) for owner, names in _compat.PRIVATE_NAMES.items() for name in names]


def _owners_having(name: str) -> list[str]:
    """The owners (of the registry, of :data:`INSTANCES`, the package's foreign base classes) that have ``name``."""
    candidates = list(dict.fromkeys([*_compat.PRIVATE_NAMES, *INSTANCES]))
    known = set()
    for owner in candidates:
        with contextlib.suppress(ImportError, AttributeError):
            known.add(id(_resolve(owner)))
    candidates += [f"{b.__module__}.{b.__qualname__}" for b in _foreign_bases() if id(b) not in known]
    return [owner for owner in candidates if _has(owner, name)]


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


def test_every_private_name_used_is_registered() -> None:
    """Every foreign private name the package uses is listed in ``_compat.PRIVATE_NAMES`` (an imported one under the
    module it is imported from).
    """
    listed = {name for _, name in _registered()}
    missing: dict[tuple[str, str | None], list[str]] = {}
    for use in _foreign_uses():
        if use.name in (_compat.PRIVATE_NAMES.get(use.owner, ()) if use.owner is not None else listed):
            continue
        missing.setdefault((use.name, use.owner), []).append(use.where)
    problems = []
    for (name, owner), places in sorted(missing.items()):
        at = ", ".join(places[:4]) + (f" and {len(places) - 4} more" if len(places) > 4 else "")
        if owner is not None:
            todo = f"add it under {owner!r} (it is imported from there)"
        elif owners := _owners_having(name):
            todo = f"add it under its owner: {' or '.join(repr(o) for o in owners)} has it ({VERSIONS})"
        else:
            todo = (
                "add it under its owner; none of torch / torchmetrics' known owners has it: if it is the package's own,"
                " the package must define it (a name nobody defines is a leftover)"
            )
        problems.append(
            f"torchmetrics_varlen uses private name {name} (in {at}) that _compat.PRIVATE_NAMES does not list: {todo}"
        )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("owner", "name"), _registered(), ids=[f"{o}.{n}" for o, n in _registered()])
def test_every_registered_name_exists(owner: str, name: str) -> None:
    """Each listed name exists on its owner in the installed versions (on the class or module, or on a new instance
    for instance attributes); one the package calls or overrides is callable there.
    """
    try:
        found = _resolve(owner)
    except (ImportError, AttributeError) as error:
        pytest.fail(f"_compat.PRIVATE_NAMES lists names of {owner}, which {VERSIONS} does not have ({error!r})")
    if not _has(owner, name):
        if (owner, name) in _compat.MAY_BE_ABSENT:
            pytest.skip(f"{owner}.{name} is absent in {VERSIONS}: {_compat.MAY_BE_ABSENT[owner, name]}")
        instances = (
            f" (if only its instances have {name}, set in __init__, give tests/test_compat.py's INSTANCES a way to"
            f" make one of {owner})"
            if isinstance(found, type) and owner not in INSTANCES
            else ""
        )
        pytest.fail(
            f"torchmetrics_varlen uses {owner}.{name}, which {VERSIONS} does not have: adapt the package to what"
            " replaced it (and _compat.PRIVATE_NAMES), or, if the package handles its absence, list it in"
            f" _compat.MAY_BE_ABSENT saying how{instances}"
        )
    if any(u.name == name and u.called for u in _foreign_uses()):
        value = getattr(found, name) if hasattr(found, name) else getattr(_instance(owner), name)
        assert callable(value), (
            f"{owner}.{name}, which torchmetrics_varlen calls or overrides, is not callable ({VERSIONS})"
        )


def test_every_registered_name_is_used() -> None:
    """No stale entries: every listed name is one the package uses (an imported one, from its listed owner)."""
    named = {u.name for u in _foreign_uses() if u.owner is None}  # owner unknown: under any owner
    imported = {(u.owner, u.name) for u in _foreign_uses() if u.owner is not None}
    stale = [f"{o}.{n}" for o, n in _registered() if n not in named and (o, n) not in imported]
    assert not stale, (
        f"_compat.PRIVATE_NAMES lists {', '.join(stale)}, which torchmetrics_varlen no longer uses: remove it"
    )
    duplicated = [f"{o}.{n}" for o, names in _compat.PRIVATE_NAMES.items() for n in set(names) if names.count(n) > 1]
    assert not duplicated, f"_compat.PRIVATE_NAMES lists {', '.join(duplicated)} twice"
    unlisted = [f"{o}.{n}" for o, n in _compat.MAY_BE_ABSENT if (o, n) not in _registered()]
    assert not unlisted, f"_compat.MAY_BE_ABSENT names {', '.join(unlisted)}, which _compat.PRIVATE_NAMES does not list"


def test_only_compat_reaches_into_torch_distributed_privates() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "_compat.py":
            assert "distributed_c10d._" not in path.read_text(), f"{path.name} calls a private of torch.distributed"
