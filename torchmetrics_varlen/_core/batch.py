"""What the metrics check and how they shape a batch before they take it over: pure helpers, no ``torch.distributed``.

The first part serves the package's own metrics (``classification/_base.py``), the rest the wrapper ``Varlen``; the
positions, padding cut, ids range and dedup mode are the ledger's (``_core/ledger.py``).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.metric import CompositionalMetric
from torchmetrics.utilities.data import dim_zero_cat
from torchmetrics.wrappers.abstract import WrapperMetric

from torchmetrics_varlen._core.coalesce import append_rows
from torchmetrics_varlen._core.coalesce import zeros_view as _zeros
from torchmetrics_varlen._core.held import hold, owned_state
from torchmetrics_varlen._core.ledger import Ledger
from torchmetrics_varlen._core.seam import SHARED_SYNCS, GuardedMetric
from torchmetrics_varlen._core.states import EITHER, growth_unit, list_rows
from torchmetrics_varlen.functional._count import binned_confmat, count_into
from torchmetrics_varlen.functional._hist import histogram
from torchmetrics_varlen.functional._tasks import (
    Split,
    check_inputs,
    check_sizes,
    format_inputs,
    sample_ids_fit,
    validate_dedup_and_timeout,
    validate_sample_ids,
)
from torchmetrics_varlen.functional._weighted import _split as weighted_columns
from torchmetrics_varlen.functional._weighted import check_sample_weight


def sample_shape(task: str, preds: Tensor, target: Tensor) -> torch.Size:
    """Shape of the samples of one batch (what one id or one group label can be given for)."""
    if task == "multiclass":
        return target.shape
    if task == "multilabel":
        return target.shape[:1] + target.shape[2:]
    return preds.shape


def _per_element(values: Tensor, shape: torch.Size) -> tuple[Tensor, Tensor]:
    """Expand per-row ``values`` over a sample shape: ``(flat values, position within the row)``."""
    if values.shape == shape:
        flat = values if values.ndim == 1 else values.reshape(-1)
        return flat, _zeros(flat.shape[0], flat.device)
    width = math.prod(shape[1:])
    flat = values.repeat_interleave(width)
    sub = torch.arange(width, dtype=torch.int32, device=values.device).repeat(shape[0])
    return flat, sub


def expand_per_sample(
    extras: dict[str, Tensor], sample_ids: Tensor | None, shape: torch.Size, device: torch.device
) -> dict[str, Tensor]:
    """Per-sample integer states (``ids`` with ``ids_sub``, extras such as groups), one value per element."""
    if sample_ids is not None and not extras:  # the common case (int64 ids, one per sample), without the loop
        ids = sample_ids
        if ids.dtype != torch.int64 or ids.device != device:
            ids = ids.to(device=device, dtype=torch.int64)
        if ids.ndim == 1 and ids.shape == shape:
            return {"ids": ids, "ids_sub": _zeros(ids.shape[0], device)}
        flat, sub = _per_element(ids, shape)
        return {"ids": flat, "ids_sub": sub}
    per_row = dict(extras)
    if sample_ids is not None:
        per_row["ids"] = sample_ids
    expanded: dict[str, Tensor] = {}
    for name, values in per_row.items():
        values = values.long() if values.device == device else values.to(device=device, dtype=torch.int64)
        flat, sub = _per_element(values, shape)
        expanded[name] = flat
        if name == "ids":
            expanded["ids_sub"] = sub
    return expanded


def empty_rows(name: str, task: str, width: int, device: torch.device) -> Tensor:
    """A zero-row tensor of the stored form of a metric's row state ``name``."""
    if name == "preds":
        shape: tuple[int, ...] = (0,) if task == "binary" else (0, width)
        return torch.zeros(shape, dtype=torch.float32, device=device)
    if name == "target":
        dtype = {"binary": torch.bool, "multiclass": torch.int64, "multilabel": torch.int8}[task]
        return torch.zeros((0,) if task != "multilabel" else (0, width), dtype=dtype, device=device)
    return torch.zeros(0, dtype=torch.int32 if name == "ids_sub" else torch.int64, device=device)


def _has_rows(state: list[Tensor] | Tensor, synced: bool) -> bool:
    if isinstance(state, Tensor):
        return state.numel() > 0
    # Before a sync a stored batch counts even when it is empty; synced states are per-rank pieces.
    return any(p.numel() for p in state) if synced else bool(state)


def stored_dedup_mode(metric: Any) -> str | None:
    """A package metric's dedup mode: ``"ids"`` or ``"none"`` once its first batch decided it, ``None`` before."""
    ledger: Ledger = metric._ledger
    if metric._summed is not None:
        return ledger.stored_mode(metric, "ids", False, bool(metric._update_count))
    synced = metric._is_synced
    return ledger.stored_mode(metric, "ids", _has_rows(metric.ids, synced), _has_rows(metric.preds, synced))


def stored_weight_mode(metric: Any) -> str | None:
    """``"weights"`` or ``"none"`` once the first batch decided it (with or without ``sample_weight``); ``None``
    before any batch. Exact mode: whether the ``weight`` column holds batches; binned / 16-bit: the summed state's
    dtype (float64 sums of weights, int64 counts).
    """
    ledger: Ledger = metric._ledger
    if not metric._takes_weights:
        return ledger.stored_mode(metric, "weights", False, bool(metric._update_count))
    if metric._summed is not None:
        # the dtype only, read from the instance: held 16-bit batches stay held
        return ledger.stored_mode(metric, "weights", metric.__dict__[metric._summed].dtype == torch.float64)
    synced = metric._is_synced
    return ledger.stored_mode(metric, "weights", _has_rows(metric.weight, synced), _has_rows(metric.preds, synced))


def _mode_kept(metric: Any, name: str, given: bool) -> bool:
    """Whether a batch that gives (``given``) or does not give the column ``name`` (``ids``: ``sample_ids``,
    ``weight``: ``sample_weight``) surely keeps the epoch's mode, told without working the mode out; ``False``: ask
    the ledger (:meth:`~torchmetrics_varlen._core.ledger.Ledger.check_mode`, which raises or not).

    Exact mode, before a sync: the column's list state holds batches exactly when the epoch gives it. Summed modes:
    ids never reach here (refused before); the sums are float64 exactly when the epoch is weighted.
    """
    if metric._summed is not None:
        if name == "ids":
            return not given
        summed: Tensor = metric.__dict__[metric._summed]  # the dtype only: held 16-bit batches stay held
        return (summed.dtype == torch.float64) == given
    column = getattr(metric, name)
    if type(column) is list and not metric._is_synced:
        return bool(column) == given
    return False


def check_batch(
    metric: Any,
    preds: Tensor,
    target: Tensor,
    sample_ids: Tensor | None,
    extras: dict[str, Tensor],
    sample_weight: Tensor | None = None,
) -> bool | None:
    """Raise if a package metric cannot take this batch (bad input, ids out of range, a dedup or weight mode switch);
    return whether every score lies in [0, 1] when the checks found out (``None``: not known).
    """
    m = metric
    in_unit = None
    if not m.validate_args and isinstance(preds, Tensor) and isinstance(target, Tensor):
        check_sizes(preds, target, m.task)  # before anything is counted: the batch is refused whole
    if m.validate_args:
        in_unit = check_inputs(preds, target, m.task, m.num_classes, m.num_labels, m.ignore_index, m.normalization)
        if sample_ids is not None or extras:
            shape = sample_shape(m.task, preds, target)
            size = m._ledger.dataset_size
            if sample_ids is not None and not sample_ids_fit(sample_ids, shape, size):  # else: the full checks
                need_high = size is not None  # the highest id is checked against it
                m._ledger.check_ids(sample_ids, validate_sample_ids(sample_ids, shape, high=need_high))
            for name, values in extras.items():
                validate_sample_ids(values, shape, name=name, non_negative=False)
    if sample_ids is not None and m._summed is not None:
        msg = (
            f"{type(m).__name__}: `sample_ids` need the exact mode (thresholds=None), because the binned"
            " and 16-bit modes keep only counts. Use `dataset_size=` to drop DistributedSampler padding there."
        )
        raise ValueError(msg)
    if not _mode_kept(m, "ids", sample_ids is not None):
        m._ledger.check_mode(m._dedup_mode(), sample_ids is not None)
    if sample_weight is not None:
        if not m._takes_weights:
            msg = f"{type(m).__name__} does not take `sample_weight`."
            raise ValueError(msg)
        check_sample_weight(sample_weight, preds, target, m.task)
    if m._takes_weights and not _mode_kept(m, "weight", sample_weight is not None):
        m._ledger.check_mode(
            m._weight_mode(), sample_weight is not None, argument="sample_weight", tail=" The batch was not added."
        )
    return in_unit


def _weighted_count(metric: Any, scores: Tensor, labels: Tensor, weight: Tensor) -> Tensor:
    """The float64 summed state (binned confusion matrices / 16-bit histograms) of one weighted batch."""
    m = metric
    parts = []
    for s, p, w in weighted_columns(Split(m.task, "none"), scores, labels, weight):
        if m.mode.kind == "binned":
            assert m.thresholds is not None
            parts.append(binned_confmat(s, p, m.thresholds.to(s.device), weight=w))
        else:  # the raw-pattern histogram (the state's layout), ordered at compute time
            assert m.mode.dtype is not None
            parts.append(histogram(s, p, m.mode.dtype, weight=w))
    if m.task == "binary":
        return parts[0]
    return torch.stack(parts, dim=m.mode.class_dim)


_CPU = torch.device("cpu")


def _columns(
    task: str, preds: Tensor, target: Tensor, ids: Tensor | None, extras: dict[str, Tensor]
) -> dict[str, Tensor]:
    """The per-sample integer columns of a batch (:func:`expand_per_sample`); the common batch (binary scores, int64
    ids on the CPU, one per score) without its steps.
    """
    if ids is None and not extras:
        return {}
    if (
        ids is not None
        and not extras
        and task == "binary"
        and ids.dtype == torch.int64
        and ids.is_cpu
        and preds.is_cpu
        and preds.ndim == 1
        and ids.shape == preds.shape
    ):
        return {"ids": ids, "ids_sub": _zeros(ids.shape[0], _CPU)}
    return expand_per_sample(extras, ids, sample_shape(task, preds, target), preds.device)


# A collection's members check a batch before any of them takes it (``VarlenCollection``: all or nothing across
# members): ``CHECK_ONLY`` in a metric's ``__dict__`` makes its ``update`` only check, and ``CHECKED`` keeps what the
# checks found for the ``update`` that follows with the very same argument objects, so the batch is validated once.
CHECK_ONLY = "_varlen_check_only"
CHECKED = "_varlen_checked"


def _arguments(
    preds: Tensor, target: Tensor, sample_ids: Tensor | None, extras: dict[str, Tensor], weight: Tensor | None
) -> tuple[Any, ...]:
    """A batch's argument objects, as :func:`check_only` records them and :func:`take_batch` compares them."""
    return (preds, target, sample_ids, weight, *extras.values())


def check_only(
    metric: Any,
    preds: Tensor,
    target: Tensor,
    sample_ids: Tensor | None,
    extras: dict[str, Tensor],
    sample_weight: Tensor | None,
) -> None:
    """:func:`check_batch` for a member of a collection before any member takes the batch; raises as the update
    would (a refusal counts nowhere: the collection counts it), and keeps the result for :func:`take_batch`.
    """
    in_unit = check_batch(metric, preds, target, sample_ids, extras, sample_weight)
    metric.__dict__[CHECKED] = (_arguments(preds, target, sample_ids, extras, sample_weight), in_unit)


def take_batch(
    metric: Any,
    preds: Tensor,
    target: Tensor,
    sample_ids: Tensor | None,
    extras: dict[str, Tensor],
    start: int | None,
    sample_weight: Tensor | None,
) -> None:
    """A package metric's ``update``: validate, drop sampler padding, format and append (or count); all or nothing.

    Only the columns a batch uses are stored (``ids`` / ``ids_sub`` with ``sample_ids``, ``weight`` with
    ``sample_weight``, extras such as groups); the counters are the ledger's host-side counts (``_ledger.Counter``).
    """
    m, ledger = metric, metric._ledger
    try:
        checked = m.__dict__.pop(CHECKED, None)  # used once: by the update right after the check
        given = _arguments(preds, target, sample_ids, extras, sample_weight)
        if checked is not None and len(checked[0]) == len(given) and all(map(operator.is_, checked[0], given)):
            in_unit = checked[1]
        else:
            in_unit = check_batch(m, preds, target, sample_ids, extras, sample_weight)
    except (ValueError, TypeError):
        m._update_count -= 1  # the failed call must not count as an update either
        start = ledger.position(m) if start is None else start
        ledger.reject(m, start, (preds.shape[0] if preds.ndim else 1) if isinstance(preds, Tensor) else 0)
        raise  # its rows still took their sampler positions (``sync_report.rejected`` counts them)
    SHARED_SYNCS.clear()
    rows = preds.shape[0] if preds.ndim else 1
    keep = rows
    if sample_ids is None and ledger.dataset_size is not None:  # the checks leave the counters as they were
        keep = ledger.kept_rows(ledger.position(m) if start is None else start, rows, m.process_group)
    if keep < rows:
        preds, target = preds[:keep], target[:keep]
        extras = {k: v[:keep] for k, v in extras.items()}
        sample_weight = None if sample_weight is None else sample_weight[:keep]  # a padded row drops its weight
        in_unit = in_unit or None  # a score outside [0, 1] may have been in a dropped row
    expanded = _columns(m.task, preds, target, sample_ids, extras)
    if sample_weight is not None:
        expanded["weight"] = check_sample_weight(sample_weight, preds, target, m.task)
    # Whether the scores lie in [0, 1], when the checks read it: the normalisation's own test would say the same.
    scores, labels, kept = format_inputs(preds, target, m.task, m.ignore_index, m.normalization, in_unit)
    if kept is not None and expanded:
        expanded = {k: v[kept] for k, v in expanded.items()}
    if m._summed is None:
        append_rows(m, scores, labels, expanded)  # stored pieces merged as they arrive (_core/coalesce.py)
    elif sample_weight is None and m._summed == "hist":
        hold(m, scores, labels, target.dtype)  # 16-bit: small batches held, counted together (_core/held.py)
    elif sample_weight is None:
        count_into(m.mode, owned_state(m, m._summed), scores, labels, m.task, m.thresholds)
    else:  # float64 sums of weights, added out of place (one addition order, whatever the batch sizes)
        # float64 even when no row of the batch survived the padding cut: the dtype records that the epoch is
        # weighted (stored_weight_mode), as the ranks were given it, not as the rows that stayed
        counted = _weighted_count(m, scores, labels, expanded["weight"])
        setattr(m, m._summed, getattr(m, m._summed).to(torch.float64) + counted)
    ledger.taken(rows, keep, scores.shape[0])


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
    """The first ``kept`` rows of every argument that holds ``rows`` of them (tensors along dim 0, lists, tuples)."""
    if kept == rows:
        return args, kwargs

    def cut(value: Any) -> Any:
        if isinstance(value, Tensor) and value.ndim and value.shape[0] == rows:
            return value[:kept]
        if isinstance(value, (list, tuple)) and len(value) == rows:
            return value[:kept]
        return value

    return tuple(cut(a) for a in args), {k: cut(v) for k, v in kwargs.items()}


def check_sample_ids(sample_ids: Any, rows: int, metric: Metric) -> Tensor:
    """``sample_ids`` as int64 after checking them, and that the metric's states can be de-duplicated by id."""
    if not isinstance(sample_ids, Tensor):
        msg = f"Expected `sample_ids` to be an integer tensor, but got {type(sample_ids).__name__}."
        raise TypeError(msg)
    if sample_ids.is_floating_point() or sample_ids.is_complex() or sample_ids.dtype == torch.bool:
        msg = f"Expected `sample_ids` to be an integer tensor, one id per sample, but got dtype {sample_ids.dtype}."
        raise ValueError(msg)
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
