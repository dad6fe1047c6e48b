"""Explicit examples of the differential property (``tests/property/test_differential_property.py``): W gloo ranks
fed through a real ``DistributedSampler`` return, bit for bit, the one-process value, which is scikit-learn's (or
torchmetrics' binned class's); see ``tests/_differential.py``. One case per world size runs all of its examples.
"""

from __future__ import annotations

import pytest
from _differential import Spec, case_specs, check
from _dist import DistPool

pytestmark = pytest.mark.distributed

EXAMPLES = [
    # issue 32: 3 samples on 4 ranks, rank 3's only (weighted) row is padding; 16-bit modes said "no weights"
    Spec(4, 3, "binary", "float16", weighted=True, seed=143),
    Spec(4, 3, "binary", "bfloat16", "rank0", weighted=True, seed=143),
    Spec(4, 257, "multilabel", "bfloat16", weighted=True, batch=64, shuffle=True, drop_last=True, seed=5),
    Spec(4, 5, "wrapper", "exact", dedup="sample_ids", batch=2, shuffle=True, idle=2, seed=6),
    Spec(3, 2, "multiclass", "float16", "rank0", weighted=True, shuffle=True, seed=7),
    Spec(3, 301, "binary", "exact", "sharded", "sample_ids", weighted=True, batch=7, shuffle=True, seed=8),
    Spec(3, 7, "collection", "exact", "sharded", "sample_ids", weighted=True, batch=3, idle=0, seed=9),
    Spec(2, 1, "collection", "binned", "rank0", weighted=True, seed=10, bins=5),
    Spec(2, 33, "wrapper", "binned", batch=5, idle=1, seed=11, bins=100),
    Spec(2, 499, "multiclass", "exact", weighted=True, batch=1000, drop_last=True, seed=12),
]


@pytest.mark.parametrize("world", sorted({spec.world for spec in EXAMPLES}))
def test_explicit_examples(pool: DistPool, world: int) -> None:
    specs = [spec for spec in EXAMPLES if spec.world == world]
    per_rank = pool.values(case_specs, world, specs, timeout=300)
    for k, spec in enumerate(specs):
        check(spec, [values[k] for values in per_rank])
