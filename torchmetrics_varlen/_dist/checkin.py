"""The guard: every rank checks in on the process group's store before any data moves.

**What names a sync.** The group's unique name (never its member list: two groups over the same ranks are two
groups), the metric's identity (the same on every rank for the same metric: its class and creation order, or a
key the user gives) and a sequence number per (group, identity). Calls of different metrics, or of one metric on
different groups, use different keys and can never pair; a rank that calls one metric more often than the others
meets nobody at its extra sequence number and gets an error.

**The check-in** costs each rank five store operations, whatever the world size ``W``:

1. ``compare_set(sig, "", mine)``: the first rank to arrive publishes the signature of its configuration (metric
   class and arguments, state names and layouts); every later rank learns whether its own differs.
2. ``add(n, 1 [+ MISMATCH])``: one counter per sync holds, in separate bit fields, the arrivals, the arrivals whose
   signature differed, and the aborts. Its value at each ``add`` orders every event of the sync atomically.
3. ``wait(d)`` and ``get(d)``: the rank whose ``add`` completes the count writes the decision ``d`` (``go`` or
   ``mismatch``); a rank whose wait times out adds ``ABORT`` to the counter and, if the count was not complete
   before it, writes ``abort``. Exactly one of the two can happen, because the counter orders them.
4. ``set(where/<rank>, prefix)``: where this rank is, one key per rank and incarnation, overwritten at each check-in.

**Recovery.** A sync is placed by the metric's epoch (resets), the version of its states and the attempt (see
:class:`Place`). A rank whose ``add`` already shows an abort arrived after the others gave up: if they have moved on
(a later place of this metric, or held at another sync that has not decided) it raises at once; otherwise it tries
the next attempt on the same states, watching until they come or move on. A rank that resets a metric without having
synced it in the epoch marks the epoch's first sync ``moved`` (:func:`leave_epoch`): the ranks waiting there raise at
once, rather than wait out ``sync_timeout`` while it waits for them at its next sync. So after any mix of errors the
ranks meet again at the first sync every rank enters, without a restart, and no sync pairs states of different epochs.

Only the error paths read more than O(1) keys: the rank that aborts collects who had arrived (one key per
arrival, written only then) and publishes the missing ranks; on a mismatch, group rank 0 reads every rank's full
record and publishes which fields differ. Nothing is pickled. The store needs no CUDA, so the check-in works
alongside NCCL, and user collectives (``barrier``, ``all_reduce``) can never pair with it.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchmetrics_varlen import _compat
from torchmetrics_varlen._dist.group import GroupLayout, distributed_available
from torchmetrics_varlen._dist.guard_errors import (
    describe_differences,
    raise_left_behind,
    raise_mismatch,
    raise_missing,
)
from torchmetrics_varlen._dist.ticket import ERROR_PATH_WAIT, Place, Ticket, lost_store
from torchmetrics_varlen._dist.works import release_finished

__all__ = [
    "Place",
    "Scope",
    "Ticket",
    "check_in",
    "describe_differences",
    "identity_qualifier",
    "leave_epoch",
    "new_identity",
]

_ROOT = "torchmetrics_varlen/2"
_COUNT = (1 << 20) - 1  # arrivals: bits 0-19 (W < 2**20)
_MISMATCH = 1 << 20  # arrivals whose signature differs from the first one: bits 20-49
_ABORT = 1 << 50  # ranks that stopped waiting: bits 50-62
_GO, _DIFFERS, _ABANDON, _MOVED = "go", "mismatch", "abort", "moved"
_WATCH_GRACE = 1.0  # seconds a repeating rank that is not late waits like any other before it starts watching
_WATCH_PERIOD = 0.05  # seconds between the looks of a late or repeating rank at where the others are


@dataclass
class Namespace:
    """A process group's incarnation: the prefix of all of its keys, and whether this rank knows that a sync of this
    incarnation completed (after which the incarnation counter has moved on for the group's next incarnation).
    """

    prefix: str
    number: int
    counter: str
    moved: bool = False


@dataclass
class Scope:
    """Per-process counters, one set per default process group (a new ``init_process_group`` starts afresh)."""

    created: dict[str, int] = field(default_factory=dict)  # identity base -> metrics created so far
    places: dict[tuple[str, str], Place] = field(default_factory=dict)  # (group, identity) -> last sync's place
    namespaces: dict[str, Namespace] = field(default_factory=dict)  # group name -> its incarnation
    # group -> (key prefix, extra keys) of its last completed sync; strings only, so that no process group or
    # store is kept alive by this (a group destroyed with live C++ threads aborts the process at exit)
    last_go: dict[str, tuple[str, list[str]]] = field(default_factory=dict)


_SCOPES: weakref.WeakKeyDictionary[Any, Scope] = weakref.WeakKeyDictionary()
_NO_GROUP = Scope()


def _scope() -> Scope:
    if not distributed_available():
        return _NO_GROUP
    return _SCOPES.setdefault(_compat.default_group(), Scope())


def new_identity(base: str, qualifier: str = "") -> str:
    """A sync identity for a new metric: ``base`` (and ``qualifier``) plus how many metrics with that base and
    qualifier this process created.

    Every rank that creates the same metrics in the same order gets the same identities; metrics created
    dynamically in a rank-dependent order should pass their own key as ``base``. The ``qualifier`` keeps apart the
    metrics that other ranks may not create at all (see :func:`identity_qualifier`), so that those never shift the
    others' numbers.
    """
    scope = _scope()
    counter = base + qualifier
    count = scope.created.get(counter, 0)
    scope.created[counter] = count + 1
    return f"{counter}#{count}"


def identity_qualifier(process_group: Any | None, sync_on_compute: bool) -> str:
    """``"@<group>"`` for a metric on a process group other than the default one (only its members create it), and
    ``":local"`` for one that does not sync on ``compute()`` (often created on one rank only); ``""`` otherwise.
    """
    qualifier = ""
    if process_group is not None and distributed_available() and process_group is not _compat.default_group():
        qualifier = "@" + _compat.process_group_name(process_group).replace("/", "_")
    return qualifier if sync_on_compute else qualifier + ":local"


def _store() -> Any:
    return _compat.default_store()


def leave_epoch(
    process_group: Any | None, identity: str, epoch: int, *, store: Any | None = None, scope: Scope | None = None
) -> None:
    """This rank resets the metric ``identity``: it leaves the metric's epoch ``epoch`` for good.

    If it never checked in to a sync of the metric in that epoch (it skipped the computes, e.g. after an error in its
    loop), no sync of the epoch can complete: it marks the epoch's first sync ``moved`` (one ``compare_set``), so that
    the ranks waiting there, or arriving later, raise at once and name this rank, instead of waiting out
    ``sync_timeout`` while this rank may wait for them at its next sync. A rank that synced in the epoch writes
    nothing: ranks still at a later sync of that epoch watch where the others are (``_moved_on``). Never raises: a
    group this rank is not in, or a lost store, is left to the next check-in.
    """
    if not distributed_available():
        return
    try:
        layout = GroupLayout.of(process_group)
        scope = scope or _scope()
        last = scope.places.get((layout.name, identity))
        if layout.world < 2 or layout.rank < 0 or (last is not None and last.epoch >= epoch):
            return
        store = store or _store()
        ns = _namespace(scope, store, layout, "reset()")
        store.compare_set(f"{ns.prefix}{identity}/{epoch}.0.0/d", "", f"{_MOVED} {layout.rank}")
    except (RuntimeError, ValueError):  # MetricSyncError (a lost store) is a RuntimeError
        return


def _namespace(scope: Scope, store: Any, layout: GroupLayout, what: str) -> Namespace:
    """The group's incarnation, read once per process from the group name's incarnation counter.

    The counter moves on when the first sync of an incarnation completes (every rank of the group has read it by
    then: a sync completes only once every rank arrived), so a new group with the same name on the same store (a
    re-initialised default group, a new job on a store that kept an old job's keys) reads a new number and never
    meets the old group's keys.
    """
    ns = scope.namespaces.get(layout.name)
    if ns is None:
        counter = f"{_ROOT}/{layout.name}/incarnation"
        try:
            number = int(store.add(counter, 0))
        except RuntimeError as err:
            raise lost_store(err, layout, what) from err
        ns = Namespace(f"{_ROOT}/{layout.name}/{number}/", number, counter)
        scope.namespaces[layout.name] = ns
    return ns


def check_in(
    layout: GroupLayout,
    *,
    identity: str,
    signature: str,
    record: Callable[[], dict[str, Any]],
    timeout: float | None,
    what: str,
    fix: str,
    epoch: int = 0,
    version: int | None = None,
    store: Any | None = None,
    scope: Scope | None = None,
) -> Ticket:
    """Wait until every rank of the group has entered this sync of ``identity``; return the sync's ticket.

    Args:
        layout: The process group, from this rank's view.
        identity: The metric's identity (the same on every rank for the same metric).
        signature: A digest of everything the ranks must agree on exactly (configuration, state layout).
        record: The full, JSON-serialisable description behind ``signature`` (a dict of dicts); read only to
            explain a mismatch.
        timeout: Seconds to wait for the other ranks; ``None`` waits forever.
        what: Names the operation in errors, e.g. ``"VarlenAUROC.compute()"``.
        fix: What the user should do when ranks are missing.
        epoch: How many times the metric was reset (the same on every rank in the same epoch).
        version: A number that changes whenever this rank's states change within the epoch (its update count);
            ``None``: every call syncs new states.
        store: The store (default: the default process group's); for simulations of many ranks in one process.
        scope: The per-process counters (default: those of the default process group); for simulations too.

    Raises:
        MetricSyncError: On every rank that arrived, if some rank did not arrive within ``timeout`` seconds (naming
            it), or if the ranks' signatures differ (naming the fields that differ and each rank's value); on a rank
            that arrived after the others gave up on this sync and moved on, or that calls again on states the
            others do not sync again (saying so).
    """
    release_finished()  # the works of earlier syncs: their backend threads are done with them
    scope = scope or _scope()
    store = store or _store()
    ns = _namespace(scope, store, layout, what)
    key = (layout.name, identity)
    place = _first_place(scope.places.get(key), epoch, version, layout, what, store, f"{ns.prefix}{identity}/")
    late = False  # this rank found the sync it came for abandoned by the others
    late_by: float | None = None  # how long before they had given up, when they said
    started = time.monotonic()
    while True:
        scope.places[key] = place
        ticket = Ticket(layout, store, identity, f"{ns.prefix}{identity}/{place.tag}/", timeout, what, fix)
        # Where this rank is now (one key per rank and incarnation, overwritten): a rank that may wait in vain reads
        # the others' to see whether they are held at another sync (see _moved_on).
        ticket.store_op(store.set, f"{ns.prefix}where/{layout.rank}", ticket.prefix)
        first = ticket.store_op(store.compare_set, ticket.prefix + "sig", "", signature)
        same = first == signature.encode()
        arrival = int(ticket.store_op(store.add, ticket.prefix + "n", 1 if same else 1 + _MISMATCH))
        if arrival < _ABORT:
            break
        # Abandoned before this rank arrived: the others gave up on these states. Where they went decides.
        if not late:
            late, late_by = True, _abandoned_since(ticket)
        if _moved_on(ticket, ns, place):
            raise_left_behind(ticket, late, late_by, timeout)
        place = place.again()  # they may sync these very states again (a call repeated after an error)
    # A rank that came late, or syncs the same states again, or a second version in one epoch, is one that may wait
    # for ranks that have moved on: it watches where they would go next, and gives up as soon as they are there.
    watch = ns if late or place.attempt or place.state else None
    collect, left_behind = 0, False  # collect: see _give_up
    if arrival & _COUNT == layout.world:
        decision = _GO if arrival < _MISMATCH else _DIFFERS
        if not ns.moved:  # the incarnation's first complete sync: the group's next incarnation gets a new number
            ticket.store_op(store.compare_set, ns.counter, str(ns.number), str(ns.number + 1))
        ticket.store_op(store.set, ticket.prefix + "d", decision)
    else:
        left = None if timeout is None else timeout - (time.monotonic() - started)
        if not _wait_decision(ticket, left, watch, place, grace=not late):
            left_behind = watch is not None and _moved_on(ticket, watch, place)
            collect = _give_up(ticket)
            left_behind = left_behind and collect >= 0
        decision = ticket.store_op(store.get, ticket.prefix + "d").decode()
    if decision in (_GO, _DIFFERS):
        ns.moved = True
    if decision == _GO:
        _forget_previous(ticket, scope)
        return ticket
    if decision == _DIFFERS:
        raise_mismatch(ticket, record)
    if left_behind or decision.startswith(_MOVED):
        mover = decision.split()[1:2] if decision.startswith(_MOVED) else []  # "moved <rank>": the rank that reset
        raise_left_behind(ticket, late, late_by, timeout, int(mover[0]) if mover else None)
    raise_missing(ticket, arrival & _COUNT, max(collect, 0), late, late_by)
    raise AssertionError  # pragma: no cover - both raise


def _first_place(
    last: Place | None, epoch: int, version: int | None, layout: GroupLayout, what: str, store: Any, base: str
) -> Place:
    """Where this sync starts. A rank that never synced in the previous epoch also marks that epoch's first sync
    ``moved``: a rank waiting there learns at once that it will never come (it cannot complete any more).
    """
    if epoch and (last is None or last.epoch < epoch - 1):
        try:
            store.compare_set(f"{base}{epoch - 1}.0.0/d", "", f"{_MOVED} {layout.rank}")
        except RuntimeError as err:
            raise lost_store(err, layout, what) from err
    return Place(epoch, version, 0, 0) if last is None else last.after(epoch, version)


def _give_up(ticket: Ticket) -> int:
    """Stop waiting: add this rank's abort to the counter, and unless the count completed just before, abandon the
    sync. Returns -1 if the count completed (the decision is on its way), else how many ranks had arrived if this
    rank is the first to give up (it names the missing ranks for everyone), else 0.
    """
    store, world = ticket.store, ticket.layout.world
    after = int(ticket.store_op(store.add, ticket.prefix + "n", _ABORT))
    if after & _COUNT >= world:
        ticket.wait_keys(["d"], ERROR_PATH_WAIT)  # the last rank arrived just now: "go" is on its way
        return -1
    ticket.store_op(store.compare_set, ticket.prefix + "d", "", f"{_ABANDON} {time.time():.3f}")
    return after & _COUNT if after < 2 * _ABORT else 0


def _wait_decision(
    ticket: Ticket, seconds: float | None, watch: Namespace | None, place: Place, *, grace: bool = False
) -> bool:
    """Wait for the sync's decision; a watching rank also gives up once the others are at a later place.

    With ``grace`` (a repeated or second-version sync that is not late: usually every rank makes it), the rank blocks
    first for up to ``_WATCH_GRACE`` seconds as an ordinary rank would, and watches only after that.
    """
    if watch is None:
        return ticket.wait_keys(["d"], seconds)
    deadline = None if seconds is None else time.monotonic() + seconds
    if grace:
        if _moved_on(ticket, watch, place):  # held elsewhere already: blocking here would make this rank late there
            return False
        first = _WATCH_GRACE if seconds is None else min(seconds, _WATCH_GRACE)
        if ticket.wait_keys(["d"], first):
            return True
    decision = [ticket.prefix + "d"]
    pause = 0.0005  # doubles up to _WATCH_PERIOD: a sync the others join soon costs little latency
    while True:
        if ticket.store_op(ticket.store.check, decision):
            return True
        if _moved_on(ticket, watch, place):
            return False
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(2 * pause, _WATCH_PERIOD)


def _moved_on(ticket: Ticket, ns: Namespace, place: Place) -> bool:
    """Whether the other ranks will not come to this sync soon: some rank checked in at a later place of this metric
    (new states in this epoch, or the next epoch), or some rank waits at a sync of another metric that has not decided
    yet: it cannot come here before that one ends, and this rank is what it may be waiting for, so waiting here would
    only make this rank late for it as well.
    """
    store = ticket.store
    base = f"{ns.prefix}{ticket.identity}/"
    if any(ticket.store_op(store.check, [f"{base}{tag}/sig"]) for tag in place.later()):
        return True
    me = ticket.layout.rank
    for rank in range(ticket.layout.world):
        where = f"{ns.prefix}where/{rank}"
        if rank == me or not ticket.store_op(store.check, [where]):
            continue
        there = ticket.store_op(store.get, where).decode()
        # At an earlier sync of this same metric, the rank is behind, not elsewhere: it comes here next (its later
        # syncs of this metric are what ``place.later()`` sees).
        if there.startswith(base):
            continue
        if not ticket.store_op(store.check, [there + "d"]):
            return True
    return False


def _abandoned_since(ticket: Ticket) -> float | None:
    """Seconds since the ranks of an abandoned sync gave up on it (from the wall clock the first of them wrote)."""
    if not ticket.wait_keys(["d"], ERROR_PATH_WAIT):
        return None
    parts = ticket.get("d").decode().split()
    if len(parts) != 2 or parts[0] != _ABANDON:
        return None
    return max(0.0, time.time() - float(parts[1]))


def _forget_previous(ticket: Ticket, scope: Scope) -> None:
    """Group rank 0 deletes the keys of the group's previous completed sync: every rank has passed it."""
    name = ticket.layout.name
    previous = scope.last_go.get(name)
    scope.last_go[name] = (ticket.prefix, ticket.extra_keys)  # the list: keys written after the check-in too
    if previous is None or ticket.layout.rank != 0:
        return
    store = ticket.store
    prefix, extra = previous
    try:
        for key in ("sig", "n", "d", *extra):
            store.delete_key(prefix + key)
    except (RuntimeError, NotImplementedError):  # pragma: no cover - stores without delete keep the keys
        pass
