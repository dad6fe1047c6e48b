"""Any torchmetrics metric's states as concatenated states of one exchange, and back, reduced as torchmetrics does.

No ``torch.distributed`` here: these functions turn states into the pieces ``_dist/exchange.py`` moves, and the
gathered pieces back into states.

**On the wire** every state is a concatenated ("cat") state of the exchange, whatever its reduction:

- a list state (``default=[]``): its elements flattened and concatenated, plus a small int64 state
  ``"<name>#shapes"`` holding each element's ``[ndim, *shape]``; the elements are rebuilt afterwards in rank order
  (rank 0's first), each rank's in update order;
- a tensor state: one row per rank (``state.unsqueeze(0)``), so that the gathered tensor is torchmetrics'
  ``torch.stack`` of the ranks' states; a tensor state reduced with ``"cat"`` travels as its own rows instead.

**Back**, each state is reduced as ``Metric._sync_dist`` reduces it: ``"cat"`` concatenates along dim 0; ``"sum"``,
``"mean"``, ``"max"``, ``"min"`` and custom callables get the stacked tensor states (a list state: the list of every
rank's elements); ``None`` keeps the stack (the element list). Where this differs from torchmetrics, on purpose:
a list state that no rank filled stays ``[]`` (as on one process; torchmetrics makes it an empty float tensor), a
``"cat"`` tensor state is concatenated rather than stacked (the single-process value needs its rows, and the ranks'
row counts may differ), and element lists are in rank order (torchmetrics interleaves equally long lists).

**Samples in list states** (``sample_ids``): a sample adds to each list state either *one row* (a batch's tensor of
``B`` rows for ``B`` ids: scores, labels, query indexes) or *one element* (a tensor of its own, of any number of rows:
an image's boxes, a query's list). :func:`growth_unit` tells which a batch did, :func:`stored_unit` which a stored list
holds; a list state that holds one row per sample never keeps an empty element (the wrapper drops those), so the
stored list alone says which it is. :func:`dedup_states` keeps one copy of each id, whichever the unit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor
from torchmetrics.utilities.data import dim_zero_cat

from torchmetrics_varlen._core.dedup import conflicting_id, dedup_by_id
from torchmetrics_varlen._dist.errors import MetricSyncError
from torchmetrics_varlen._dist.exchange import CheckedIn

SHAPES = "#shapes"
Reduction = str | Callable[..., Any] | None


def _rows(element: Tensor) -> int:
    """Rows an element adds to a concatenation (a 0-d element is one row, as ``dim_zero_cat`` makes it)."""
    return int(element.shape[0]) if element.ndim else 1


def list_rows(elements: list[Any]) -> int:
    """Rows of a list state (elements must be tensors)."""
    return sum(_rows(e) for e in elements)


ROW, ELEMENT, EITHER = "one row", "one element", ""  # what one sample adds to a list state (see the module docstring)
UNITS = (ROW, ELEMENT)  # the values the ranks of a sync must agree on, per list state


def _one_row(element: Tensor) -> bool:
    return element.ndim == 0 or element.shape[0] == 1


def growth_unit(new: list[Tensor], samples: int) -> str | None:
    """What each of ``samples`` samples added to a list state whose new elements are ``new``: :data:`ELEMENT` (one
    element each, not all of one row), :data:`ROW` (``samples`` rows in all, in another number of elements),
    :data:`EITHER` (one one-row element each, where both readings agree; or no sample and only empty elements), or
    ``None`` when neither fits (nothing added for some samples included).

    Example:
        >>> from torch import zeros
        >>> growth_unit([zeros(3, 4), zeros(0, 4)], 2), growth_unit([zeros(5)], 5), growth_unit([zeros(6)], 3)
        ('one element', 'one row', None)
    """
    if samples and len(new) == samples:
        return EITHER if all(map(_one_row, new)) else ELEMENT
    if list_rows(new) == samples:
        return ROW if samples else EITHER
    return None


def stored_unit(elements: list[Tensor], samples: int) -> str:
    """What each of ``samples`` samples holds in a list state the wrapper filled (``elements``): :data:`ELEMENT`,
    :data:`ROW`, or :data:`EITHER` (one one-row element per sample, or no element at all). A list of one row per sample
    holds no empty element, so it holds as many elements as samples only when every element is one row.
    """
    if not elements:
        return EITHER
    if len(elements) == samples:
        return EITHER if all(map(_one_row, elements)) else ELEMENT
    return ROW


def per_element(unit: str | None, reduction: Reduction) -> bool:
    """Whether a list state is de-duplicated element by element: it holds one element per sample (``unit``, agreed by
    the ranks; ``None``: either reading), or one one-row element per sample and is not concatenated (the elements are
    kept as elements, as one process holds them).
    """
    return unit == ELEMENT or (unit in (None, EITHER) and reduction is not dim_zero_cat)


def encode_state(name: str, value: Tensor | list[Tensor], reduction: Reduction) -> dict[str, list[Tensor]]:
    """The cat states (lists of pieces) that carry one state of the wrapped metric."""
    if isinstance(value, list):
        shapes = [d for e in value for d in (e.ndim, *e.shape)]
        data = [e.reshape(-1) for e in value] or [torch.zeros(0)]
        device = data[0].device
        return {name: data, name + SHAPES: [torch.tensor(shapes, dtype=torch.int64, device=device)]}
    if reduction is dim_zero_cat:
        return {name: [value.reshape(1) if value.ndim == 0 else value]}
    return {name: [value.unsqueeze(0)]}


def _joined(pieces: Tensor | list[Tensor]) -> Tensor:
    if isinstance(pieces, Tensor):
        return pieces
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def _parse_shapes(ints: list[int]) -> list[tuple[int, ...]]:
    shapes, at = [], 0
    while at < len(ints):
        ndim = ints[at]
        shapes.append(tuple(ints[at + 1 : at + 1 + ndim]))
        at += 1 + ndim
    return shapes


def decode_state(
    name: str, reduction: Reduction, cat: Mapping[str, Tensor | list[Tensor]], checked: CheckedIn, what: str
) -> Tensor | list[Tensor]:
    """One state of the wrapped metric from the gathered pieces, reduced as torchmetrics reduces it.

    Raises:
        MetricSyncError: If a ``"cat"`` list state's elements cannot be concatenated (trailing shapes differ),
            naming each rank's shapes. Every rank holds the same pieces, so every rank raises.
    """
    data = _joined(cat[name])
    if name + SHAPES not in cat:  # a tensor state
        if reduction is None or reduction is dim_zero_cat:
            return data
        assert callable(reduction)
        return reduction(data)  # type: ignore[no-any-return]
    ints = _joined(cat[name + SHAPES]).tolist()
    shapes = _parse_shapes(ints)
    if not shapes:
        return []  # no rank holds an element: what one process would hold
    if reduction is dim_zero_cat:
        trailing = {s[1:] for s in shapes}
        if len(trailing) > 1:
            _raise_ragged(name, ints, checked.rows(name + SHAPES), what)
        return data.reshape(sum(s[0] if s else 1 for s in shapes), *trailing.pop())
    sizes = [math.prod(s) for s in shapes]
    elements = [chunk.reshape(shape) for chunk, shape in zip(torch.split(data, sizes), shapes, strict=True)]
    if reduction is None:
        return elements
    assert callable(reduction)
    return reduction(elements)  # type: ignore[no-any-return]


def _raise_ragged(name: str, ints: list[int], per_rank: list[int], what: str) -> None:
    lines, at = [], 0
    for rank, count in enumerate(per_rank):
        trailing = sorted({s[1:] for s in _parse_shapes(ints[at : at + count])})
        at += count
        lines.append(f"  rank {rank}: trailing shapes {trailing or 'none (no elements)'}")
    msg = (
        f"{what}: the elements of state `{name}` (reduced by concatenation) cannot be concatenated: their trailing"
        " shapes differ:\n" + "\n".join(lines) + "\nEvery rank must produce the same kind of output."
    )
    raise MetricSyncError(msg)


def local_state(value: Tensor | list[Tensor], reduction: Reduction) -> Tensor | list[Tensor]:
    """A list state as :func:`decode_state` returns it, from this rank's own elements (no sync)."""
    if isinstance(value, list) and value and reduction is dim_zero_cat:
        rows: Tensor = dim_zero_cat(value)
        return rows
    return value


def as_rows(value: Tensor | list[Tensor]) -> Tensor:
    """A (decoded) list state as one tensor of rows."""
    rows: Tensor = value if isinstance(value, Tensor) else dim_zero_cat(value)
    return rows


def keep_rows(value: Tensor | list[Tensor], keep: Tensor) -> Tensor | list[Tensor]:
    """Rows ``keep`` of a row-aligned state: a tensor stays a tensor; an element list of 0-d elements stays such a
    list (one element per kept row), any other element list becomes one element holding the kept rows.
    """
    if isinstance(value, Tensor):
        return value[keep]
    if not value:
        return value
    kept = dim_zero_cat(value)[keep]
    return list(kept.unbind(0)) if all(e.ndim == 0 for e in value) else [kept]


def dedup_states(
    states: dict[str, Tensor | list[Tensor]], ids: Tensor | None, what: str, elements: frozenset[str] = frozenset()
) -> tuple[dict[str, Tensor | list[Tensor]], int | None]:
    """States with one sample per id, ordered by id; ``None`` ids: as they are. A sample is one row of each state,
    or, for the list states named in ``elements``, one element (kept as an element).

    The parts of a sample that are not floating point (labels, query indexes, and the shapes of its elements) must
    agree between the copies of an id. Of copies whose floating-point parts differ, the one kept is the smallest in
    the lexicographic order of its floating-point values (states in the metric's order, each by value, an element
    flattened): a rule of the copies alone (see ``dedup_by_id``), so the value is the same at every world size.

    Raises:
        ValueError: If a state's rows (elements) do not match the ids, or two copies of an id differ in their labels
            or shapes.
    """
    if ids is None:
        return states, None
    if any(states[name] for name in elements if name in states):
        return _dedup_samples(states, ids, what, elements)
    labels, scores = [], []
    for name, value in states.items():
        if isinstance(value, list) and not value:
            continue
        rows = as_rows(value)
        if rows.shape[0] != ids.numel():
            msg = f"{what}: state `{name}` has {rows.shape[0]} rows for {ids.numel()} sample ids."
            raise ValueError(msg)
        if rows.is_floating_point():
            scores.append(rows.reshape(rows.shape[0], -1).to(device=ids.device, dtype=torch.float64))
        elif not rows.is_complex():
            labels.append(rows.reshape(rows.shape[0], -1).to(device=ids.device, dtype=torch.int64))
    target = torch.cat(labels, dim=1) if labels else ids.new_zeros(ids.numel(), 1)
    keep = dedup_by_id(ids, torch.zeros_like(ids), target, torch.cat(scores, dim=1) if scores else None)
    return {name: keep_rows(value, keep) for name, value in states.items()}, int(keep.numel())


def _dedup_samples(
    states: dict[str, Tensor | list[Tensor]], ids: Tensor, what: str, elements: frozenset[str]
) -> tuple[dict[str, Tensor | list[Tensor]], int]:
    """:func:`dedup_states` when some list states hold one element per sample: only the copies are compared."""
    n = ids.numel()
    parts: dict[str, Tensor | list[Tensor]] = {}
    for name, value in states.items():
        if isinstance(value, list) and not value:
            continue
        if name in elements:
            assert isinstance(value, list)
            count, unit = len(value), "elements"
            parts[name] = value
        else:
            rows = as_rows(value)
            count, unit = int(rows.shape[0]), "rows"
            parts[name] = rows
        if count != n:
            msg = f"{what}: state `{name}` has {count} {unit} for {n} sample ids."
            raise ValueError(msg)
    sorted_ids, order = torch.sort(ids, stable=True)
    same = sorted_ids[1:] == sorted_ids[:-1]
    keep = order
    if bool(same.any()):
        repeated = torch.zeros(n, dtype=torch.bool, device=ids.device)
        repeated[1:] |= same
        repeated[:-1] |= same
        copies = order[repeated]  # grouped by id, each id's copies in input order
        kept = torch.cat([order[~repeated], copies[_choose_copies(parts, ids[copies], copies)]])
        keep = kept[torch.sort(ids[kept]).indices]
    at = keep.tolist()
    out: dict[str, Tensor | list[Tensor]] = {}
    for name, value in states.items():
        if name in elements and isinstance(value, list):
            out[name] = [value[i] for i in at] if value else value
        else:
            out[name] = keep_rows(value, keep)
    return out, len(at)


def _choose_copies(parts: dict[str, Tensor | list[Tensor]], ids: Tensor, copies: Tensor) -> Tensor:
    """Which of the ``copies`` (sample positions, grouped by id: ``ids``) to keep, one per id in id order: the parts
    that are not floating point must agree (:func:`_check_copies`), the smallest floating-point values win.
    """
    positions = copies.tolist()
    start = torch.ones_like(ids, dtype=torch.bool)
    start[1:] = ids[1:] != ids[:-1]
    first = torch.cummax(torch.where(start, torch.arange(ids.numel(), device=ids.device), 0), 0).values.tolist()
    scores = []
    for name, value in parts.items():
        pieces = [value[i] for i in positions] if isinstance(value, list) else list(value[copies.to(value.device)])
        _check_copies(name, pieces, ids, first)
        if pieces[0].is_floating_point():
            flat = [p.reshape(-1).to(device=ids.device, dtype=torch.float64) for p in pieces]
            scores.append(torch.nn.utils.rnn.pad_sequence(flat, batch_first=True))  # copies of an id: equal widths
    if not scores:
        return dedup_by_id(ids, torch.zeros_like(ids), ids.new_zeros(ids.numel(), 1))
    return dedup_by_id(ids, torch.zeros_like(ids), ids.new_zeros(ids.numel(), 1), torch.cat(scores, dim=1))


def _check_copies(name: str, pieces: list[Tensor], ids: Tensor, first: list[int]) -> None:
    """Raise if a copy's piece of state ``name`` differs from its id's first copy in shape, or, for pieces that are
    not floating point (labels), in value.
    """
    labels = not (pieces[0].is_floating_point() or pieces[0].is_complex())
    for at, head in enumerate(first):
        if at == head:
            continue
        a, b = pieces[head], pieces[at]
        if a.shape != b.shape:
            sample_id = int(ids[at])
            msg = (
                f"Sample id {sample_id} was seen twice with `{name}` of different shapes ({tuple(a.shape)} and"
                f" {tuple(b.shape)}). Copies of one id must be the same sample: check that `sample_ids` are global"
                " dataset indices, not per-rank or per-batch positions, and that the model gives a repeated sample"
                " the same outputs (with DistributedSampler, `dataset_size=` drops its padding before anything is"
                " stored, so no copies are compared)."
            )
            raise ValueError(msg)
        if labels and not torch.equal(a, b.to(a.device)):
            raise conflicting_id(int(ids[at]), _shown(a), _shown(b), f" in `{name}`")


def _shown(piece: Tensor) -> object:
    """A piece of a sample for an error message: its value, or its first values."""
    values = piece.reshape(-1).long().tolist()
    if piece.ndim == 0:
        return values[0]
    return values if len(values) <= 8 else f"[{', '.join(map(str, values[:8]))}, ...]"
