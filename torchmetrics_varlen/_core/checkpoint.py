"""Resuming from every rank's saved states on any world size (:func:`load_rank_states`): each new rank takes its
share of the old ranks' states and its ledger the sampler positions they had dealt (``_core/ledger.py``, a segment's
``base``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from torchmetrics_varlen._core.ledger import KEY
from torchmetrics_varlen._dist.group import group_position


def _merge(values: list[Any], reduction: Any) -> Any:
    """Several ranks' values of one state, reduced as the sync reduces them."""
    if isinstance(values[0], list):
        return [e for v in values for e in v]
    if reduction is dim_zero_cat:
        return torch.cat([v.reshape(1) if v.ndim == 0 else v for v in values])
    if reduction is None:
        return torch.stack(values)
    return reduction(torch.stack(values))


def _hosts(root: Any) -> list[tuple[str, Any]]:
    modules = root.named_modules()
    return [(f"{n}." if n else "", m) for n, m in modules if getattr(m, "_ledger", None) is not None]


def load_rank_states(metric: Any, state_dicts: Sequence[dict[str, Any]]) -> None:
    """Resume a metric from the states every rank saved, on any number of ranks (the same, more, fewer, or one).

    Give every rank of the new group the list of all old ranks' ``state_dict()`` (saved with ``persistent(True)``),
    in old-rank order. Rank ``r`` of ``W`` takes the states of the old ranks ``r, r + W, ...``; every rank learns how
    many sampler positions the old ranks had dealt, so that with ``dataset_size`` the padding rule continues over the
    samples not dealt yet (the new ranks' ``DistributedSampler`` must deal those, e.g. a sampler over the rest of the
    epoch's index list). Works for the package's metrics, :class:`~torchmetrics_varlen.Varlen` and
    :class:`~torchmetrics_varlen.VarlenCollection`.

    Raises:
        ValueError: If a state dict lacks the metric's states (saved without ``persistent(True)``), or, with
            ``dataset_size`` and no ``sample_ids``, the old ranks had dealt different numbers of rows (their samples
            cannot be placed exactly).

    Example:
        >>> from torch import tensor
        >>> from torchmetrics_varlen import VarlenAUROC
        >>> old = [VarlenAUROC(dataset_size=5) for _ in range(2)]  # as if saved on 2 ranks (here: 1 process)
        >>> for m in old:
        ...     m.persistent(True)
        >>> old[0].update(tensor([0.9, 0.2]), tensor([1, 0]))
        >>> old[1].update(tensor([0.3, 0.8]), tensor([0, 1]))
        >>> new = VarlenAUROC(dataset_size=5)
        >>> load_rank_states(new, [m.state_dict() for m in old])  # here: world size 1
        >>> new.update(tensor([0.7]), tensor([1]))  # the 5th sample
        >>> float(new.compute()), new.sync_report.kept
        (1.0, 5)
    """
    hosts = _hosts(metric)
    if not hosts or not state_dicts:
        msg = f"load_rank_states: expected a metric of torchmetrics_varlen and saved states, got {type(metric)}."
        raise ValueError(msg)
    rank, world = group_position(getattr(hosts[0][1], "process_group", None))
    old_world = len(state_dicts)
    mine = [sd for r, sd in enumerate(state_dicts) if r % world == rank]
    merged: dict[str, Any] = {}
    for prefix, host in hosts:
        ledger = host._ledger
        saved = [sd.get(prefix + KEY) for sd in state_dicts]
        if any(s is None for s in saved):
            msg = (
                f"load_rank_states: a state dict has no states of {ledger.what} (`{prefix}{KEY}` is missing): call"
                " metric.persistent(True) before state_dict(), on every rank."
            )
            raise ValueError(msg)
        # world, rank, base, origin, seen, padding, rejected
        rows = [[int(v) for v in s.tolist()] for s in saved if s is not None]
        positions = {r[4] + r[6] - r[3] for r in rows}
        bases = {r[2] for r in rows}
        ids_mode = any(sd.get(prefix + "ids") or sd.get(prefix + "varlen_ids") for sd in state_dicts)
        if ledger.dataset_size is not None and not ids_mode and (len(positions) > 1 or len(bases) > 1):
            msg = (
                f"load_rank_states: {ledger.what} with dataset_size: the {old_world} saved ranks had dealt different"
                f" numbers of rows ({sorted(positions)}), so their samples' sampler positions are not known and the"
                " resumed value could not be exact. Save the states when every rank has seen the same number of"
                " batches."
            )
            raise ValueError(msg)
        base = rows[0][2] + max(positions) * old_world
        counts = [sum(r[i] for r in rows if r[1] % world == rank) for i in (4, 5, 6)]
        merged[prefix + KEY] = torch.tensor([world, rank, base, counts[0] + counts[2], *counts], dtype=torch.int64)
    for name, module in metric.named_modules():
        if not isinstance(module, Metric):
            continue
        prefix = f"{name}." if name else ""
        for state, reduction in module._reductions.items():
            values = [sd[prefix + state] for sd in mine if prefix + state in sd]
            if values:
                merged[prefix + state] = _merge(values, reduction)
    metric.reset()
    metric.load_state_dict(merged, strict=False)
