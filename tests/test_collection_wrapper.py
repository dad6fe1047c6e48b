"""VarlenCollection: AUROC + AP + F1 + Accuracy + RetrievalMAP in one check-in and one exchange; Varlen inside
MetricCollection compute groups, ClasswiseWrapper and MetricTracker, on spawned gloo ranks.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _data import rank_slice
from _dist import DistPool, count_syncs
from _float32 import f32
from _sampler import sampler_indices
from _wrapped import BY_NAME, N, call_args, columns, flat, reference
from sklearn.metrics import accuracy_score, average_precision_score, f1_score, recall_score, roc_auc_score
from torchmetrics import MetricCollection
from torchmetrics.classification import BinaryAccuracy, BinaryF1Score, MulticlassAccuracy
from torchmetrics.retrieval import RetrievalMAP
from torchmetrics.wrappers import ClasswiseWrapper, MetricTracker

from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenAveragePrecision, VarlenCollection

pytestmark = pytest.mark.distributed

MAP = BY_NAME["RetrievalMAP"]


def case_one_exchange(rank: int, world: int, shard: str) -> dict[str, Any]:
    metrics = VarlenCollection(
        {
            "auroc": VarlenAUROC(),
            "ap": VarlenAveragePrecision(),
            "f1": BinaryF1Score(),
            "acc": BinaryAccuracy(),
            "map": RetrievalMAP(),
        },
        dataset_size=N if shard == "sampler" else None,
    )
    idx = (
        sampler_indices(N, world, rank, True, False)
        if shard == "sampler"
        else list(range(N))[rank_slice(N, world, rank, shard)]
    )
    data = columns()
    for start in range(0, len(idx), 4):
        args, kwargs = call_args(MAP, data, idx[start : start + 4])
        metrics.update(*args, **kwargs)
    values, counts = count_syncs(metrics.compute)
    cached, again = count_syncs(metrics.compute)  # every value cached: no sync, as torchmetrics
    return {
        "values": {k: flat(v) for k, v in values.items()},
        "counts": counts,
        "cached": again,
        "same": all(flat(cached[k]) == flat(values[k]) for k in values),
        "groups": sorted(sorted(g) for g in metrics.compute_groups.values()),
        "had_data": bool(idx),
    }


@pytest.mark.parametrize(("world", "shard"), [(2, "sampler"), (3, "sampler"), (4, "one_rank")])
def test_a_collection_syncs_in_one_check_in_and_one_exchange(pool: DistPool, world: int, shard: str) -> None:
    """One check-in and its metadata all-gather, then one broadcast per rank (gloo; every rank holds rows: the
    counters of F1 and accuracy) for all five metrics, even where only one rank has data and so the ranks' compute
    groups differ; torchmetrics would gather every state of every metric (RetrievalMAP's batch by batch).
    """
    data = columns()
    probs, binary = data["probs"].float(), data["binary"]
    expected = {
        "acc": [accuracy_score(binary, probs > 0.5)],
        "ap": [f32(average_precision_score(binary, probs.double()))],
        "auroc": [f32(roc_auc_score(binary, probs.double()))],
        "f1": [f1_score(binary, probs > 0.5)],
        "map": reference(MAP, list(range(N))),
    }
    for out in pool.values(case_one_exchange, world, shard):
        assert out["counts"] == {"collectives": 1 + world, "check_ins": 1}
        assert out["cached"] == {"collectives": 0, "check_ins": 0}
        assert out["same"]
        grouped = [["acc", "f1"], ["ap", "auroc"], ["map"]]  # a rank without data forms no compute group
        assert out["groups"] == (grouped if out["had_data"] else [["acc"], ["ap"], ["auroc"], ["f1"], ["map"]])
        for name, value in expected.items():
            assert out["values"][name] == pytest.approx(value, abs=1e-6), name


def case_inside_torchmetrics_wrappers(rank: int, world: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(5)
    preds, target = torch.randint(0, 3, (31,), generator=gen), torch.randint(0, 3, (31,), generator=gen)
    part = list(range(31))[rank::world]
    group = MetricCollection({"f1": Varlen(BinaryF1Score()), "acc": Varlen(BinaryAccuracy())})
    classwise = ClasswiseWrapper(Varlen(MulticlassAccuracy(num_classes=3, average=None)), labels=["a", "b", "c"])
    tracker = MetricTracker(Varlen(MulticlassAccuracy(num_classes=3)))
    group.update((preds[part] > 0).long(), (target[part] > 0).long())
    classwise.update(preds[part], target[part])
    for epoch in range(2):
        tracker.increment()
        half = [i for i in part if (i < 15) == (epoch == 0)]
        tracker.update(preds[half], target[half])
    values, counts = count_syncs(group.compute)
    best, step = tracker.best_metric(return_step=True)
    return {
        "group": {k: float(v) for k, v in values.items()},
        "group_counts": counts,
        "classwise": [float(v) for v in classwise.compute().values()],
        "best": float(best),
        "step": step,
    }


def test_inside_metric_collection_classwise_wrapper_and_metric_tracker(pool: DistPool) -> None:
    """Varlen(F1) and Varlen(Accuracy) share one compute group in a plain MetricCollection; each still syncs its
    (shared) states itself, because whether the states are shared is decided on each rank from its own data
    (VarlenCollection syncs them once).
    """
    world = 2
    gen = torch.Generator().manual_seed(5)
    preds, target = torch.randint(0, 3, (31,), generator=gen), torch.randint(0, 3, (31,), generator=gen)
    hard, truth = (preds > 0).long(), (target > 0).long()
    scores = [
        recall_score(target[:15], preds[:15], average="macro"),
        recall_score(target[15:], preds[15:], average="macro"),
    ]
    for out in pool.values(case_inside_torchmetrics_wrappers, world):
        assert out["group"] == pytest.approx({"f1": f1_score(truth, hard), "acc": accuracy_score(truth, hard)})
        assert out["group_counts"] == {"collectives": 2 * (1 + world), "check_ins": 2}
        assert out["classwise"] == pytest.approx(list(recall_score(target, preds, average=None)))
        assert out["best"] == pytest.approx(max(scores))
        assert out["step"] == scores.index(max(scores))
