"""Hypothesis: any split of a data set over W sampler shards, padding included, dedups back to the data set."""

from __future__ import annotations

import pytest
import torch
from _dedup_contract import contract_keep
from hypothesis import given, settings
from hypothesis import strategies as st

from torchmetrics_varlen._core.dedup import dedup_by_id
from torchmetrics_varlen._core.padding import sampler_kept_rows

pytestmark = pytest.mark.property
SETTINGS = settings(max_examples=300, deadline=None)


def _sampler_shards(n: int, world: int, perm: list[int]) -> list[list[int]]:
    """DistributedSampler(drop_last=False): pad the (shuffled) index list with its head, deal position j*W + r."""
    total = -(-n // world) * world
    padded = (perm * (total // max(n, 1) + 1))[:total]
    return [padded[r::world] for r in range(world)]


@SETTINGS
@given(
    n=st.integers(1, 60),
    world=st.integers(1, 8),
    seed=st.integers(0, 2**16),
    batches=st.lists(st.integers(1, 9), min_size=1, max_size=20),
)
def test_sampler_rule_keeps_every_sample_exactly_once(n: int, world: int, seed: int, batches: list[int]) -> None:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    kept: list[int] = []
    for rank, shard in enumerate(_sampler_shards(n, world, perm)):
        start = 0
        sizes = iter(batches * (len(shard) + 1))
        while start < len(shard):
            rows = min(next(sizes), len(shard) - start)
            kept += shard[start : start + sampler_kept_rows(start, rows, rank, world, n)]
            start += rows
    assert sorted(kept) == list(range(n))


@SETTINGS
@given(
    n=st.integers(0, 60),
    world=st.integers(1, 8),
    seed=st.integers(0, 2**16),
    rank_order_seed=st.integers(0, 2**16),
)
def test_id_dedup_of_padded_shards_in_any_rank_order_recovers_the_data(
    n: int, world: int, seed: int, rank_order_seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 2, (max(n, 1),), generator=gen)[:n]
    perm = torch.randperm(n, generator=gen).tolist()
    shards = _sampler_shards(n, world, perm) if n else [[] for _ in range(world)]
    order = torch.randperm(world, generator=torch.Generator().manual_seed(rank_order_seed)).tolist()
    ids = torch.tensor([i for r in order for i in shards[r]], dtype=torch.int64)
    keep = dedup_by_id(ids, torch.zeros_like(ids, dtype=torch.int32), target[ids])
    assert ids[keep].tolist() == list(range(n))
    assert torch.equal(target[ids][keep], target)


@SETTINGS
@given(ids=st.lists(st.integers(0, 20), min_size=2, max_size=40), flip=st.integers(0, 39))
def test_id_dedup_rejects_a_conflicting_copy(ids: list[int], flip: int) -> None:
    labels = {i: i % 2 for i in ids}
    target = torch.tensor([labels[i] for i in ids])
    dup_positions = [k for k, i in enumerate(ids) if ids.index(i) != k]
    if not dup_positions:
        return
    k = dup_positions[flip % len(dup_positions)]
    target[k] = 1 - target[k]
    with pytest.raises(ValueError, match=f"Sample id {ids[k]} was seen twice with different targets"):
        dedup_by_id(torch.tensor(ids), torch.zeros(len(ids), dtype=torch.int32), target)


@st.composite
def _id_layouts(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """Ids as they reach the dedup: W ranks' runs (ascending, or shuffled), padding repeated, the same data fed
    twice, sparse or huge ids; with one or several elements per sample (``sub``).
    """
    n = draw(st.integers(1, 300))
    world = draw(st.integers(1, 9))
    base = draw(st.sampled_from([0, 7, 10**12, 2**61]))
    stride = draw(st.sampled_from([1, 1, 3, 10**6]))
    seed = draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=gen).tolist() if draw(st.booleans()) else list(range(n))
    shards = _sampler_shards(n, world, perm)
    if draw(st.booleans()):
        shards = [sorted(s) for s in shards]  # each rank's epoch in id order
    ids = [base + stride * i for r in torch.randperm(world, generator=gen).tolist() for i in shards[r]]
    if draw(st.booleans()):  # the same samples evaluated again
        ids += ids[: draw(st.integers(0, len(ids)))]
    width = draw(st.integers(1, 3))
    return [i for i in ids for _ in range(width)], [j for _ in ids for j in range(width)]


@SETTINGS
@given(layout=_id_layouts(), seed=st.integers(0, 2**16))
def test_id_dedup_keeps_what_the_contract_names_for_any_id_layout(
    layout: tuple[list[int], list[int]], seed: int
) -> None:
    """Whatever the ids look like (and so whichever way their order is found), the kept rows and their order are
    the contract's: the smallest copy of each (id, element), ordered by key.
    """
    from torchmetrics_varlen._core.dedup import dedup_order

    ids, sub = layout
    gen = torch.Generator().manual_seed(seed)
    scores = (torch.randint(-1, 2, (len(ids),), generator=gen).double() * 0.5).tolist()
    scores = [-0.0 if s == 0 and k % 3 == 0 else s for k, s in enumerate(scores)]
    target = torch.tensor([(i + j) % 2 for i, j in zip(ids, sub, strict=True)]).reshape(-1, 1)
    args = (torch.tensor(ids), torch.tensor(sub, dtype=torch.int32), target, torch.tensor(scores).reshape(-1, 1))
    expected = contract_keep(ids, sub, [[v] for v in scores])
    assert dedup_by_id(*args).tolist() == expected
    order = dedup_order(*args)
    if order is None:
        assert expected == list(range(len(ids)))
    else:
        assert order.tolist() == expected
