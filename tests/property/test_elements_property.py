"""Hypothesis: images of any number of boxes (none included), each fed any number of times, the copies scored
differently, in any order, any batching, through ``update`` and ``forward``, with batches of no image between: a
Varlen with ``sample_ids`` holds, bit for bit, the states of one process fed each image once (its lowest-scored copy),
in id order. The sync only concatenates the ranks' states, in rank order: this is that order, and W, left to chance.
"""

from __future__ import annotations

import pytest
import torch
from _per_image import PerImage, batch, reference, same
from hypothesis import given, settings
from hypothesis import strategies as st

from torchmetrics_varlen import Varlen

pytestmark = pytest.mark.property
SETTINGS = settings(max_examples=200, deadline=None)


@st.composite
def feeds(draw: st.DrawFn) -> tuple[int, list[tuple[list[int], list[int], bool]]]:
    """``n`` images; batches of (image ids, noise per image, through forward), every image at least once."""
    n = draw(st.integers(1, 12))
    copies = [(i, noise) for i in range(n) for noise in draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))]
    order = draw(st.permutations(copies))
    batches: list[tuple[list[int], list[int], bool]] = []
    at = 0
    while at < len(order):
        if draw(st.booleans()):
            batches.append(([], [], False))  # a batch of no image
        size = draw(st.integers(1, 4))
        part = order[at : at + size]
        batches.append(([i for i, _ in part], [noise for _, noise in part], draw(st.booleans())))
        at += size
    return n, batches


@SETTINGS
@given(feeds())
def test_any_copies_in_any_order_give_the_one_process_states(
    feed: tuple[int, list[tuple[list[int], list[int], bool]]],
) -> None:
    n, batches = feed
    metric = Varlen(PerImage(), dataset_size=n)
    lowest: dict[int, int] = {}
    for ids, noise, forward in batches:
        preds, target = batch(ids, noise)
        call = metric if forward and ids else metric.update
        call(preds, target, sample_ids=torch.tensor(ids, dtype=torch.int64))
        for i, level in zip(ids, noise, strict=True):
            lowest[i] = min(lowest.get(i, level), level)
    expected = PerImage()
    expected.update(*batch(sorted(lowest), [lowest[i] for i in sorted(lowest)]))
    assert same(metric.compute(), expected.compute())
    assert metric.sync_report is not None
    assert metric.sync_report.kept == n
    if not any(lowest.values()):
        assert same(metric.compute(), reference(list(range(n))))
