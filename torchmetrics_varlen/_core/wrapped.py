"""What :class:`~torchmetrics_varlen.Varlen` and :class:`~torchmetrics_varlen.VarlenCollection` check of a wrapped
torchmetrics metric and its batches (pure helpers, no ``torch.distributed``): whether a metric can be wrapped, the
settings the ranks must agree on, a batch's rows and its padding cut, ``sample_ids`` and how the list states grew.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torchmetrics import Metric
from torchmetrics.metric import CompositionalMetric
from torchmetrics.utilities.data import dim_zero_cat
from torchmetrics.wrappers.abstract import WrapperMetric

from torchmetrics_varlen._core.guarded_sync import GuardedMetric
from torchmetrics_varlen._core.states import EITHER, growth_unit, list_rows
from torchmetrics_varlen.functional._validation import require_integers, validate_dedup_and_timeout

# torchmetrics' own switches: they change how a metric syncs or where it keeps its states, not what it computes.
_BASE_FLAGS = ("compute_on_cpu", "dist_sync_on_step", "sync_on_compute", "compute_with_cache", "training")


_PLAIN = (bool, int, float, str, type(None))


def wrappable(metric: Any, dataset_size: Any, sync_timeout: Any) -> None:
    """Raise if ``Varlen(metric, dataset_size, sync_timeout=...)`` cannot work, saying what to do instead."""
    if not isinstance(metric, Metric):
        hint = " (wrap a whole collection with VarlenCollection)" if type(metric).__name__ == "MetricCollection" else ""
        msg = f"Expected `metric` to be a torchmetrics.Metric, but got {type(metric).__name__}{hint}."
        raise TypeError(msg)
    if isinstance(metric, GuardedMetric):
        msg = f"Expected `metric` to be a torchmetrics metric, but got {type(metric).__name__}, which syncs itself."
        raise TypeError(msg)
    if isinstance(metric, (WrapperMetric, CompositionalMetric)):
        msg = (
            f"Expected `metric` to be a metric with states, but got the wrapper {type(metric).__name__}: wrap the"
            " metric inside it instead, e.g. ClasswiseWrapper(Varlen(metric)), Varlen(a) + Varlen(b)."
        )
        raise TypeError(msg)
    if metric.dist_sync_on_step:
        msg = "Expected the metric's `dist_sync_on_step` to be False (Varlen syncs at compute()), but got True."
        raise ValueError(msg)
    validate_dedup_and_timeout(dataset_size, sync_timeout)


def inner_config(metric: Metric) -> dict[str, Any]:
    """The metric's public settings of plain types (its constructor arguments, as torchmetrics stores them): what
    the ranks must agree on. States and torchmetrics' own switches are left out.
    """
    out: dict[str, Any] = {}
    for key, value in sorted(vars(metric).items()):
        if key.startswith("_") or key in metric._defaults or key in _BASE_FLAGS:
            continue
        if isinstance(value, _PLAIN):
            out[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, _PLAIN) for v in value):
            out[key] = list(value)
    return out


def batch_rows(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Samples in a batch: dim 0 of the first tensor argument, or the length of the first list / tuple of samples."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, Tensor):
            return int(value.shape[0]) if value.ndim else 1
        if isinstance(value, (list, tuple)):
            return len(value)
        if isinstance(value, str):
            return 1
    msg = "Expected the update arguments to hold a batch (a tensor, or a list of samples), but got none."
    raise ValueError(msg)


def cut_batch(
    args: tuple[Any, ...], kwargs: dict[str, Any], rows: int, kept: int
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The first ``kept`` rows of every argument that holds ``rows`` of them (tensors along dim 0, lists, tuples).
    Arguments that hold another number of rows are refused: which of their rows are padding is not known (cut alike,
    ``preds`` of 3 rows and ``target`` of 2 would pass as a batch of 2).
    """
    if kept == rows:
        return args, kwargs
    lengths = [
        int(v.shape[0]) if isinstance(v, Tensor) else len(v)
        for v in (*args, *kwargs.values())
        if (isinstance(v, Tensor) and v.ndim) or isinstance(v, (list, tuple))
    ]
    if any(n != rows for n in lengths):
        msg = (
            f"Expected the arguments of a batch to hold the same number of rows, but got {lengths}: the last"
            f" {rows - kept} rows are DistributedSampler padding (`dataset_size`), and arguments of other lengths"
            " cannot be cut alike. The batch was not added."
        )
        raise ValueError(msg)

    def cut(value: Any) -> Any:
        if isinstance(value, Tensor) and value.ndim and value.shape[0] == rows:
            return value[:kept]
        if isinstance(value, (list, tuple)) and len(value) == rows:
            return value[:kept]
        return value

    return tuple(cut(a) for a in args), {k: cut(v) for k, v in kwargs.items()}


def check_sample_ids(sample_ids: Any, rows: int, metric: Metric) -> Tensor:
    """``sample_ids`` as int64 after checking them, and that the metric's states can be de-duplicated by id."""
    require_integers(sample_ids, "sample_ids", "one id per sample")
    ids: Tensor = sample_ids.reshape(1) if sample_ids.ndim == 0 and rows == 1 else sample_ids  # a 0-d sample's id
    if tuple(ids.shape) != (rows,):
        msg = f"Expected `sample_ids` to have shape ({rows},), one id per sample, but got {tuple(sample_ids.shape)}."
        raise ValueError(msg)
    tensors = sorted(n for n in metric._defaults if isinstance(getattr(metric, n), Tensor))
    if tensors:
        msg = (
            "Expected `sample_ids` only with a metric whose states are lists growing by one row or one element per"
            f" sample, but got"
            f" {type(metric).__name__}, whose states {tensors} are tensors that ids cannot de-duplicate. Use"
            " `dataset_size=` to drop DistributedSampler padding instead."
        )
        raise ValueError(msg)
    custom = reductions_by_id(metric)
    if custom:
        msg = (
            f"Expected `sample_ids` only with list states reduced by concatenation or kept as lists, but"
            f" {type(metric).__name__} reduces {custom} otherwise. Use `dataset_size=` instead."
        )
        raise ValueError(msg)
    return ids.long()


def reductions_by_id(metric: Metric) -> list[str]:
    """The metric's states that ``sample_ids`` cannot de-duplicate by their reduction (not a concatenation, not a
    list kept as it is).
    """
    return sorted(n for n, fx in metric._reductions.items() if fx is not None and fx is not dim_zero_cat)


def list_states(metric: Metric) -> dict[str, list[Any]]:
    """The metric's list states, by name."""
    return {n: v for n in metric._defaults for v in (getattr(metric, n),) if isinstance(v, list)}


def check_growth(metric: Metric, before: dict[str, int], rows: int | None) -> None:
    """After an update without ``sample_ids`` (``rows`` ``None``): every new list element is a tensor. With ids, see
    :func:`check_grown`. ``before`` holds the lengths of the list states before the update.
    """
    for name, value in list_states(metric).items():
        first = before.get(name, 0)
        if rows is None and (len(value) == first or (len(value) == first + 1 and isinstance(value[-1], Tensor))):
            continue  # the common update: one tensor appended, or nothing
        check_grown(metric, name, value, first, rows)


def check_grown(
    metric: Metric, name: str, value: list[Any], first: int, rows: int | None, held: str | None = None, earlier: int = 0
) -> str | None:
    """One list state ``name`` (``value``) after an update, ``first`` elements long before it: every new element is a
    tensor, and with ``rows`` (the batch's number of ``sample_ids``) each sample added one row or one element
    (:func:`~torchmetrics_varlen._core.states.growth_unit`), as with the earlier batches (``held``: what the state
    held per sample before, ``None`` while it was empty; ``earlier``: the samples before this batch, counted only when
    it matters). Returns what the state holds per sample after the update (``None``: still nothing).

    Raises:
        TypeError: If a new element is not a tensor.
        ValueError: With ``rows``, if the state grew by neither one row nor one element per sample, or not as it did
            with the earlier batches.
    """
    new = value[first:]
    bad = next((e for e in new if not isinstance(e, Tensor)), None)
    if bad is not None:
        hint = ""
        if isinstance(bad, tuple) and "mask" in name:  # MeanAveragePrecision(iou_type="segm")
            hint = (
                ". These are RLE-encoded masks (iou_type='segm'): evaluate boxes with"
                " Varlen(MeanAveragePrecision(iou_type='bbox')), and masks with MeanAveragePrecision itself"
                " (torchmetrics gathers them as objects), skipping the images a DistributedSampler adds as padding"
                " (the j-th image of rank r is padding when j * world_size + r >= len(dataset))"
            )
        msg = (
            f"Expected the list state `{name}` of {type(metric).__name__} to hold tensors, but got a"
            f" {type(bad).__name__}: Varlen moves tensors only; sync this metric with torchmetrics instead{hint}."
        )
        raise TypeError(msg)
    if rows is None:
        return None
    grown = growth_unit(new, rows)
    if grown is None:
        if not new and not first:
            return None  # a state that holds nothing stays empty (boxes-only detection: the mask states)
        msg = (
            f"Expected every list state of {type(metric).__name__} to grow by one element per sample (a tensor of its"
            f" own, such as an image's boxes) or to grow by one row per sample with `sample_ids` ({rows} rows), but"
            f" `{name}` grew by {list_rows(new)} rows in {len(new)} elements. Use `dataset_size=` to drop"
            " DistributedSampler padding instead."
        )
        raise ValueError(msg)
    if not rows or not new:
        return held  # a batch without samples: its empty elements are dropped
    if not first and earlier:
        msg = (
            f"Expected every list state of {type(metric).__name__} to grow with every batch of `sample_ids`, but"
            f" `{name}` held nothing for the {earlier} earlier samples and grew in this update. Use `dataset_size=`"
            " to drop DistributedSampler padding instead."
        )
        raise ValueError(msg)
    if held in (None, EITHER, grown) or grown == EITHER:
        return grown if held in (None, EITHER) else held
    msg = (
        f"Expected every list state of {type(metric).__name__} to grow the same way with every batch of `sample_ids`,"
        f" but `{name}` held {held} per sample and grew by {grown} per sample in this update ({len(new)} elements"
        f" of {list_rows(new)} rows for {rows} samples). Use `dataset_size=` to drop DistributedSampler padding"
        " instead."
    )
    raise ValueError(msg)


def drop_empty(value: list[Any], first: int) -> None:
    """Remove the elements of no row that an update added to a list state after its first ``first`` (a state of
    one row per sample: they hold no sample, and would make the stored list read as one element per sample).
    """
    if any(e.ndim and not e.shape[0] for e in value[first:]):
        value[first:] = [e for e in value[first:] if not (e.ndim and not e.shape[0])]
