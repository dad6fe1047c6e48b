"""Packaging: the requirements that name Lightning exclude its malicious releases, and nox still reads them."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib", reason="Python >= 3.11 reads TOML; 3.10 runs the other checks")
ROOT = Path(__file__).resolve().parents[1]
# Lightning 2.6.2 and 2.6.3 were a credential-stealing supply-chain attack (advisory GHSA-w37p-236h-pfx3).
MALICIOUS = ("2.6.2", "2.6.3")
LIGHTNING = {"lightning", "pytorch-lightning", "pytorch_lightning"}


def _requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        found += extra
    return found


def test_every_lightning_requirement_excludes_the_malicious_releases() -> None:
    named = [Requirement(r) for r in _requirements() if Requirement(r).name.lower() in LIGHTNING]
    assert named, "pyproject.toml names no lightning requirement: update this test"
    for requirement in named:
        for version in MALICIOUS:
            assert not requirement.specifier.contains(version, prereleases=True), f"{requirement} allows {version}"
        assert requirement.specifier.contains("2.6.1") or requirement.specifier.contains("2.6.4")


def test_noxfile_pins_exclude_the_malicious_releases() -> None:
    text = (ROOT / "noxfile.py").read_text()
    for pin in re.findall(r"""["']((?:pytorch[-_])?lightning[^"']*)["']""", text):
        if any(op in pin for op in ("=", "<", ">")):
            for version in MALICIOUS:
                assert not Requirement(pin).specifier.contains(version, prereleases=True), pin


def test_nox_lower_bounds_parses_the_requirements() -> None:
    nox = pytest.importorskip("nox")
    assert nox
    namespace: dict[str, object] = {}
    source = (ROOT / "noxfile.py").read_text()
    cwd = Path.cwd()
    try:
        os.chdir(ROOT)
        exec(compile(source, "noxfile.py", "exec"), namespace)  # noqa: S102 - the project's own noxfile
        lower_bounds = namespace["lower_bounds"]
        assert callable(lower_bounds)
        assert lower_bounds("torchmetrics", "lightning") == ["torchmetrics==1.7.4", "lightning==2.4.0"]
    finally:
        os.chdir(cwd)
