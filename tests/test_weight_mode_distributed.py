"""The weight mode of an epoch is what the ranks were given (issue 32): a rank whose weighted rows were all sampler
padding, or that made no update at all, agrees with the weighted ranks, in every mode, class and sync path.

Four gloo ranks and a data set of three samples (``n < W``): rank 3's only row is padding (or rank 3 makes no update).
Every rank's value is checked bit for bit against one process and against scikit-learn (torchmetrics' binned
classes for the binned mode) by :func:`_differential.check`.
"""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from _differential import Spec, case_specs, check
from _dist import DistPool
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score

from torchmetrics_varlen import MetricSyncError, VarlenAUROC, VarlenAveragePrecision

pytestmark = pytest.mark.distributed

WORLD = 4
SEED = 143  # three samples: every class (label) present and absent, weights that change the values


def _specs() -> list[Spec]:
    """Every mode and sync path for the binary classes and a collection of them; the multiclass and multilabel
    classes in the 16-bit mode (where the issue was) and sharded; a rank without update in every mode.
    """
    specs = []
    for family, mode in itertools.product(("binary", "collection"), ("exact", "float16", "bfloat16", "binned")):
        paths = ("all", "rank0", "sharded") if mode == "exact" else ("all", "rank0")
        specs += [Spec(WORLD, 3, family, mode, path, weighted=True, seed=SEED) for path in paths]
        specs.append(Spec(WORLD, 3, family, mode, weighted=True, idle=3, seed=SEED))
    for family, (mode, path) in itertools.product(
        ("multiclass", "multilabel"), (("float16", "all"), ("exact", "sharded"))
    ):
        specs.append(Spec(WORLD, 3, family, mode, path, weighted=True, seed=SEED))
    return specs


SPECS = _specs()


def test_a_rank_of_padding_or_without_update_agrees_on_the_weight_mode(pool: DistPool) -> None:
    """AUROC, AP, ROC, PR curve (binary, multiclass, multilabel) and a VarlenCollection of them, exact, 16-bit and
    binned, gathered to all, to rank 0 or sharded: every rank returns the one-process value, scikit-learn's.
    """
    per_rank = pool.values(case_specs, WORLD, SPECS, timeout=300)
    for k, spec in enumerate(SPECS):
        compared = check(spec, [values[k] for values in per_rank])
        names = {"binary": 4, "collection": 4, "multiclass": 2, "multilabel": 2}[spec.family]
        assert len(compared) == names, (spec, compared)  # the outside reference was defined for every metric


def case_issue(rank: int, world: int) -> dict[str, float]:
    """The issue's feed: one weighted row per rank, ``dataset_size=3``, so rank 3's only row is padding."""
    s, y, w = torch.tensor([0.2, 0.7, 0.4, 0.9]), torch.tensor([0, 1, 1, 0]), torch.tensor([1.0, 2.0, 3.0, 4.0])
    out = {}
    for (name, cls), thresholds in itertools.product(
        {"auroc": VarlenAUROC, "ap": VarlenAveragePrecision}.items(), (None, torch.float16, torch.bfloat16)
    ):
        m = cls(thresholds=thresholds, dataset_size=3, sync_timeout=10)
        m.update(s[rank : rank + 1], y[rank : rank + 1], sample_weight=w[rank : rank + 1])
        out[f"{name}-{thresholds}"] = float(m.compute())
    return out


def test_the_issue_case(pool: DistPool) -> None:
    """The issue's reproduction: every rank returns scikit-learn's value (1.0), in the exact and 16-bit modes."""
    s, y, w = [0.2, 0.7, 0.4], [0, 1, 1], [1.0, 2.0, 3.0]
    expected = {"auroc": roc_auc_score(y, s, sample_weight=w), "ap": average_precision_score(y, s, sample_weight=w)}
    for values in pool.values(case_issue, WORLD):
        assert values == {k: pytest.approx(f32(expected[k.split("-")[0]]), abs=1e-6) for k in values}


def case_unweighted_padding(rank: int, world: int, thresholds: object) -> str:
    """Ranks 0-2 give weighted rows, rank 3 a padding-only row *without* ``sample_weight``."""
    s, y, w = torch.tensor([0.2, 0.7, 0.4, 0.9]), torch.tensor([0, 1, 1, 0]), torch.tensor([1.0, 2.0, 3.0, 4.0])
    metric = VarlenAUROC(thresholds=thresholds, dataset_size=3, sync_timeout=10)
    weight = None if rank == 3 else w[rank : rank + 1]
    metric.update(s[rank : rank + 1], y[rank : rank + 1], sample_weight=weight)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            metric.compute()
    except MetricSyncError as err:
        return str(err)
    return ""


@pytest.mark.parametrize("thresholds", [None, torch.float16, 5])
def test_a_padding_only_batch_without_weights_still_disagrees(pool: DistPool, thresholds: object) -> None:
    """What a rank was given decides, not what survived: a padding-only batch without ``sample_weight`` is an
    unweighted rank among weighted ones, refused on every rank with each rank's mode.
    """
    for message in pool.values(case_unweighted_padding, WORLD, thresholds):
        assert "the ranks disagree on `weights`" in message
        assert "rank 0: weights" in message
        assert "rank 3: none" in message
