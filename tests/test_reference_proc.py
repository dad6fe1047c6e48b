"""An outside reference: R's pROC (1.18) computes DeLong's interval, variance and paired test of every data set here.

``auroc_interval`` / ``VarlenAUROCInterval`` against ``ci.auc(method="delong")`` and ``var(method="delong")``,
``auroc_compare`` / ``VarlenAUROCComparison`` against ``roc.test(paired=TRUE, method="delong")``, with pROC's
``levels=c(0, 1)`` and ``direction="<"`` fixed, on generated data sets: continuous scores, heavy ties, 1:50
imbalance, perfect and reversed separation, all scores tied, a single case or control, correlated, identical and
independent paired models. Every data set goes to R in one CSV (hexadecimal floats, exact both ways) and one
``Rscript`` call computes everything (``tests/reference_proc.R``).

Without ``Rscript`` (or pROC) the module is skipped with a message saying how to install them; with
``VARLEN_REQUIRE_R=1`` (``nox -s reference``, CI) their absence fails instead. Debian / Ubuntu:
``apt-get install --no-install-recommends r-base-core r-cran-proc``.

Two documented differences: the package's value is the float32 AUROC (pROC's is float64), and its interval is
``value -/+ z * std`` not clipped to [0, 1], where pROC's ``ci.auc`` clips (``ci.auc.delong``: ``ci[ci > 1] <- 1``).
So interval ends are compared as offsets from each one's own value, and a clipped end of pROC's as the clip of ours.
"""

from __future__ import annotations

import csv
import math
import os
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from _data import rank_slice
from _dist import DistPool
from _float32 import f32

from torchmetrics_varlen import VarlenAUROCComparison, VarlenAUROCInterval
from torchmetrics_varlen.functional import AUROCComparison, AUROCInterval, auroc_compare, auroc_interval

pytestmark = pytest.mark.reference

TOL = 1e-12
SCRIPT = Path(__file__).with_name("reference_proc.R")
INSTALL = "apt-get install --no-install-recommends r-base-core r-cran-proc"
Case = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _labels(pos: int, neg: int, seed: int) -> torch.Tensor:
    target = torch.cat([torch.ones(pos, dtype=torch.int64), torch.zeros(neg, dtype=torch.int64)])
    return target[torch.randperm(pos + neg, generator=_gen(seed))]


def _scores(target: torch.Tensor, shift: float, seed: int, levels: int | None = None) -> torch.Tensor:
    """Normal scores, the positives ``shift`` higher; rounded to ``levels`` steps per unit for ties."""
    scores = torch.randn(target.numel(), generator=_gen(seed), dtype=torch.float64) + shift * target
    return scores if levels is None else torch.round(scores * levels) / levels


def _paired(target: torch.Tensor, a: torch.Tensor, rho: float, seed: int, levels: int | None = None) -> torch.Tensor:
    """Model b: ``rho`` of model a's score plus fresh noise and signal (correlated with a for ``rho`` > 0)."""
    noise = torch.randn(target.numel(), generator=_gen(seed), dtype=torch.float64)
    b = rho * a + math.sqrt(max(0.0, 1 - rho**2)) * noise + 0.8 * target
    return b if levels is None else torch.round(b * levels) / levels


def _cases() -> dict[str, Case]:
    """Every data set: ``(target, scores of model a, scores of model b or None)``."""
    cases: dict[str, Case] = {}
    doc = torch.tensor([1, 1, 0, 0])
    cases["doc example"] = (doc, torch.tensor([0.9, 0.5, 0.5, 0.1], dtype=torch.float64), None)
    t = _labels(150, 150, 1)
    cases["continuous"] = (t, _scores(t, 1.0, 2), None)
    t = _labels(250, 250, 3)
    cases["ties, 6 levels"] = (t, _scores(t, 0.8, 4, levels=2), None)
    t = _labels(700, 1300, 5)
    cases["heavy ties, 3 values"] = (t, torch.clamp(_scores(t, 0.5, 6, levels=1), -1, 1), None)
    t = _labels(30, 1500, 7)
    cases["imbalance 1:50"] = (t, _scores(t, 1.2, 8), None)
    t = _labels(20, 1000, 9)
    cases["imbalance 1:50, ties"] = (t, _scores(t, 1.0, 10, levels=3), None)
    t = _labels(8, 400, 11)
    cases["imbalance 1:50, near 1"] = (t, _scores(t, 3.0, 12), None)
    t = _labels(40, 60, 13)
    cases["perfect separation"] = (t, t * 10.0 + _scores(t, 0.0, 14).clamp(-3, 3), None)
    cases["reversed separation"] = (t, -(t * 10.0) + _scores(t, 0.0, 15).clamp(-3, 3), None)
    cases["all tied"] = (t, torch.full((100,), 0.25, dtype=torch.float64), None)
    t = _labels(1, 50, 16)
    cases["one case"] = (t, _scores(t, 1.0, 17), None)
    t = _labels(50, 1, 18)
    cases["one control"] = (t, _scores(t, 1.0, 19), None)
    cases["two of each"] = (torch.tensor([0, 1, 0, 1]), torch.tensor([0.2, 0.4, 0.6, 0.8], dtype=torch.float64), None)
    t = _labels(300, 300, 20)
    cases["float32 scores"] = (t, _scores(t, 0.3, 21).float().double() * 1e-3, None)

    cases["paired: doc example"] = (doc, cases["doc example"][1], torch.tensor([0.9, 0.6, 0.5, 0.1]).double())
    t = _labels(200, 200, 22)
    a = _scores(t, 1.0, 23)
    cases["paired: correlated"] = (t, a, _paired(t, a, 0.8, 24))
    cases["paired: independent"] = (t, a, _paired(t, a, 0.0, 25))
    cases["paired: anti-correlated"] = (t, a, _paired(t, a, -0.6, 26))
    cases["paired: identical"] = (t, a, a.clone())
    cases["paired: a and its reverse"] = (t, a, -a)
    t = _labels(300, 300, 27)
    a = _scores(t, 0.7, 28, levels=2)
    cases["paired: correlated, ties"] = (t, a, _paired(t, a, 0.7, 29, levels=2))
    t = _labels(25, 1250, 30)
    a = _scores(t, 1.0, 31)
    cases["paired: imbalance 1:50"] = (t, a, _paired(t, a, 0.9, 32))
    t = _labels(40, 60, 33)
    perfect = t * 10.0 + _scores(t, 0.0, 34).clamp(-3, 3)
    cases["paired: two perfect models"] = (t, perfect, perfect * 0.5 + 1.0)
    cases["paired: perfect and not"] = (t, perfect, _scores(t, 1.0, 35))
    t = _labels(1, 40, 36)
    cases["paired: one case"] = (t, _scores(t, 1.0, 37), _scores(t, 1.0, 38))
    return cases


CASES = _cases()


def _hex(value: float) -> str:
    return float(value).hex()


def _parse(text: str) -> float:
    special = {"NA": math.nan, "NaN": math.nan, "Inf": math.inf, "-Inf": -math.inf}
    return special[text] if text in special else float.fromhex(text)


def _missing(reason: str) -> None:
    msg = f"pROC reference: {reason}. Install R and pROC (Debian / Ubuntu: `{INSTALL}`) to run these tests."
    if os.environ.get("VARLEN_REQUIRE_R") == "1":
        pytest.fail(f"{msg} VARLEN_REQUIRE_R=1 (`nox -s reference`, CI): they must run here.", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def proc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, float]]:
    """The results of pROC for every case: ``{case: {key: value}}`` (one ``Rscript`` call for the module)."""
    rscript = shutil.which("Rscript")
    if rscript is None:
        _missing("`Rscript` is not on the PATH")
    folder = tmp_path_factory.mktemp("proc")
    data, out = folder / "data.csv", folder / "out.csv"
    with data.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["case", "paired", "label", "a", "b"])
        for name, (target, a, b) in CASES.items():
            other = a if b is None else b
            for label, x, y in zip(target.tolist(), a.tolist(), other.tolist(), strict=True):
                writer.writerow([name, int(b is not None), label, _hex(x), _hex(y)])
    done = subprocess.run(
        [str(rscript), str(SCRIPT), str(data), str(out)], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        missing = [line for line in done.stderr.splitlines() if "there is no package called" in line]
        if missing:
            _missing(f"R has no pROC package ({missing[0].strip()})")
        pytest.fail(f"Rscript {SCRIPT.name} failed ({done.returncode}):\n{done.stderr}", pytrace=False)
    results: dict[str, dict[str, float]] = {}
    with out.open(newline="") as f:
        for row in csv.DictReader(f):
            results.setdefault(row["case"], {})[row["key"]] = _parse(row["value"])
    assert set(results) == set(CASES)
    return results


def _same(got: float, want: float, tol: float = TOL) -> bool:
    """Equal within ``tol``, NaN (R's NA) only with NaN, infinities exactly."""
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got):
        return got == want
    return abs(got - want) <= tol


def check_interval(name: str, iv: AUROCInterval, ref: dict[str, float], model: str = "a") -> None:
    """Our interval against pROC's: the float32 AUROC, the variance, and the ends as offsets from each one's value
    (pROC's clipped ends against the clip of ours).
    """
    value, lower, upper, std = (float(x) for x in iv)
    auc, var = ref[f"auc_{model}"], ref[f"var_{model}"]
    assert value == f32(auc), (name, value, auc)
    assert _same(std * std if not math.isnan(std) else std, var), (name, std * std, var)
    assert _same(std, math.sqrt(var) if not math.isnan(var) else var), (name, std, var)
    for ours, theirs in ((lower, ref[f"lower_{model}"]), (upper, ref[f"upper_{model}"])):
        if math.isnan(theirs):  # pROC: NA with a single case or control
            assert math.isnan(ours), (name, ours)
        elif theirs in (0.0, 1.0) and not _same(ours - value, theirs - auc):  # pROC clipped there; the package not
            assert min(max(ours, 0.0), 1.0) == theirs, (name, ours, theirs)
        else:
            assert _same(ours - value, theirs - auc), (name, ours - value, theirs - auc)


def check_comparison(name: str, result: AUROCComparison, ref: dict[str, float]) -> None:
    """Our paired test against pROC's ``roc.test``: both AUROCs, the difference, z, p and the interval."""
    auroc_a, auroc_b, difference, lower, upper, z, p = (float(x) for x in result)
    assert auroc_a == f32(ref["auc_a"]), (name, auroc_a, ref["auc_a"])
    assert auroc_b == f32(ref["auc_b"]), (name, auroc_b, ref["auc_b"])
    assert _same(difference, ref["auc_a"] - ref["auc_b"]), (name, difference)
    assert _same(z, ref["z"], TOL * max(1.0, abs(z))), (name, z, ref["z"])
    assert _same(p, ref["p_value"]), (name, p, ref["p_value"])
    assert _same(lower, ref["diff_lower"]), (name, lower, ref["diff_lower"])
    assert _same(upper, ref["diff_upper"]), (name, upper, ref["diff_upper"])


def _quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one class only: auroc's warnings
        return fn(*args, **kwargs)


@pytest.mark.parametrize("name", list(CASES))
def test_functional_equals_proc(proc: dict[str, dict[str, float]], name: str) -> None:
    target, a, b = CASES[name]
    check_interval(name, auroc_interval(a, target, normalization=None), proc[name])
    if b is not None:
        check_interval(name, auroc_interval(b, target, normalization=None), proc[name], "b")
        check_comparison(name, auroc_compare(a, b, target, normalization=None), proc[name])


@pytest.mark.parametrize("name", list(CASES))
def test_classes_in_batches_equal_proc(proc: dict[str, dict[str, float]], name: str) -> None:
    """The classes, fed in uneven batches: the functional values bit for bit, so pROC's."""
    target, a, b = CASES[name]
    interval = VarlenAUROCInterval(normalization=None)
    comparison = VarlenAUROCComparison(normalization=None)
    cuts = [0, *sorted({(len(target) * k) // 7 for k in (1, 2, 5)}), len(target)]
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        interval.update(a[lo:hi], target[lo:hi])
        if b is not None:
            comparison.update(torch.stack([a[lo:hi], b[lo:hi]], 1), target[lo:hi])
    got = _quiet(interval.compute)
    check_interval(name, got, proc[name])
    want = _quiet(auroc_interval, a, target, normalization=None)
    assert all(torch.equal(x, y) or (x.isnan().all() and y.isnan().all()) for x, y in zip(got, want, strict=True))
    if b is not None:
        check_comparison(name, _quiet(comparison.compute), proc[name])


def case_proc_classes(rank: int, world: int) -> dict[str, list[float]]:
    """Each rank's uneven share of every data set; both classes, on the gather-to-all path for every other data set
    and ``compute_on_rank`` for the others.
    """
    out: dict[str, list[float]] = {}
    for i, (name, (target, a, b)) in enumerate(CASES.items()):
        part = rank_slice(len(target), world, rank, "uneven")
        path, kwargs = ("all", {}) if i % 2 == 0 else ("on_rank", {"compute_on_rank": 1})
        interval = VarlenAUROCInterval(normalization=None, sync_timeout=20, **kwargs)
        interval.update(a[part], target[part])
        out[f"{name}|interval|{path}"] = [float(x) for x in _quiet(interval.compute)]
        if b is not None:
            comparison = VarlenAUROCComparison(normalization=None, sync_timeout=20, **kwargs)
            comparison.update(torch.stack([a[part], b[part]], 1), target[part])
            out[f"{name}|compare|{path}"] = [float(x) for x in _quiet(comparison.compute)]
    return out


@pytest.mark.distributed
def test_classes_on_three_ranks_equal_proc(proc: dict[str, dict[str, float]], pool: DistPool) -> None:
    """Three spawned ranks, uneven shares: every rank gets pROC's values on both sync paths."""
    for out in pool.values(case_proc_classes, 3, timeout=240):
        for key, values in out.items():
            name, kind, _ = key.split("|")
            tensors = [torch.tensor(v, dtype=torch.float32 if i == 0 else torch.float64) for i, v in enumerate(values)]
            if kind == "interval":
                check_interval(key, AUROCInterval(*tensors), proc[name])
            else:
                tensors[1] = tensors[1].float()
                check_comparison(key, AUROCComparison(*tensors), proc[name])


def test_proc_clips_the_interval_and_the_package_does_not(proc: dict[str, dict[str, float]]) -> None:
    """The ``ci.auc`` of pROC clips to [0, 1] (pROC 1.18's ``ci.auc.delong``); the package's interval is not clipped
    (docs/pages/uncertainty.md): near 1 with few cases its upper end is above 1 where pROC's is 1.
    """
    name = "imbalance 1:50, near 1"
    target, a, _ = CASES[name]
    iv = auroc_interval(a, target, normalization=None)
    assert proc[name]["upper_a"] == 1.0
    assert float(iv.upper) > 1.0
    assert float(iv.upper) - float(iv.value) == pytest.approx(1.96 * math.sqrt(proc[name]["var_a"]), rel=1e-3)
