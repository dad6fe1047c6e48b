"""Hypothesis: W spawned gloo ranks fed through a real ``DistributedSampler`` give, on every rank, bit for bit what
the same classes give in one process fed the evaluated samples, and that is scikit-learn's value (torchmetrics' own
binned classes in the binned mode); see ``tests/_differential.py``.

Drawn: W in 2-4; data set sizes 1, W - 1, odd, a few hundred; shuffle and ``drop_last``; batch sizes 1-1,000; dedup
by ``dataset_size`` or by the sampler's indices as ``sample_ids``; gather to all, ``compute_on_rank=0`` or
``compute_sharded=True``; exact, float16, bfloat16 or binned (``thresholds=int``); with or without weights;
AUROC / AP / ROC / PR (binary), multiclass and multilabel AUROC / AP, a ``VarlenCollection`` of them with a wrapped
``BinaryAccuracy``, and ``Varlen`` around ``BinaryAccuracy`` and ``BinaryAUROC`` (cat states, or one summed state in
the binned mode); sometimes a rank that makes no update at all. ``VARLEN_DIFFERENTIAL`` sets the number of examples
(default 300; each is one case on the spawned pool, about 0.2 s on 2 cores: 300 take about a minute).
"""

from __future__ import annotations

import os

import pytest
from _differential import FAMILIES, MODES, Spec, case_specs, check
from _dist import DistPool
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.property, pytest.mark.distributed]

COUNT = int(os.environ.get("VARLEN_DIFFERENTIAL", "300"))
SETTINGS = settings(max_examples=COUNT, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    """A valid :class:`Spec`: ids only in the exact mode, sharded only exact, the wrapper family without weights."""
    world = draw(st.integers(2, 4))
    size = draw(st.sampled_from(("one", "world - 1", "odd", "large")))
    n = {"one": 1, "world - 1": world - 1}.get(size) or (
        draw(st.integers(1, 49)) * 2 + 1 if size == "odd" else draw(st.integers(200, 600))
    )
    family = draw(st.sampled_from(FAMILIES))
    mode = draw(st.sampled_from(("exact", "binned") if family == "wrapper" else MODES))
    dedup = draw(st.sampled_from(("dataset_size", "sample_ids"))) if mode == "exact" else "dataset_size"
    paths = ("all",) if family == "wrapper" else ("all", "rank0", "sharded") if mode == "exact" else ("all", "rank0")
    return Spec(
        world=world,
        n=n,
        family=family,
        mode=mode,
        path=draw(st.sampled_from(paths)),
        dedup=dedup,
        weighted=family != "wrapper" and draw(st.booleans()),
        batch=draw(st.one_of(st.integers(1, 8), st.integers(1, 1000))),
        shuffle=draw(st.booleans()),
        drop_last=draw(st.booleans()),
        idle=draw(st.sampled_from((None,) * (3 * world) + tuple(range(world)))),  # a quarter of the examples
        seed=draw(st.integers(0, 2**16)),
        bins=draw(st.sampled_from((5, 11, 100))),
    )


@SETTINGS
@given(spec=specs())
@example(spec=Spec(4, 3, "binary", "float16", weighted=True, seed=143))  # issue 32: rank 3's only row is padding
@example(spec=Spec(2, 3, "binary", "float16", batch=1, seed=792))  # every score tied: one PR threshold, 0-d
def test_every_rank_equals_one_process_and_the_reference(pool: DistPool, spec: Spec) -> None:
    per_rank = pool.values(case_specs, spec.world, [spec], timeout=120)
    check(spec, [values[0] for values in per_rank])
