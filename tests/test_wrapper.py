"""Varlen and VarlenCollection in one process: the wrapped metric's API, dedup, refusals (multi-rank:
test_wrapper_distributed, test_wrapper_guard).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from _wrapped import BY_NAME, CASES, N, call_args, columns, reference
from sklearn.metrics import accuracy_score, f1_score, mutual_info_score, r2_score, recall_score, roc_auc_score
from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import BinaryAccuracy, BinaryF1Score, MulticlassAccuracy
from torchmetrics.regression import MeanSquaredError
from torchmetrics.retrieval import RetrievalMAP
from torchmetrics.wrappers import ClasswiseWrapper, MetricTracker

from torchmetrics_varlen import Varlen, VarlenAUROC, VarlenCollection

PREDS = torch.tensor([1, 0, 1, 1, 0, 1])
TARGET = torch.tensor([1, 0, 0, 1, 0, 0])


def _rows_counted(acc: Varlen) -> int:
    """The rows the wrapped ``BinaryAccuracy`` was given (its four counters)."""
    metric = acc.metric
    return int(metric.tp + metric.fp + metric.tn + metric.fn)


def test_padding_rows_never_reach_the_metric_forward_reset_state_dict() -> None:
    """dataset_size=4: rows 4 and 5 of the rank's stream run past the data set, whichever call carries them: they
    never reach the wrapped metric, and, since one process never pads (88ed689: ``len(loader)`` passed for
    ``len(dataset)``, or a second pass), compute() raises naming them. Padding dropped on real ranks, by update and
    forward: test_dedup_distributed (test_wrapper_makes_sum_state_metrics_exact).
    """
    acc = Varlen(BinaryAccuracy(), dataset_size=4)
    assert float(acc(PREDS[:3], TARGET[:3])) == pytest.approx(accuracy_score(TARGET[:3], PREDS[:3]))
    acc.update(PREDS[3:5], TARGET[3:5])  # positions 3 (real) and 4 (past the data set)
    assert acc(PREDS[5:], TARGET[5:]) is None  # position 5: only rows past it, the wrapped metric is not called
    assert _rows_counted(acc) == 4
    with pytest.raises(ValueError, match=r"2 rows were dropped as sampler padding.*len\(loader\)"):
        acc.compute()
    acc.reset()
    assert _rows_counted(acc) == 0
    acc.update(PREDS[:4], TARGET[:4])
    assert float(acc.compute()) == pytest.approx(accuracy_score(TARGET[:4], PREDS[:4]))
    assert acc.sync_report is not None
    assert (acc.sync_report.received, acc.sync_report.duplicates_dropped, acc.sync_report.missing) == (4, 0, 0)
    acc.persistent(True)
    assert sorted(acc.state_dict()) == [
        "metric.fn",
        "metric.fp",
        "metric.tn",
        "metric.tp",
        "varlen_ids",
        "varlen_ledger",
        "varlen_padding",
        "varlen_rejected",
        "varlen_rows",
    ]
    clone = Varlen(BinaryAccuracy(), dataset_size=4)
    clone.persistent(True)
    clone.load_state_dict(acc.state_dict())
    assert float(clone.compute()) == float(acc.compute())
    clone.update(PREDS[:1], TARGET[:1])  # position 4 after the loaded state: past the data set
    assert _rows_counted(clone) == 4
    with pytest.raises(ValueError, match="1 rows were dropped as sampler padding"):
        clone.compute()


def test_compute_groups_share_only_what_is_shared() -> None:
    """Accuracy and F1 (the same four counters) form one compute group, MSE its own; each value is its own. Every
    member's ``dataset_size`` is the 6 rows fed (one process never pads, 88ed689): a member outside the group
    updates would report rows never seen (a warning, an error here).
    """
    collection = MetricCollection(
        {
            "acc": Varlen(BinaryAccuracy(), dataset_size=6),
            "f1": Varlen(BinaryF1Score(), dataset_size=6),
            "mse": Varlen(MeanSquaredError(), dataset_size=6),
        }
    )
    probs = torch.tensor([0.9, 0.1, 0.8, 0.3, 0.7, 0.2])
    collection.update(probs[:3], TARGET[:3])
    collection.update(probs[3:], TARGET[3:])  # only the group leaders are updated now
    assert sorted(sorted(g) for g in collection.compute_groups.values()) == [["acc", "f1"], ["mse"]]
    values = collection.compute()
    hard = (probs > 0.5).long()
    assert float(values["acc"]) == pytest.approx(accuracy_score(TARGET, hard))
    assert float(values["f1"]) == pytest.approx(f1_score(TARGET, hard))
    assert float(values["mse"]) == pytest.approx(float(((probs - TARGET) ** 2).mean()))
    for name in ("acc", "f1", "mse"):
        report = collection[name].sync_report
        assert report is not None
        assert (report.kept, report.missing) == (6, 0), name


def test_inside_classwise_wrapper_and_metric_tracker() -> None:
    gen = torch.Generator().manual_seed(3)
    preds, target = torch.randint(0, 3, (30,), generator=gen), torch.randint(0, 3, (30,), generator=gen)
    classwise = ClasswiseWrapper(Varlen(MulticlassAccuracy(num_classes=3, average=None)), labels=["a", "b", "c"])
    classwise.update(preds, target)
    per_class = recall_score(target, preds, average=None)
    assert [float(v) for v in classwise.compute().values()] == pytest.approx(list(per_class))
    tracker = MetricTracker(Varlen(MulticlassAccuracy(num_classes=3)))
    for epoch in range(2):
        tracker.increment()
        tracker.update(preds[epoch * 10 :], target[epoch * 10 :])
    best, step = tracker.best_metric(return_step=True)
    scores = [recall_score(target[e * 10 :], preds[e * 10 :], average="macro") for e in range(2)]
    assert float(best) == pytest.approx(max(scores))
    assert step == scores.index(max(scores))


def test_plot_draws_the_wrapped_metrics_plot() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    metric = Varlen(BinaryAccuracy())
    metric.update(PREDS, TARGET)
    fig, ax = metric.plot()
    assert fig is ax.figure
    assert ax.get_ylabel() == "BinaryAccuracy"  # torchmetrics' own plot of the wrapped metric, of the value
    assert [float(v) for line in ax.lines for v in line.get_ydata()] == pytest.approx([4 / 6])


# ----------------------------------------------------------------------------- sample_ids


def test_sample_ids_count_each_sample_once_in_id_order() -> None:
    """Retrieval with repeated ids: the value of the distinct samples, the same for any batching or repetition."""
    case = BY_NAME["RetrievalMAP"]
    data = columns()
    metric = Varlen(case.build())
    for part in ([0, 1, 2, 3, 4, 5], [4, 5, 6, 7], list(range(8, N)), [0, 22]):
        args, kwargs = call_args(case, data, part)
        metric.update(*args, sample_ids=torch.tensor(part), **kwargs)
    assert [float(metric.compute())] == pytest.approx(reference(case, list(range(N))), abs=1e-7)
    assert metric.sync_report is not None
    assert (metric.sync_report.kept, metric.sync_report.duplicates_dropped) == (N, 4)


def test_sample_ids_of_one_sample_with_different_labels_raise() -> None:
    metric = Varlen(RetrievalMAP())
    metric.update(
        torch.tensor([0.3, 0.6]), torch.tensor([0, 1]), indexes=torch.tensor([0, 0]), sample_ids=torch.arange(2)
    )
    metric.update(torch.tensor([0.3]), torch.tensor([1]), indexes=torch.tensor([0]), sample_ids=torch.tensor([0]))
    with pytest.raises(ValueError, match=r"Sample id 0 was seen twice with different targets"):
        metric.compute()


def test_sample_ids_need_states_that_grow_one_row_per_sample() -> None:
    with pytest.raises(ValueError, match=r"whose states \['fn', 'fp', 'tn', 'tp'\] are tensors .* Use `dataset_size=`"):
        Varlen(BinaryAccuracy()).update(PREDS, TARGET, sample_ids=torch.arange(6))
    metric = Varlen(TwiceAppended())
    metric.update(torch.ones(2))
    with pytest.raises(ValueError, match=r"this update has `sample_ids` but earlier updates had none"):
        metric.update(torch.ones(2), sample_ids=torch.arange(2))
    metric = Varlen(TwiceAppended())
    with pytest.raises(ValueError, match=r"grow by one row per sample with `sample_ids` \(3 rows\), but `x` grew by 6"):
        metric.update(torch.ones(3), sample_ids=torch.arange(3))
    assert metric.metric.x == []  # the failed call left nothing behind
    assert metric.metric._update_count == 0
    assert metric._update_count == 0
    for bad, error, text in [
        ([0, 1, 2], TypeError, "Expected `sample_ids` to be an integer tensor, but got list."),
        (torch.tensor([0.0, 1.0, 2.0]), ValueError, "Expected `sample_ids` to be an integer tensor, one id per sample"),
        (
            torch.arange(4),
            ValueError,
            r"Expected `sample_ids` to have shape \(3,\), one id per sample, but got \(4,\).",
        ),
    ]:
        with pytest.raises(error, match=text):
            Varlen(TwiceAppended()).update(torch.ones(3), sample_ids=bad)


class TwiceAppended(Metric):
    """Appends every batch twice: two rows per sample."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("x", [], dist_reduce_fx="cat")

    def update(self, x: Tensor) -> None:
        """Two rows per sample."""
        self.x += [x, x]

    def compute(self) -> Tensor:
        """The sum."""
        return torch.cat(self.x).sum()


class Strings(Metric):
    """Keeps Python objects in a list state (as text or detection metrics of other libraries do)."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("words", [], dist_reduce_fx="cat")

    def update(self, words: list[str]) -> None:
        """Append the words."""
        self.words.extend(words)

    def compute(self) -> Tensor:
        """How many words."""
        return torch.tensor(len(self.words))


def test_states_of_python_objects_are_refused_at_update() -> None:
    metric = Varlen(Strings())
    with pytest.raises(TypeError, match=r"Expected the list state `words` of Strings to hold tensors, but got a str"):
        metric.update(["a", "b"])
    assert metric.metric.words == []


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("metric", "error", "text"),
    [
        (3, TypeError, "Expected `metric` to be a torchmetrics.Metric, but got int."),
        (
            MetricCollection([BinaryAccuracy()]),
            TypeError,
            r"got MetricCollection \(wrap a whole collection with Varlen",
        ),
        (VarlenAUROC(), TypeError, "got VarlenAUROC, which syncs itself."),
        (ClasswiseWrapper(BinaryAccuracy()), TypeError, r"wrap the metric inside it instead, e.g. ClasswiseWrapper\("),
        (BinaryAccuracy() + BinaryF1Score(), TypeError, "got the wrapper CompositionalMetric"),
        (BinaryAccuracy(dist_sync_on_step=True), ValueError, "Expected the metric's `dist_sync_on_step` to be False"),
    ],
)
def test_what_cannot_be_wrapped(metric: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        Varlen(metric)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"dataset_size": -2}, "Expected argument `dataset_size` to be a non-negative int or None, but got -2."),
        ({"dataset_size": 2.5}, "Expected argument `dataset_size` to be a non-negative int or None, but got 2.5."),
        (
            {"sync_timeout": 0},
            "Expected argument `sync_timeout` to be a positive number of seconds or None, but got 0.",
        ),
        ({"sync_key": "a/b"}, "Expected argument `sync_key` to be a non-empty string without '/', or None"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        Varlen(BinaryAccuracy(), **kwargs)
    with pytest.raises(ValueError, match=text):  # the collection checks them by the same functions
        VarlenCollection([BinaryAccuracy()], **kwargs)


def test_a_batch_needs_rows() -> None:
    with pytest.raises(ValueError, match="Expected the update arguments to hold a batch"):
        Varlen(BinaryAccuracy(), dataset_size=2).update(threshold=1)


# ----------------------------------------------------------------------------- VarlenCollection


def test_collection_wraps_plain_metrics_and_drops_padding() -> None:
    """A plain member is wrapped in Varlen. Rows past ``dataset_size=4`` reach no member: one process never pads
    (88ed689), so the update that cuts one raises and changes no member; reset(), the next epoch is exact. Padding
    dropped on real ranks, and a padding-only batch reaching no member: test_collection_distributed.
    """
    probs = torch.tensor([0.9, 0.2, 0.6, 0.3, 0.9])
    metrics = VarlenCollection({"auroc": VarlenAUROC(), "acc": BinaryAccuracy()}, dataset_size=4, prefix="val/")
    assert isinstance(metrics["acc"], Varlen)
    metrics.update(probs[:3], TARGET[:3])
    with pytest.raises(ValueError, match=r"1 rows were dropped as sampler padding.*len\(loader\)"):
        metrics.update(probs[3:], TARGET[3:5])  # positions 3 (real) and 4 (past the data set)
    assert _rows_counted(metrics["acc"]) == 3
    assert int(metrics["auroc"].num_samples) == 3
    metrics.reset()
    metrics.update(probs[:2], TARGET[:2])
    assert metrics(probs[2:4], TARGET[2:4]) != {}
    values = metrics.compute()
    assert float(values["val/acc"]) == pytest.approx(accuracy_score(TARGET[:4], probs[:4] > 0.5))
    assert float(values["val/auroc"]) == pytest.approx(roc_auc_score(TARGET[:4], probs[:4]))
    with pytest.raises(TypeError, match=r"`bad`: ClasswiseWrapper around an unwrapped metric. Put Varlen inside it"):
        VarlenCollection({"bad": ClasswiseWrapper(BinaryAccuracy())})
    kept = VarlenCollection({"ok": ClasswiseWrapper(Varlen(MulticlassAccuracy(num_classes=3, average=None)))})
    assert isinstance(kept["ok"], ClasswiseWrapper)


# ----------------------------------------------------------------------------- the references themselves


def test_the_references_agree_with_scikit_learn_and_scipy() -> None:
    """The catalogue's reference (each metric's own class on one process) is what scikit-learn / SciPy compute."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import average_precision_score

    data = columns()
    everything = list(range(N))
    value = {case.name: reference(case, everything) for case in CASES}
    probs, binary, x, y = (data[k].float().double() for k in ("probs", "binary", "x", "y"))
    assert value["BinaryF1Score"] == pytest.approx([f1_score(binary, probs > 0.5)], abs=1e-6)
    class4 = data["scores4"].float().argmax(1)
    assert value["MulticlassAccuracy"] == pytest.approx([recall_score(data["class4"], class4, average="macro")])
    assert value["R2Score"] == pytest.approx([r2_score(y.float(), x.float())], abs=1e-5)
    assert value["SpearmanCorrCoef"] == pytest.approx([spearmanr(x, y).statistic], abs=1e-6)
    assert value["PearsonCorrCoef"] == pytest.approx([pearsonr(x, y).statistic], abs=1e-5)
    assert value["MutualInfoScore"] == pytest.approx([mutual_info_score(data["cluster3"], data["class3"])], abs=1e-6)
    per_query = []
    for q in data["indexes"].unique():
        sel = data["indexes"] == q
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            per_query.append(average_precision_score(binary[sel], probs[sel]) if binary[sel].any() else 0.0)
    assert value["RetrievalMAP"] == pytest.approx([sum(per_query) / len(per_query)], abs=1e-6)
