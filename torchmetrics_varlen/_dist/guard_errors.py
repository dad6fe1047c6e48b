"""The guard's errors on the check-in: a rank left behind (late, or calling again on states the others do not sync
again), ranks that never arrived, and ranks whose configurations differ. Each message says what happened, on which
rank, and what to do; the same on every rank that can know.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from torchmetrics_varlen._dist.errors import MetricSyncError
from torchmetrics_varlen._dist.group import GroupLayout
from torchmetrics_varlen._dist.ticket import ERROR_PATH_WAIT, Ticket


def raise_left_behind(
    ticket: Ticket, late: bool, late_by: float | None, timeout: float | None, mover: int | None = None
) -> None:
    """Raise on a rank whose states the other ranks will not sync: they moved on to later states or a new epoch
    (``mover``: the rank that reset the metric without a sync in this epoch, when it said so).
    """
    me = ticket.layout.describe(ticket.layout.rank)
    limit = "sync_timeout=None" if timeout is None else f"sync_timeout={timeout:g} s"
    if late:
        how = "" if late_by is None else f"{late_by:.1f} s late, "
        msg = (
            f"{ticket.what} on {me} arrived after the other ranks had stopped waiting ({how}{limit}), so that"
            f" sync of {ticket.identity!r} was abandoned, and they have moved on (reset(), or new updates and a"
            " later compute()): this rank was late, or the others called compute() earlier (in the middle of the"
            " epoch). Its states cannot be combined with theirs: nothing was exchanged, and its states were left"
            " as they were. Keep sync_timeout above the drift between your ranks; the next compute() that every"
            " rank calls on the same epoch is exact again."
        )
    elif ticket.prefix.endswith(".0.0/"):
        who = "another rank" if mover is None or mover == ticket.layout.rank else ticket.layout.describe(mover)
        msg = (
            f"{ticket.what} on {me} waited at the sync of {ticket.identity!r}, but {who} moved on: it reset the"
            " metric without calling compute() in this epoch (it skipped the compute, e.g. after an error in its"
            " loop), so this sync can never complete. Nothing was exchanged, and its states were left as they were;"
            f" the next compute() that every rank calls in the same epoch is exact again. {ticket.fix}"
        )
    elif ticket.prefix.endswith(".0/"):
        msg = (
            f"{ticket.what} on {me} synced a second time in this epoch (a compute() after new updates), but the other"
            f" ranks have moved on to a later sync of {ticket.identity!r} (the next epoch, or later states): this"
            " rank called compute() more often in this epoch than they did (e.g. in the middle of the epoch, on"
            " some ranks only). Nothing was exchanged, and its states were left as they were. Call compute() at the"
            " same points on every rank."
        )
    else:
        msg = (
            f"{ticket.what} on {me} was called again on the same states (with compute_with_cache=False, or after an"
            f" error, every call syncs), but the other ranks have moved on to a later sync of {ticket.identity!r}"
            " (reset(), or new updates and a later compute()). Nothing was exchanged, and its states were left as"
            " they were. Call compute() the same number of times on every rank."
        )
    raise MetricSyncError(msg)


def raise_missing(ticket: Ticket, arrived_as: int, collect: int, late: bool, late_by: float | None) -> None:
    """Raise on a rank that took part in an abandoned sync, naming the ranks that never arrived.

    Each such rank writes its arrival slot; the first rank that gave up (``collect``: how many had arrived by then)
    reads the slots and publishes the missing ranks, so that every rank's message names them.
    """
    layout, store = ticket.layout, ticket.store
    ticket.store_op(store.set, f"{ticket.prefix}at/{arrived_as}", str(layout.rank))
    if collect:
        slots = [f"at/{i}" for i in range(1, collect + 1)]
        ticket.wait_keys(slots, ERROR_PATH_WAIT)
        present = {
            int(ticket.store_op(store.get, ticket.prefix + s))
            for s in slots
            if ticket.store_op(store.check, [ticket.prefix + s])
        }
        missing = [r for r in range(layout.world) if r not in present]
        ticket.store_op(store.set, ticket.prefix + "missing", json.dumps(missing))
    missing_ranks: list[int] = []
    if ticket.wait_keys(["missing"], ERROR_PATH_WAIT):
        missing_ranks = json.loads(ticket.store_op(store.get, ticket.prefix + "missing"))
    me = layout.describe(layout.rank)
    absent = layout.describe_all(missing_ranks) if missing_ranks else "some rank"
    timeout = ticket.timeout
    if late:
        how = "" if late_by is None else f"{late_by:.1f} s late, "
        msg = (
            f"{ticket.what} on {me} arrived after the other ranks had stopped waiting"
            f" ({how}sync_timeout={timeout:g} s), so that sync of {ticket.identity!r} was abandoned on every rank. It"
            f" waited for them to sync the same states again, but {absent} never arrived. Its states were left as"
            f" they were. {ticket.fix}"
        )
    else:
        msg = (
            f"{ticket.what} on {me} waited {timeout:g} s for the other ranks of its process group at the sync of"
            f" {ticket.identity!r}, but {absent} never arrived. {ticket.fix}"
        )
    err = MetricSyncError(msg)
    err.missing_ranks = missing_ranks
    raise err


def raise_mismatch(ticket: Ticket, record: Callable[[], dict[str, Any]]) -> None:
    """Raise the same error on every rank: which fields of the ranks' records differ, and each rank's value."""
    layout, store = ticket.layout, ticket.store
    ticket.store_op(store.set, f"{ticket.prefix}rec/{layout.rank}", json.dumps(record(), sort_keys=True))
    head = f"{ticket.what} ({ticket.identity!r}): the ranks disagree on "
    tail = "\nConstruct the metric with the same arguments on every rank and feed it inputs of the same kind."
    if layout.rank == 0:
        keys = [f"rec/{r}" for r in range(layout.world)]
        why = "(the ranks' descriptions could not be collected)"
        if ticket.wait_keys(keys, ERROR_PATH_WAIT):
            records = [json.loads(v) for v in ticket.store_op(store.multi_get, [ticket.prefix + k for k in keys])]
            why = describe_differences(records, layout, budget=MESSAGE_BUDGET - len(head) - len(tail))
        ticket.store_op(store.set, ticket.prefix + "why", why)
    why = "(rank 0 did not explain the difference)"
    if ticket.wait_keys(["why"], ERROR_PATH_WAIT):
        why = ticket.store_op(store.get, ticket.prefix + "why").decode()
    raise MetricSyncError(head + why + tail)


MESSAGE_BUDGET = 960  # characters of a whole error message with a per-rank table (issue 36: under 1,000)
_MAX_FIELDS = 6  # differing fields a table shows; the others are counted


def describe_differences(records: list[dict[str, Any]], layout: GroupLayout, budget: int = 700) -> str:
    """``"`max_fpr` (config), so ...:"`` plus one line per rank (or per group of ranks with equal values) with its
    values of the differing fields, each a :func:`digest`, the whole at most about ``budget`` characters.
    """
    differing: list[tuple[str, str]] = []
    for section in sorted({s for r in records for s in r}):
        fields = sorted({f for r in records for f in r.get(section, {})})
        for name in fields:
            values = [json.dumps(r.get(section, {}).get(name), sort_keys=True) for r in records]
            if len(set(values)) > 1:
                differing.append((section, name))
    if not differing:
        return "their description, so their states cannot be combined."
    groups: dict[str, list[int]] = {}  # ranks with equal values of the differing fields share a line
    for r, rec in enumerate(records):
        key = json.dumps([rec.get(section, {}).get(name) for section, name in differing], sort_keys=True)
        groups.setdefault(key, []).append(r)
    text = ""
    for shown in range(min(len(differing), _MAX_FIELDS), 0, -1):
        cols = differing[:shown]
        more = len(differing) - shown
        names = ", ".join(f"`{name}` ({section})" for section, name in cols)
        names += f" and {more} more field{'s' if more > 1 else ''}" if more else ""
        head = f"{names}, so their states cannot be combined:\n"
        cells = [[records[ranks[0]].get(section, {}).get(name) for section, name in cols] for ranks in groups.values()]
        frame = max(len(layout.describe_all(ranks)) for ranks in groups.values()) + 6
        frame += sum(len(repr(name)) + 4 for _, name in cols)
        limits = _share(
            (budget - len(head)) // len(groups) - frame, [max(len(repr(v[i])) for v in cells) for i in range(shown)]
        )
        rows = [
            f"  {layout.describe_all(ranks)}: "
            + "{"
            + ", ".join(
                f"{name!r}: {digest(v, limits[i])}" for i, ((_, name), v) in enumerate(zip(cols, row, strict=True))
            )
            + "}"
            for ranks, row in zip(groups.values(), cells, strict=True)
        ]
        text = head + "\n".join(rows)
        if len(text) <= budget:
            break
    return text


def _share(room: int, needs: list[int], least: int = 36, most: int = 90) -> list[int]:
    """Each field's character limit in a row of ``room`` characters: short values as they are, the rest shared
    (at most ``most`` each: a table is a digest).
    """
    limits = [0] * len(needs)
    left = len(needs)
    for i in sorted(range(len(needs)), key=needs.__getitem__):
        limits[i] = min(needs[i], max(room // left, least), most)
        room -= limits[i]
        left -= 1
    return limits


def digest(value: Any, limit: int = 80) -> str:
    """``repr(value)`` if at most ``limit`` characters; else a digest that tells two differing values apart.

    A list of numbers (a threshold tensor, in a record) shows its first values, how many, its range and a hash:
    ``[0.0, 0.00334448, ... 300 values, 0.0 .. 1.0, sha1 3fa2c1d0]``; anything else its first characters, its size
    and a hash. The result is at most about ``limit`` characters (never under what a count and a hash need).
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    sha = hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:8]
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        numbers = [_number(v) for v in value]
        tail = f"... {len(value)} values, {_number(min(value))} .. {_number(max(value))}, sha1 {sha}]"
        if len(tail) + 1 > limit:
            tail = f"... {len(value)} values, sha1 {sha}]"
        shown = ""
        for n in numbers:
            if len(shown) + len(n) + 2 + len(tail) + 1 > limit:
                break
            shown += n + ", "
        return "[" + shown + tail
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters"
    tail = f"... ({size}, sha1 {sha})"
    return text[: max(limit - len(tail), 8)] + tail


def _number(value: float) -> str:
    text = repr(value)
    return text if len(text) <= 10 else f"{value:.6g}"


def shorten(text: str, limit: int) -> str:
    """``text``, or its first characters and its length if longer than ``limit`` characters."""
    if len(text) <= limit:
        return text
    tail = f"... ({len(text)} characters)"
    return text[: max(limit - len(tail), 8)] + tail
