"""De-duplication by sample id: which copy of a sample is kept. Pure functions, no ``torch.distributed``, no metric.

Each sample carries a global integer id; after the gather each id is kept once (the copy with the smallest scores,
see :func:`dedup_by_id`: a rule of the copies alone), and two copies with different targets are an error. The other
way to drop repeated samples, the sampler padding rule (``dataset_size=N``), is ``_core/padding.py``'s.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _order_keys(values: Tensor) -> list[Tensor]:
    """Integer keys, one per column of ``values`` (rows), whose lexicographic order is a total order of the rows.

    Floats compare by value, with ``-0.0`` before ``0.0`` (their bit patterns, made monotonic); NaN-free inputs are
    assumed (the metrics reject NaN). Integer and bool columns compare by value.
    """
    columns = values.reshape(values.shape[0], -1)
    if columns.is_floating_point():
        bits = columns.double().view(torch.int64)
        columns = bits ^ ((bits >> 63) & 0x7FFF_FFFF_FFFF_FFFF)
    else:
        columns = columns.long()
    return list(columns.unbind(1))


def conflicting_id(sample_id: int, first: object, second: object, where: str = "") -> ValueError:
    """The error for two copies of one sample id with different targets (a data bug): a plain ``ValueError`` whose
    ``sample_id``, ``first`` and ``second`` attributes let another rank repeat it.

    Example:
        >>> err = conflicting_id(5, 1, 0)
        >>> str(err).split(". ")[0], err.sample_id
        ('Sample id 5 was seen twice with different targets (1 and 0)', 5)
    """
    err = ValueError(
        f"Sample id {sample_id} was seen twice with different targets ({first} and {second}){where}. Copies of one"
        " id must be the same sample: check that `sample_ids` are global dataset indices, not per-rank or per-batch"
        " positions, and that no tensor passed to update() was refilled afterwards (the exact mode keeps them, as"
        " torchmetrics does: pass copies when reusing a buffer)."
    )
    for name, value in (("sample_id", sample_id), ("first", first), ("second", second)):
        setattr(err, name, value)
    return err


Scores = Tensor | tuple[Tensor, ...]  # one row of columns per key: a tensor, or tensors whose columns follow each other


def copy_scores(rows: dict[str, Tensor]) -> Scores:
    """The row compared between copies of one id by :func:`dedup_by_id`: the scores, then the sample weight when
    the rows have one (copies with equal scores but different weights are not interchangeable: without the weight,
    the first to arrive would be kept, and the value would depend on the order). Given as a pair, not
    concatenated: only the rows of copies are ever read.
    """
    return (rows["preds"], rows["weight"]) if "weight" in rows else rows["preds"]


def _columns_at(scores: Scores, n: int, index: Tensor) -> Tensor:
    """The score columns of the keys ``index`` (``(len(index), columns)``), float64 when the parts differ."""
    if isinstance(scores, Tensor):
        return scores.reshape(n, -1)[index.to(scores.device)].to(index.device)
    parts = [s.reshape(n, -1)[index.to(s.device)].to(index.device) for s in scores]
    return torch.cat([p.double() for p in parts], 1) if len({p.dtype for p in parts}) > 1 else torch.cat(parts, 1)


def dedup_by_id(ids: Tensor, sub: Tensor, target: Tensor, scores: Scores | None = None) -> Tensor:
    """Indices that keep one copy of each ``(id, sub)`` key, ordered by key.

    **Which copy is kept** depends only on the copies themselves, never on rank, world size, batch size or order:
    the copy whose ``scores`` row is the smallest, comparing rows lexicographically over their columns, each column
    by value (``-0.0`` before ``0.0``; scores hold no NaN). Copies equal in every column are interchangeable. So a
    sample scored twice with slightly different scores gives the same value at every world size, bit for bit.
    Without ``scores`` (or when they tie) the first copy in input order is kept.

    ``sub`` distinguishes the elements of one sample (the column of a 2-D row that shares one id); it is all zeros
    for 1-D inputs.

    Raises:
        ValueError: If two copies of a key have different ``target`` values.

    Example:
        >>> from torch import tensor
        >>> dedup_by_id(tensor([5, 3, 5, 9]), tensor([0, 0, 0, 0]), tensor([1, 0, 1, 0]))
        tensor([1, 0, 3])
        >>> dedup_by_id(tensor([5, 3, 5, 9]), tensor([0, 0, 0, 0]), tensor([1, 0, 1, 0]), tensor([0.7, 0.1, 0.6, 0.2]))
        tensor([1, 2, 3])
    """
    order = dedup_order(ids, sub, target, scores)
    return torch.arange(ids.numel(), device=ids.device) if order is None else order


def dedup_order(ids: Tensor, sub: Tensor, target: Tensor, scores: Scores | None = None) -> Tensor | None:
    """:func:`dedup_by_id`, or ``None`` when its answer is every row in input order (each key once, already
    ascending: the common single-process epoch), so that the caller can skip the gathers.
    """
    n = ids.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.int64, device=ids.device)
    key = _combined_key(ids, sub)
    if key is None:  # keys too wide to combine: sort by sub, then (stably) by id
        order = torch.sort(sub, stable=True).indices
        order = order[torch.sort(ids[order], stable=True).indices]
    else:
        stable = _stable_order(key)
        if stable is None:
            return None
        order = stable
        sorted_key = key[order]
        if n == 1 or bool((sorted_key[1:] != sorted_key[:-1]).all()):
            return order  # no copies: nothing to choose, no targets to compare
    sorted_ids, sorted_sub = ids[order], sub[order]
    first = torch.ones_like(sorted_ids, dtype=torch.bool)
    first[1:] = (sorted_ids[1:] != sorted_ids[:-1]) | (sorted_sub[1:] != sorted_sub[:-1])
    parts = () if scores is None else (scores,) if isinstance(scores, Tensor) else scores
    if parts and all(p.shape[0] == n for p in parts) and not bool(first.all()):
        # Copies exist: order them by (id, sub, scores...) so that the smallest copy of each key comes first. Only
        # the rows of repeated keys move, among themselves: their keys' positions stay, and within a key they start
        # in input order, so stable sorts by the scores give what sorting every row by (key, scores) gives.
        repeated = ~first
        repeated[:-1] |= ~first[1:]
        at = torch.nonzero(repeated).flatten()
        rows = order[at]
        moved = torch.arange(rows.numel(), device=ids.device)
        keys, widths = _copy_keys(ids, sub, parts, rows)
        for column in [*reversed(keys), sub[rows], ids[rows]]:
            moved = moved[torch.sort(column[moved], stable=True).indices]
        if widths is not None:
            _check_widths(ids[rows][moved], widths[moved])
        order = order.clone()
        order[at] = rows[moved]
    # Index of the first copy of each element's key: a running max over the positions where a key starts.
    starts = torch.where(first, torch.arange(first.numel(), device=ids.device), torch.zeros_like(sorted_ids))
    group_start = torch.cummax(starts, dim=0).values
    sorted_target = target[order]
    conflict = (sorted_target != sorted_target[group_start]).reshape(sorted_target.shape[0], -1).any(dim=1)
    if bool(conflict.any()):
        bad = int(torch.nonzero(conflict)[0, 0])
        a, b = (_label(sorted_target[i]) for i in (group_start[bad], bad))
        raise conflicting_id(int(sorted_ids[bad]), a, b)
    return order[first]


_ABSENT = torch.iinfo(torch.int64).max  # the key of an element a shorter copy does not have: after every score


def _copy_keys(ids: Tensor, sub: Tensor, scores: Scores, rows: Tensor) -> tuple[list[Tensor], Tensor | None]:
    """The columns by which the copies of each key are ordered, for the elements ``rows``: their scores' order keys;
    for samples of several elements (one id per row of a 2-D input: ``sub`` is the element's position in its row,
    and a row's elements are consecutive), the rank of the whole sample the element belongs to, so that one whole
    copy is kept, never a mix of copies, and each element's sample width (``None`` for one-element samples).

    Samples are ranked by value, column by column (every element's score, then every element's weight), a missing
    element after every value: one ``unique`` of the copies' rows, so memory and time stay linear in the copies.
    """
    n = ids.numel()
    if not bool(sub.any()):  # every sample one element (a copy of width 1 against a wider one is a sample too)
        return _order_keys(_columns_at(scores, n, rows)), None
    # The samples: runs of consecutive elements of one id whose positions count up from 0.
    begins = torch.ones(n, dtype=torch.bool, device=ids.device)
    begins[1:] = (sub[1:].long() != sub[:-1].long() + 1) | (ids[1:] != ids[:-1])
    first_of = torch.nonzero(begins).flatten()
    widths = torch.diff(first_of, append=first_of.new_tensor([n]))
    copies, of_row = torch.unique((torch.cumsum(begins, 0) - 1)[rows], return_inverse=True)
    start, width = first_of[copies], widths[copies]
    span = int(width.max())
    at = (start[:, None] + torch.arange(span, device=ids.device)).clamp(max=n - 1)
    absent = torch.arange(span, device=ids.device) >= width[:, None]
    keys = [
        k.reshape(at.shape).masked_fill(absent, _ABSENT) for k in _order_keys(_columns_at(scores, n, at.reshape(-1)))
    ]
    rank = torch.unique(torch.cat(keys, dim=1), dim=0, return_inverse=True)[1]  # rows in lexicographic order
    return [rank[of_row]], width[of_row]


def _check_widths(sorted_ids: Tensor, widths: Tensor) -> None:
    """Raise if two copies of one id (``sorted_ids`` grouped) are samples of different sizes (rows of different
    widths): they cannot be the same sample, and neither can be kept whole in the other's place.
    """
    same = sorted_ids[1:] == sorted_ids[:-1]
    bad = torch.nonzero(same & (widths[1:] != widths[:-1])).flatten()
    if bad.numel():
        i = int(bad[0])
        msg = (
            f"Sample id {int(sorted_ids[i])} was seen as samples of {int(widths[i])} and of {int(widths[i + 1])}"
            " elements. Copies of one id must be the same sample: check that `sample_ids` are global dataset"
            " indices, not per-rank or per-batch positions."
        )
        raise ValueError(msg)


def _label(row: Tensor) -> object:
    """A sample's target for an error message: one int, or the list of a multi-element target."""
    values = row.int().reshape(-1).tolist()
    return values[0] if len(values) == 1 else values


_FEW_RUNS = 4096  # descents below which NumPy's stable merge of the ascending runs beats torch's sort (W ranks)
_SLOT_SPAN = 4  # key span per key up to which distinct keys are placed by a scatter instead of sorted


def _combined_key(ids: Tensor, sub: Tensor) -> Tensor | None:
    """One int64 key per row that orders the rows as ``(id, sub)`` lexicographically: ``ids`` itself when every
    ``sub`` is 0 (one-element samples), else ``ids * S + sub`` with ``S`` above every ``sub``; ``None`` if that could
    overflow (or a ``sub`` is negative).
    """
    low, high = (int(v) for v in torch.aminmax(sub))
    if low < 0:
        return None
    if high == 0:
        return ids.long()
    width = high + 1
    ends = [abs(int(v)) for v in torch.aminmax(ids)]
    if (max(ends) + 1) * width >= 1 << 62:
        return None
    return ids.long() * width + sub


def _stable_order(key: Tensor) -> Tensor | None:
    """The permutation a stable ascending sort of ``key`` gives; ``None`` when ``key`` is strictly increasing (the
    identity, and every key distinct).

    On CPU the order is found without a comparison sort where the keys allow it: a few ascending runs (the ranks'
    gathered epochs, each in id order) are merged by NumPy's stable sort (a merge sort of runs); distinct keys
    spanning at most :data:`_SLOT_SPAN` values per key are placed by one scatter into a table of the span (repeated
    keys leave fewer rows placed than there are keys: then the sort). Otherwise ``torch.sort(stable=True)``. A
    stable sort's permutation is unique, so every route gives the same one.
    """
    n = key.numel()
    if n < 2:
        return None
    if not key.is_cpu:
        return None if not bool((key[1:] <= key[:-1]).any()) else torch.sort(key, stable=True).indices
    import numpy as np

    a = key.numpy()
    if not np.any(a[1:] <= a[:-1]):
        return None
    if np.count_nonzero(a[1:] < a[:-1]) < _FEW_RUNS:
        return torch.from_numpy(np.argsort(a, kind="stable"))
    low, high = int(a.min()), int(a.max())
    if high - low < _SLOT_SPAN * n:
        slot = np.full(high - low + 1, -1, dtype=np.int64)
        slot[a - low] = np.arange(n, dtype=np.int64)
        placed = slot[slot >= 0]
        if placed.shape[0] == n:
            return torch.from_numpy(placed)
    return torch.sort(key, stable=True).indices
