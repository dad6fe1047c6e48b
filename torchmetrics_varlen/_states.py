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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor
from torchmetrics.utilities.data import dim_zero_cat

from torchmetrics_varlen._dedup import dedup_by_id
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
    states: dict[str, Tensor | list[Tensor]], ids: Tensor | None, what: str
) -> tuple[dict[str, Tensor | list[Tensor]], int | None]:
    """Row-aligned states with one row per id, ordered by id; ``None`` ids: as they are.

    Rows that are not floating point (labels, query indexes) must agree between the copies of an id. Of copies whose
    floating-point rows differ, the one kept is the smallest in the lexicographic order of its floating-point columns
    (states in the metric's order, each by value): a rule of the copies alone (see ``dedup_by_id``), so the value is
    the same at every world size.

    Raises:
        ValueError: If a state's rows do not match the ids, or two copies of an id differ in their labels.
    """
    if ids is None:
        return states, None
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
