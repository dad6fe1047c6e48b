"""Recovery after a rank left an epoch without its computes (issue 36, item 6).

Three gloo ranks evaluate two or three metrics with ``dataset_size`` over a padded ``DistributedSampler``. In epoch 0
rank 1 raises inside its update loop; the user's ``except`` skips its computes and ``reset()`` starts the next epoch
on that rank at once (no collective between epochs: rank 1 runs ahead into epoch 1's first compute). The other ranks
get a ``MetricSyncError`` for every metric of epoch 0, each at once (rank 1 reset the metric: its epoch-0 sync can
never complete), not after ``sync_timeout`` per metric; and epochs 1 and 2, in which every rank computes every
metric, are exact on every rank. Before the fix the second metric's epoch-0 error took the whole ``sync_timeout``,
during which rank 1 waited at epoch 1's first sync for as long, so that epoch 1's first metric failed on every rank.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from _dist import DistPool
from _sampler import reference, sampler_indices

from torchmetrics_varlen import MetricSyncError, VarlenAUROC, VarlenAveragePrecision, VarlenCollection

pytestmark = pytest.mark.distributed

N = 301  # not a multiple of 3: the sampler pads, and dataset_size removes the padding
BATCH = 16
TIMEOUT = 20.0  # sync_timeout: the epoch-0 errors must come well before it
EPOCHS = 3
FAULTY = 1


def _data(epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + epoch)
    target = torch.randint(0, 2, (N,), generator=gen)
    preds = (torch.randint(0, 50, (N,), generator=gen) / 50 * 0.7 + 0.3 * target).float()
    return preds, target


def _metrics(count: int) -> list[tuple[str, Any]]:
    if count == 0:  # a collection (one joint sync) and a metric
        members = {"auroc": VarlenAUROC(), "ap": VarlenAveragePrecision()}
        return [
            ("collection", VarlenCollection(members, dataset_size=N, sync_timeout=TIMEOUT)),
            ("auroc", VarlenAUROC(dataset_size=N, sync_timeout=TIMEOUT)),
        ]
    made = [
        ("auroc", VarlenAUROC(dataset_size=N, sync_timeout=TIMEOUT)),
        ("ap", VarlenAveragePrecision(dataset_size=N, sync_timeout=TIMEOUT)),
        ("auroc", VarlenAUROC(dataset_size=N, sync_timeout=TIMEOUT)),  # the same class and arguments as the first
    ]
    return made[:count]


def case_raise_in_loop(rank: int, world: int, count: int) -> list[dict[str, Any]]:
    metrics = _metrics(count)
    mine = sampler_indices(N, world, rank, shuffle=False, drop_last=False)
    epochs = []
    for epoch in range(EPOCHS):
        preds, target = _data(epoch)
        record: dict[str, Any] = {"values": [], "errors": []}
        started = time.monotonic()
        try:
            for b, lo in enumerate(range(0, len(mine), BATCH)):
                if epoch == 0 and rank == FAULTY and b == 2:
                    msg = "a data loader error inside the update loop"
                    raise RuntimeError(msg)
                rows = torch.tensor(mine[lo : lo + BATCH])
                for _, metric in metrics:
                    metric.update(preds[rows], target[rows])
            for _, metric in metrics:
                try:
                    value = metric.compute()
                    values = value.values() if isinstance(value, dict) else [value]
                    record["values"] += [float(v) for v in values]
                except MetricSyncError as err:
                    record["errors"].append(str(err))
        except RuntimeError:
            record["raised"] = True
        finally:
            record["seconds"] = time.monotonic() - started
            for _, metric in metrics:
                metric.reset()
        epochs.append(record)
    return epochs


@pytest.mark.parametrize("count", [2, 3, 0], ids=["two", "three", "collection_and_metric"])
def test_next_epoch_exact_after_a_rank_raised_in_its_loop(pool: DistPool, count: int) -> None:
    world = 3
    results = pool.values(case_raise_in_loop, world, count, timeout=2 * max(count, 2) * TIMEOUT + 60)
    names = [n for name, _ in _metrics(count) for n in (["ap", "auroc"] if name == "collection" else [name])]
    count = len(_metrics(count))
    for rank, epochs in enumerate(results):
        first = epochs[0]
        if rank == FAULTY:
            assert first.get("raised"), first
        else:
            assert not first["values"], first
            assert len(first["errors"]) == count, first
            # rank 1 reset every metric: no sync of epoch 0 can complete, and every rank waiting there knows at once
            assert first["seconds"] < TIMEOUT / 2, first
            for text in first["errors"]:
                assert f"rank {FAULTY}" in text, text
                assert "reset" in text, text
        for epoch in range(1, EPOCHS):
            record = epochs[epoch]
            assert not record["errors"], (rank, epoch, record)
            preds, target = _data(epoch)
            expected = [reference(name, preds.double(), target) for name in names]
            assert record["values"] == pytest.approx(expected, abs=1e-6), (rank, epoch)
