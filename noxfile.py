"""Developer sessions: ``nox -s tests``, ``nox -s lint``, ``nox -s typecheck``, ``nox -s property``, ``nox -s build``,
``nox -s oldest``, ``nox -s reference``, ``nox -s newest``.

Plain virtualenv + pip on purpose: pip finds the local CPU build of ``torch==2.13.0`` on this project's machines,
uv would download a multi-GB CUDA build.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nox

nox.options.default_venv_backend = "virtualenv"
nox.options.sessions = ["lint", "typecheck", "tests", "docs", "build"]

TORCH = "torch==2.13.0"
# Tests that compare with torchmetrics' own values: they follow the newest torchmetrics (`tests`), whose conventions
# the package matches (float32 outputs, per-batch normalisation, binned curves); older releases differ there.
PARITY = ["tests/test_conformance.py", "tests/test_conformance_distributed.py", "tests/test_task_classes.py"]
PARITY_TESTS = [
    "tests/test_breadth.py::test_multiclass_and_multilabel_curves_match_torchmetrics",
    # its binned-mode reference is torchmetrics' own binned class (1.7.4's PR curve has NaN where 1.9 has 0)
    "tests/test_weight_mode_distributed.py::test_a_rank_of_padding_or_without_update_agrees_on_the_weight_mode",
]
# Tests of the package's own math, the same whatever torchmetrics is installed (and the 70 s demo).
VERSION_FREE = [
    "tests/test_functional.py",
    "tests/test_sort.py",
    "tests/test_histogram.py",
    "tests/test_demo.py",
    "tests/test_exit.py",  # torch/gloo exit behaviour
    "tests/test_weights.py",
    "tests/test_delong.py",
    "tests/test_bootstrap_regression.py",
    "tests/test_layers.py",  # the package's import graph
    "tests/test_teardown.py",  # gloo teardown after a dead or stuck peer
    "tests/test_intake_paths.py",  # the package's own input checks and stored forms
    "tests/test_threads.py",  # the functional core's worker threads (NumPy)
    "tests/test_sweep.py",  # the functional core's curve sweep (NumPy)
    "tests/test_normalization.py",  # the functional core's sigmoid / softmax
    "tests/test_weighted_curves.py",  # the functional core's weighted running sums
    "tests/test_reference_proc.py",  # DeLong against R's pROC (its own session: reference)
    "tests/property/test_normalization_property.py",
    "tests/property/test_weighted_curve_property.py",
]

# The newest torch on this project's machines (a CUDA build that runs on the CPU) with the torchvision built for it:
# the only torch beside which PyPI's torchvision imports here, so the detection tests run in this session alone.
NEWEST = ["torch==2.14.1", "torchvision==0.29.1"]
NEWEST_TESTS = [
    "tests/test_detection.py",  # MeanAveragePrecision (pycocotools) and IntersectionOverUnion, against COCOeval
    "tests/test_wrapper_elements.py",  # sample_ids for list states of one element per sample
    "tests/test_distributed.py",  # the sync
    "tests/test_guard.py",
    "tests/test_wrapper_distributed.py",
    "tests/test_wrapper_guard.py",
    "tests/test_collection_distributed.py",
    "tests/test_compat.py",  # the private names of torch and torchmetrics the package relies on
    "tests/test_integrations.py::test_lightning_ddp_spawn_logs_the_single_device_value",
]


def lower_bounds(*names: str) -> list[str]:
    """``name==X`` for each ``name>=X`` that pyproject.toml declares (dependencies and the test extra).

    Exclusions after the bound (``lightning>=2.4.0,!=2.6.2,!=2.6.3``) are allowed; the bound itself must not be one.
    """
    project = nox.project.load_toml("pyproject.toml")["project"]
    pins = {}
    for requirement in project["dependencies"] + project["optional-dependencies"]["test"]:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)((?:,!=[0-9][0-9.]*)*)", requirement.strip())
        if found and found.group(1) in names:
            assert f"!={found.group(2)}" not in found.group(3).split(","), f"{requirement}: the lower bound is excluded"
            pins[found.group(1)] = f"{found.group(1)}=={found.group(2)}"
    assert set(pins) == set(names), f"no lower bound declared for {set(names) - set(pins)}"
    return [pins[name] for name in names]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (single-process, multi-process and doctests) against a non-editable install."""
    session.install(TORCH)
    session.install(".[test]")
    session.run("pytest", *session.posargs)


@nox.session(default=False)
def oldest(session: nox.Session) -> None:
    """The suite against the oldest torchmetrics and Lightning that pyproject.toml declares (``tests`` runs the
    newest): everything that depends on torchmetrics' internals (the sync, wrappers, collections, Lightning, the
    private names of ``_compat``), without the parity checks against torchmetrics' own values.
    """
    session.install(TORCH)
    session.install(".[test]", *lower_bounds("torchmetrics", "lightning"))
    session.run(
        "python", "-c", "import torchmetrics, lightning; print(torchmetrics.__version__, lightning.__version__)"
    )
    # tests/property: the derandomised short runs of the Hypothesis properties (the package's own logic; the
    # differential check's fixed examples, which go through torchmetrics' internals, are tests/test_differential.py)
    skipped = [f"--ignore={path}" for path in [*PARITY, *VERSION_FREE, "tests/property"]]
    skipped += [f"--deselect={t}" for t in PARITY_TESTS]
    session.run("pytest", "tests", "-p", "no:cacheprovider", *skipped, *session.posargs)


@nox.session(default=False)
def newest(session: nox.Session) -> None:
    """The newest torch (2.14.1) with torchvision 0.29.1 and pycocotools: the detection tests, which the default
    environment skips (its torch 2.13 has no torchvision that imports), and the distributed core of the suite (the
    sync, the guard, the wrapper, collections, Lightning). ``VARLEN_REQUIRE_DETECTION=1`` turns the detection tests'
    skip into a failure: here they must run.
    """
    session.install(*NEWEST)
    session.install("pycocotools", ".[test]")
    session.run(
        "python",
        "-c",
        "import torch, torchvision, torchmetrics, pycocotools, lightning;"
        " print(torch.__version__, torchvision.__version__, torchmetrics.__version__, lightning.__version__)",
    )
    session.run(
        "pytest", *NEWEST_TESTS, "-p", "no:cacheprovider", *session.posargs, env={"VARLEN_REQUIRE_DETECTION": "1"}
    )


@nox.session
def property(session: nox.Session) -> None:
    """Run the property tests, excluded from the default run: Hypothesis, the sync invariant over 200 randomized
    schedules on spawned ranks (``VARLEN_SCHEDULES`` sets the number; about 2 s each on 2 cores), and 300 examples of
    the differential check against one process and scikit-learn (``VARLEN_DIFFERENTIAL``; about 0.2 s each).
    """
    session.install(TORCH)
    session.install(".[test]")
    session.run("pytest", "-m", "property", "tests/property", *session.posargs)


# The outside reference (R's pROC): Debian's packages, without the recommended ones (the whole R toolchain).
R_PACKAGES = ["r-base-core", "r-cran-proc"]


@nox.session(default=False)
def reference(session: nox.Session) -> None:
    """DeLong's interval, variance and paired test against R's pROC (``tests/test_reference_proc.py``), required to
    run: a missing ``Rscript`` or pROC fails here (``VARLEN_REQUIRE_R=1``) where the default run skips.

    Without ``Rscript``, R and pROC are installed from Debian's packages when the session runs as root on a system
    with ``apt-get`` (``apt-get install --no-install-recommends r-base-core r-cran-proc``, a few minutes); elsewhere
    install them first (``sudo apt-get install ...``, or R from CRAN and ``install.packages("pROC")``).
    """
    if shutil.which("Rscript") is None:
        if shutil.which("apt-get") is None or getattr(os, "geteuid", lambda: -1)() != 0:
            packages = " ".join(R_PACKAGES)
            session.error(f"Rscript not found: install R and pROC first (Debian: apt-get install {packages})")
        session.run("apt-get", "update", external=True)
        session.run("apt-get", "install", "-y", "--no-install-recommends", *R_PACKAGES, external=True)
    session.install(TORCH)
    session.install(".[test]")
    session.run("Rscript", "-e", 'cat("pROC", format(packageVersion("pROC")), "\\n")', external=True)
    required = {"VARLEN_REQUIRE_R": "1"}
    session.run("pytest", "-m", "reference", "tests/test_reference_proc.py", *session.posargs, env=required)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff lint and format check."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """Mypy --strict on the package."""
    session.install(TORCH)
    session.install(".[lint]")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Regenerate the figures from code, then build the site offline with warnings as errors."""
    session.install(TORCH)
    session.install(".[test,docs]")
    session.run("python", "docs/make_figures.py")
    session.run("mkdocs", "build", "--strict", "-f", "docs/mkdocs.yml")


@nox.session
def build(session: nox.Session) -> None:
    """The release artifacts: sdist and wheel into ``dist/`` (``python -m build``), then ``twine check --strict``."""
    session.install("build>=1.2", "twine>=6.1")
    dist = Path("dist")
    shutil.rmtree(dist, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(dist))
    session.run("twine", "check", "--strict", *sorted(str(p) for p in dist.iterdir()))


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """The benchmarks (a few minutes on 2 cores): exact single-process path, then the sync on 2 and 4 ranks."""
    session.install(TORCH)
    session.install(".[test]")
    session.run("python", "benchmarks/bench_exact.py", *session.posargs)
    session.run("python", "benchmarks/bench_sync.py")
    session.run("python", "benchmarks/bench_batches.py")
    session.run("python", "benchmarks/bench_uncertainty.py")


@nox.session(default=False, venv_backend="none")
def device(session: nox.Session) -> None:
    """The prepared GPU check (``benchmarks/device_check.py``; a dry run on CPU where there is no CUDA device).

    No virtualenv and no install: it runs ``python`` from the PATH, which must have a CUDA build of PyTorch,
    torchmetrics and scikit-learn (a fresh venv would download PyTorch; GPU machines often have no network). The
    package is imported from this checkout. Arguments after ``--`` go to the script (``--sizes``, ``--out``, ...).
    """
    session.run("python", "benchmarks/device_check.py", *session.posargs, external=True)
