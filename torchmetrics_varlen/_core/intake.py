"""How a package metric takes a batch: check it (:func:`check_batch`), cut its sampler padding, and store or count it
(:func:`take_batch`), all or nothing, inside torchmetrics' own update wrapper; stored pieces merged as they arrive.

No ``torch.distributed`` here. The positions, the padding cut, the ids range and the dedup mode are the ledger's
(``_core/ledger.py``); ``Varlen``'s batches are ``_core/wrapped_intake.py``'s.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen._core.columns import columns, columns_shape
from torchmetrics_varlen._core.guarded_sync import SHARED_SYNCS
from torchmetrics_varlen._core.ledger import writable_state
from torchmetrics_varlen._core.wrapped import batch_rows
from torchmetrics_varlen.functional._count import binned_confmat, count_into
from torchmetrics_varlen.functional._hist import histogram
from torchmetrics_varlen.functional._validation import (
    Split,
    check_inputs,
    check_sizes,
    format_inputs,
    validate_sample_ids,
)
from torchmetrics_varlen.functional._weighted import _split as weighted_columns
from torchmetrics_varlen.functional._weighted import check_sample_weight


def _mode_kept(metric: Any, name: str, given: bool) -> bool:
    """Whether a batch that gives (``given``) or does not give the column ``name`` (``ids``: ``sample_ids``,
    ``weight``: ``sample_weight``) surely keeps the epoch's mode, told without working the mode out; ``False``: ask
    the ledger (:meth:`~torchmetrics_varlen._core.ledger.Ledger.check_mode`, which raises or not).

    Exact mode, before a sync: the column's list state holds batches exactly when the epoch gives it. Summed modes:
    ids never reach here (refused before); the sums are float64 exactly when the epoch is weighted.
    """
    if metric._forward_modes is not None:  # inside forward the states are reset: the epoch's modes decide
        return False
    if metric._summed is not None:
        if name == "ids":
            return not given
        summed: Tensor = getattr(metric, metric._summed)
        return (summed.dtype == torch.float64) == given
    column = getattr(metric, name)
    if type(column) is list and not metric._synced:
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
            shape = columns_shape(m.task, preds, target)
            if sample_ids is not None:
                validate_sample_ids(sample_ids, shape)
                m._ledger.check_ids(sample_ids)  # within the data set (with ``dataset_size``)
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


def rows_of(preds: Any, target: Any = None) -> int:
    """The rows (sampler positions) of a package metric's batch, also one refused for not being tensors (a list of
    scores): as :func:`~torchmetrics_varlen._core.wrapped.batch_rows` says, 0 when nothing holds a batch.
    """
    try:
        return batch_rows((preds, target), {})
    except ValueError:
        return 0


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
    ``sample_weight``, extras such as groups); the ledger counts the batch (``Ledger.batch``: taken, or rejected
    if it raises).
    """
    m = metric
    if isinstance(preds, Tensor) and preds.requires_grad:  # a training step's outputs: checked and stored without
        preds = preds.detach()  # autograd (a stored score must not keep the model's graph until reset())
    rows = (preds.shape[0] if preds.ndim else 1) if isinstance(preds, Tensor) else rows_of(preds, target)
    # a refusal counts its rows as rejected, and the call as no update (torchmetrics' update wrapper counted it)
    with m._ledger.batch(m, rows, start, m.process_group, counted_call=True) as batch:
        in_unit = check_batch(m, preds, target, sample_ids, extras, sample_weight)
        SHARED_SYNCS.forget(m)  # the syncs of its states (a compute group's): no other metric's
        keep = rows if sample_ids is not None else batch.cut()  # ids: no padding cut (dedup by id instead)
        if keep < rows:
            preds, target = preds[:keep], target[:keep]
            extras = {k: v[:keep] for k, v in extras.items()}
            sample_weight = None if sample_weight is None else sample_weight[:keep]  # a padded row drops its weight
            in_unit = in_unit or None  # a score outside [0, 1] may have been in a dropped row
        batch.stored = _store(m, preds, target, sample_ids, extras, sample_weight, in_unit)


def _store(
    m: Any,
    preds: Tensor,
    target: Tensor,
    sample_ids: Tensor | None,
    extras: dict[str, Tensor],
    sample_weight: Tensor | None,
    in_unit: bool | None,
) -> int:
    """Format a checked (and cut) batch and add it to the metric's states; the number of samples stored."""
    expanded = columns(m.task, preds, target, sample_ids, extras) if sample_ids is not None or extras else {}
    if sample_weight is not None:
        expanded["weight"] = check_sample_weight(sample_weight, preds, target, m.task)
    # Whether the scores lie in [0, 1], when the checks read it: the normalisation's own test would say the same.
    scores, labels, kept = format_inputs(preds, target, m.task, m.ignore_index, m.normalization, in_unit)
    if kept is not None and expanded:
        expanded = {k: v[kept] for k, v in expanded.items()}
    if m._summed is None:
        append_rows(m, scores, labels, expanded)  # stored pieces merged as they arrive (below)
    elif sample_weight is None:  # counted in place, as torchmetrics adds to its tensor states
        count_into(m.mode, writable_state(m, m._summed), scores, labels, m.task, m.thresholds)
    else:  # float64 sums of weights (one addition order, whatever the batch sizes)
        # float64 even when no row of the batch survived the padding cut: the dtype records that the epoch is
        # weighted (stored_weight_mode), as the ranks were given it, not as the rows that stayed
        counted = _weighted_count(m, scores, labels, expanded["weight"])
        summed = writable_state(m, m._summed)
        if summed.dtype == torch.float64:
            summed += counted
        else:  # the epoch's first weighted batch: the int64 zeros become float64 sums
            setattr(m, m._summed, summed.to(torch.float64) + counted)
    return int(scores.shape[0])


# ---------------------------------------------------------------- stored pieces, merged as they arrive
# Stored batches merged as they arrive, so that a metric holds few pieces whatever the batch size.
#
# The exact mode appends one piece per batch to each row state (``preds``, ``target`` and the optional columns
# appended in the same update: ``ids`` / ``ids_sub``, ``weight``, groups). Every stored piece costs a few tensor
# operations at the sync and at ``compute()``, so 64-sample batches would make those cost a multiple of the same data
# in one piece. Here, like a counter in base :data:`FAN_IN`: every :data:`FAN_IN` appended pieces, the last
# :data:`FAN_IN` pieces of every row state are concatenated into one; every ``FAN_IN ** 2`` pieces, the last
# :data:`FAN_IN` of those; and so on, as long as the merged scores hold at most :data:`MAX_ELEMENTS` elements (bigger
# batches stay as they came). Each sample is copied a few times at most; the amortised cost per batch is a fraction of
# one concatenation.
#
# Merging consecutive pieces of every row state at the same positions keeps their concatenation, and the rows aligned
# between the states, exactly what it was: every value stays the same bit for bit (a mix of float widths is promoted
# by the merge as the concatenation at compute time promotes it). The bookkeeping is one :class:`PieceCount` of
# the metric (copied by pickling and ``deepcopy`` with the lists it describes); when a row state was
# replaced behind its back (reset, load, sync) the count starts again and the pieces already there are left alone.
# ``forward`` (torchmetrics rebuilds the lists there: the stored pieces plus the batch's) counts its batch once the
# lists are rebuilt (``_VarlenMetric.forward``). The wrapped metric of ``Varlen`` keeps its lists as torchmetrics
# makes them.

FAN_IN = 64  # pieces merged at a time (torch.cat costs ~0.2 us per piece; its fixed cost is amortised over 64)
MAX_ELEMENTS = 1 << 17  # scores a merged piece may hold: merging pays while pieces average under 2,048 scores


class PieceCount:
    """A metric's count of stored pieces (its ``_piece_count``): pieces appended since the count started, and the
    length of the row states after the last one (``-1``: none yet).
    """

    __slots__ = ("count", "length")

    def __init__(self) -> None:
        self.count, self.length = 0, -1


def append_rows(metric: Any, scores: Tensor, labels: Tensor, columns: dict[str, Tensor]) -> None:
    """Append one batch's piece to ``preds``, ``target`` and the other row states in ``columns``, then merge (module
    docstring). Inside ``forward`` the batch goes to the batch's own states: :func:`count_piece` runs after they are
    merged back.
    """
    preds = metric.preds
    preds.append(scores)
    metric.target.append(labels)
    for name, value in columns.items():
        getattr(metric, name).append(value)
    if not metric._in_forward:
        count_piece(metric, ("preds", "target", *columns))


def count_piece(metric: Any, names: tuple[str, ...]) -> None:
    """Count the piece just appended to the row states ``names`` (the first one: ``preds``) and merge every
    :data:`FAN_IN` pieces (after :func:`append_rows`, and for ``forward``'s batch once merged back into the states).
    """
    first = getattr(metric, names[0])
    if not isinstance(first, list):
        return
    pieces: PieceCount = metric._piece_count
    length = len(first)
    count = pieces.count + 1 if pieces.length == length - 1 else 1  # replaced states: count from this piece on
    if count % FAN_IN == 0:
        length = _merge(metric, names, count)
    pieces.count, pieces.length = count, length


def _merge(metric: Any, names: tuple[str, ...], count: int) -> int:
    """Merge the tails of the row states ``names`` that hold pieces, level by level; the new number of pieces."""
    lists = [s for n in names for s in (getattr(metric, n),) if isinstance(s, list) and s]
    step = FAN_IN
    while count % step == 0 and _merge_tail(lists):
        step *= FAN_IN
    return len(lists[0])


def _merge_tail(lists: list[list[Tensor]]) -> bool:
    """Concatenate the last :data:`FAN_IN` pieces of every list into one, in all of them or in none; ``False`` when
    the lists are not aligned, the merged scores would be too big, or the pieces cannot be concatenated.
    """
    first = lists[0]
    if len(first) < FAN_IN or any(len(s) != len(first) for s in lists):
        return False
    if sum(map(Tensor.numel, first[-FAN_IN:])) > MAX_ELEMENTS:
        return False
    try:
        merged = [torch.cat(s[-FAN_IN:]) for s in lists]
    except (RuntimeError, TypeError):  # not concatenable (shapes, devices): they stay as they are
        return False
    for s, piece in zip(lists, merged, strict=True):
        s[-FAN_IN:] = [piece]
    return True
