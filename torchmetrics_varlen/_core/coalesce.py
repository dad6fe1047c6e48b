"""Stored batches merged as they arrive, so that a metric holds few pieces whatever the batch size.

The exact mode appends one piece per batch to each row state (``preds``, ``target`` and the optional columns
appended in the same update: ``ids`` / ``ids_sub``, ``weight``, groups). Every stored piece costs a few tensor
operations at the sync and at ``compute()``, so 64-sample batches would make those cost a multiple of the same data
in one piece. Here, like a counter in base :data:`FAN_IN`: every :data:`FAN_IN` appended pieces, the last
:data:`FAN_IN` pieces of every row state are concatenated into one; every ``FAN_IN ** 2`` pieces, the last
:data:`FAN_IN` of those; and so on, as long as the merged scores hold at most :data:`MAX_ELEMENTS` elements (bigger
batches stay as they came). Each sample is copied a few times at most; the amortised cost per batch is a fraction of
one concatenation.

Merging consecutive pieces of every row state at the same positions keeps their concatenation, and the rows aligned
between the states, exactly what it was: every value stays the same bit for bit (a mix of float widths is promoted
by the merge as the concatenation at compute time promotes it). The bookkeeping is one ``(count, length)`` pair in
the metric's ``__dict__`` (copied by pickling and ``deepcopy`` with the lists it describes); when a row state was
replaced behind its back (reset, load, sync) the count starts again and the pieces already there are left alone.
``forward`` (torchmetrics rebuilds the lists there: the stored pieces plus the batch's) counts its batch once the lists
are rebuilt (``_VarlenMetric.forward``). The wrapped metric of ``Varlen`` keeps its lists as torchmetrics makes them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

FAN_IN = 64  # pieces merged at a time (torch.cat costs ~0.2 us per piece; its fixed cost is amortised over 64)
MAX_ELEMENTS = 1 << 17  # scores a merged piece may hold: merging pays while pieces average under 2,048 scores
_KEY = "_varlen_pieces"  # (pieces appended since the count started, length of the row states after the last one)
_NONE = (0, -1)


_ZEROS: dict[torch.device, Tensor] = {}  # per device: the shared int32 zeros the views below are made of
_ZERO_VIEWS: dict[tuple[torch.device, int], Tensor] = {}  # the views handed out, by device and length


def zeros_view(n: int, device: torch.device) -> Tensor:
    """``n`` int32 zeros (the ``ids_sub`` of one-element samples): a view of one shared buffer per device, not an
    allocation per batch (stored pieces are never modified in place); the view itself is made once per length.
    Pieces that are all such views merge into one such view (:func:`_merge_tail`), without a copy.
    """
    view = _ZERO_VIEWS.get((device, n))
    if view is not None:
        return view
    zeros = _ZEROS.get(device)
    if zeros is None or zeros.numel() < n:
        size = max(n, 4096, 2 * zeros.numel() if zeros is not None else 0)
        zeros = _ZEROS[device] = torch.zeros(size, dtype=torch.int32, device=device)
        _ZERO_VIEWS.clear()  # views of the old buffer are not handed out again (they no longer merge as views)
    if len(_ZERO_VIEWS) >= 256:  # many batch sizes: start over rather than grow without bound
        _ZERO_VIEWS.clear()
    view = _ZERO_VIEWS[(device, n)] = zeros[:n]
    return view


def _zeros_merged(pieces: list[Tensor]) -> Tensor | None:
    """The concatenation of ``pieces`` as a :func:`zeros_view` when every piece is a view of its device's current
    shared zeros (then the concatenation is all zeros, int32, one dimension); ``None`` otherwise.
    """
    zeros = _ZEROS.get(pieces[0].device)
    if zeros is None or any(p._base is not zeros for p in pieces):
        return None
    return zeros_view(sum(p.shape[0] for p in pieces), zeros.device)


def _merged(pieces: list[Tensor]) -> Tensor:
    """The concatenation of ``pieces`` (a shared zeros view when they all are one)."""
    zeros = _zeros_merged(pieces)
    return torch.cat(pieces) if zeros is None else zeros


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
    state = metric.__dict__
    count, known = state.get(_KEY, _NONE)
    length = len(first)
    count = count + 1 if known == length - 1 else 1  # replaced states: count from this piece on
    if count % FAN_IN == 0:
        length = _merge(metric, names, count)
    state[_KEY] = (count, length)


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
        merged = [_merged(s[-FAN_IN:]) for s in lists]
    except (RuntimeError, TypeError):  # not concatenable (shapes, devices): they stay as they are
        return False
    for s, piece in zip(lists, merged, strict=True):
        s[-FAN_IN:] = [piece]
    return True
