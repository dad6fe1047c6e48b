"""The guard: every rank checks in on the process group's store before any data moves.

The check-in is also the metadata exchange: each rank writes a small JSON record (row counts, dtypes, trailing
shapes, metric configuration) under a key unique to this sync, then waits until every rank of the group has
written one. The store is a side channel that user collectives (``barrier``, ``all_reduce``) can never pair with,
it needs no CUDA (so it works when the data backend is NCCL), and it lets a rank that waits too long see exactly
which ranks are missing. Whether a sync goes ahead or is abandoned is decided once, atomically
(``compare_set``), so a rank arriving just after the others gave up raises too, instead of entering a collective
alone.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import weakref
from typing import Any

import torch.distributed as dist

from torchmetrics_varlen._dist.errors import MetricSyncError

_GO = b"go"
_ABORT = b"abort"
_ROOT = "torchmetrics_varlen"
_FOREVER = 3600.0  # sync_timeout=None: wait in slices of an hour
# Per process group: how many guarded syncs this process has started on it. Every rank of a group counts the same
# sequence of syncs, so the counter names the sync consistently across ranks.
_SYNC_COUNTS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def resolve_group(group: Any | None) -> Any:
    """Return the process group object itself (``None`` means the default group)."""
    return dist.distributed_c10d._get_default_group() if group is None else group


def group_layout(group: Any) -> tuple[int, int, list[int]]:
    """``(rank in group, group size, global rank of each group rank)``."""
    return dist.get_rank(group), dist.get_world_size(group), list(dist.get_process_group_ranks(group))


def _describe(rank: int, global_ranks: list[int]) -> str:
    glob = global_ranks[rank]
    return f"rank {rank}" if glob == rank else f"rank {rank} (global rank {glob})"


def _store() -> Any | None:
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):  # pragma: no cover - depends on how the group was made
        return None


def check_in(record: dict[str, Any], *, group: Any, timeout: float | None, what: str, fix: str) -> list[dict[str, Any]]:
    """Publish ``record`` and return every rank's record, in group-rank order.

    Args:
        record: JSON-serialisable metadata of this rank.
        group: The process group object.
        timeout: Seconds to wait for the other ranks; ``None`` waits forever.
        what: Names the operation in errors, e.g. ``"VarlenAUROC.compute()"``.
        fix: What the user should do when ranks are missing.

    Raises:
        MetricSyncError: If some rank did not check in within ``timeout`` seconds (on every rank that did), or if
            this rank arrived after the others had given up.
    """
    rank, world, global_ranks = group_layout(group)
    store = _store()
    if store is None:  # pragma: no cover - no store: fall back to a collective, unguarded
        out: list[Any] = [None] * world
        dist.all_gather_object(out, record, group=group)
        return out
    count = _SYNC_COUNTS.get(group, 0)
    _SYNC_COUNTS[group] = count + 1
    tag = hashlib.sha1(",".join(map(str, global_ranks)).encode()).hexdigest()[:12]
    prefix = f"{_ROOT}/{tag}/{count}/"
    meta_keys = [f"{prefix}meta/{r}" for r in range(world)]
    store.set(meta_keys[rank], json.dumps(record).encode())
    decision = _wait_for_all(store, prefix, world, timeout)
    if decision != _GO:
        missing = [r for r in range(world) if not store.check([meta_keys[r]])]
        _raise_missing(missing, rank, global_ranks, timeout, what, fix)
    records = [json.loads(v) for v in store.multi_get(meta_keys)]
    if count >= 2:
        _forget(store, f"{_ROOT}/{tag}/{count - 2}/", rank)
    return records


def _wait_for_all(store: Any, prefix: str, world: int, timeout: float | None) -> bytes:
    """Arrive; the last rank to arrive decides "go", a rank whose wait times out decides "abort" (first wins).

    Waiting is the store's own blocking ``wait`` on the decision key: no polling, woken as soon as it is set.
    """
    decision_key = prefix + "decision"
    if store.add(prefix + "arrived", 1) >= world:
        return bytes(store.compare_set(decision_key, "", _GO))
    while True:
        try:
            store.wait([decision_key], datetime.timedelta(seconds=_FOREVER if timeout is None else timeout))
        except RuntimeError:  # DistStoreError on a timeout
            if timeout is not None:
                return bytes(store.compare_set(decision_key, "", _ABORT))
            continue
        return bytes(store.get(decision_key))


def _raise_missing(
    missing: list[int], rank: int, global_ranks: list[int], timeout: float | None, what: str, fix: str
) -> None:
    if missing:
        names = ", ".join(_describe(r, global_ranks) for r in missing)
        msg = (
            f"{what} on {_describe(rank, global_ranks)} waited {timeout:g} s for the other ranks of its process group,"
            f" but {names} never arrived. {fix}"
        )
    else:
        msg = (
            f"{what} on {_describe(rank, global_ranks)} arrived after the other ranks had stopped waiting"
            f" (sync_timeout={timeout:g} s), so this sync was abandoned on every rank. {fix}"
        )
    err = MetricSyncError(msg)
    err.missing_ranks = missing
    raise err


def _forget(store: Any, old_prefix: str, rank: int) -> None:
    """Delete this rank's keys of the sync before the previous one: every rank has read them by now."""
    try:
        store.delete_key(f"{old_prefix}meta/{rank}")
        if rank == 0:
            store.delete_key(old_prefix + "arrived")
            store.delete_key(old_prefix + "decision")
    except (RuntimeError, NotImplementedError):  # pragma: no cover - stores without delete keep the keys
        pass


def check_consistent(
    records: list[dict[str, Any]], keys: list[str], what: str, global_ranks: list[int], field: str | None = None
) -> None:
    """Raise (identically on every rank) if the ranks' records disagree on any of ``keys``.

    With ``field``, the values are looked up in ``record[field]`` and ``None`` (not decided yet, e.g. a rank without
    data) agrees with anything.
    """
    for key in keys:
        values = [(r[field] if field else r).get(key) for r in records]
        decided = [v for v in values if v is not None or field is None]
        if any(v != decided[0] for v in decided[1:]):
            rows = "\n".join(f"  {_describe(r, global_ranks)}: {values[r]}" for r in range(len(values)))
            msg = (
                f"{what}: the ranks disagree on `{key}`, so their states cannot be combined:\n{rows}\n"
                "Construct the metric with the same arguments on every rank and feed it inputs of the same kind."
            )
            raise MetricSyncError(msg)
