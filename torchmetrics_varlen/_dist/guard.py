"""The guard: every rank checks in on the process group's store before any data moves.

**What names a sync.** The group's unique name (never its member list: two groups over the same ranks are two
groups), the metric's identity (the same on every rank for the same metric: its class and creation order, or a
key the user gives) and a sequence number per (group, identity). Calls of different metrics, or of one metric on
different groups, use different keys and can never pair; a rank that calls one metric more often than the others
meets nobody at its extra sequence number and gets an error.

**The check-in** costs each rank four store operations, whatever the world size ``W``:

1. ``compare_set(sig, "", mine)``: the first rank to arrive publishes the signature of its configuration (metric
   class and arguments, state names and layouts); every later rank learns whether its own differs.
2. ``add(n, 1 [+ MISMATCH])``: one counter per sync holds, in separate bit fields, the arrivals, the arrivals whose
   signature differed, and the aborts. Its value at each ``add`` orders every event of the sync atomically.
3. ``wait(d)`` and ``get(d)``: the rank whose ``add`` completes the count writes the decision ``d`` (``go`` or
   ``mismatch``); a rank whose wait times out adds ``ABORT`` to the counter and, if the count was not complete
   before it, writes ``abort``. Exactly one of the two can happen, because the counter orders them.

**Recovery.** A rank whose ``add`` already shows an abort arrived after the others gave up: that sync is over for
everyone, so the rank moves to the next sequence number (and the next, while those are abandoned too) and waits
there. The ranks that took part in an abandoned sync raise and move on to the next number as well. So after any
mix of errors the counters of all ranks meet again at the first sync every rank enters, without a restart.

Only the error paths read more than O(1) keys: the rank that aborts collects who had arrived (one key per
arrival, written only then) and publishes the missing ranks; on a mismatch, group rank 0 reads every rank's full
record and publishes which fields differ. Nothing is pickled. The store needs no CUDA, so the check-in works
alongside NCCL, and user collectives (``barrier``, ``all_reduce``) can never pair with it.
"""

from __future__ import annotations

import datetime
import json
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from torchmetrics_varlen import _compat
from torchmetrics_varlen._dist.errors import MetricSyncError
from torchmetrics_varlen._dist.group import GroupLayout, distributed_available
from torchmetrics_varlen._dist.works import release_finished

_ROOT = "torchmetrics_varlen/2"
_COUNT = (1 << 20) - 1  # arrivals: bits 0-19 (W < 2**20)
_MISMATCH = 1 << 20  # arrivals whose signature differs from the first one: bits 20-49
_ABORT = 1 << 50  # ranks that stopped waiting: bits 50-62
_GO, _DIFFERS, _ABANDON, _MOVED = "go", "mismatch", "abort", "moved"
_FOREVER = 3600.0  # sync_timeout=None: wait in slices of an hour
_ERROR_PATH_WAIT = 2.0  # seconds the error paths wait for the (live) ranks' keys
_WATCH_GRACE = 1.0  # seconds a repeating rank that is not late waits like any other before it starts watching
_WATCH_PERIOD = 0.05  # seconds between the looks of a late or repeating rank at where the others are


@dataclass(frozen=True)
class Place:
    """Where a metric's sync stands: its epoch (resets so far), the version of its states it synced (``None``: every
    call is a new state), how many different versions it synced in this epoch (``state``), and how many times it
    tried to sync this very version (``attempt``).
    """

    epoch: int
    version: int | None
    state: int
    attempt: int

    def after(self, epoch: int, version: int | None) -> Place:
        """The place of the next sync of the same metric, with these states."""
        if epoch != self.epoch:
            return Place(epoch, version, 0, 0)
        if version is None or version != self.version:
            return Place(epoch, version, self.state + 1, 0)
        return Place(epoch, version, self.state, self.attempt + 1)

    def again(self) -> Place:
        """The next attempt with the same states (after this one was abandoned)."""
        return Place(self.epoch, self.version, self.state, self.attempt + 1)

    @property
    def tag(self) -> str:
        """The place's part of the store keys."""
        return f"{self.epoch}.{self.state}.{self.attempt}"

    def later(self) -> tuple[str, str]:
        """The tags of where the other ranks go next when they do not sync these states again: a new version in
        this epoch, or the next epoch.
        """
        return f"{self.epoch}.{self.state + 1}.0", f"{self.epoch + 1}.0.0"


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


def new_identity(base: str) -> str:
    """A sync identity for a new metric: ``base`` plus how many metrics with that base this process created.

    Every rank that creates the same metrics in the same order gets the same identities; metrics created
    dynamically in a rank-dependent order should pass their own key as ``base``.
    """
    scope = _scope()
    count = scope.created.get(base, 0)
    scope.created[base] = count + 1
    return f"{base}#{count}"


def _store() -> Any:
    return _compat.default_store()


def _lost_store(err: BaseException, layout: GroupLayout, what: str) -> MetricSyncError:
    msg = (
        f"{what} on {layout.describe(layout.rank)} lost the connection to the process group's store ({err})."
        " The store is served by global rank 0's process under env:// and torch.multiprocessing.spawn (by the"
        " launcher agent under torchrun): that process has probably exited or crashed, and the job cannot"
        " synchronise any more. Look for the first error of global rank 0."
    )
    return MetricSyncError(msg)


@dataclass(frozen=True)
class Ticket:
    """A sync that every rank of the group entered: its store keys and what to say if a later step fails."""

    layout: GroupLayout
    store: Any
    identity: str
    prefix: str
    timeout: float | None
    what: str
    fix: str
    extra_keys: list[str] = field(default_factory=list)  # keys written after the check-in, deleted with the sync's

    def store_op(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one store operation; a dead store becomes a :class:`MetricSyncError` that says so."""
        try:
            return fn(*args)
        except RuntimeError as err:
            raise _lost_store(err, self.layout, self.what) from err

    def set(self, key: str, value: str) -> None:
        """Write ``key`` (relative to the sync's prefix); it is deleted once every rank has passed the sync."""
        self.store_op(self.store.set, self.prefix + key, value)

    def get(self, key: str) -> bytes:
        """Read ``key`` (relative to the sync's prefix); it must exist."""
        return bytes(self.store_op(self.store.get, self.prefix + key))

    def wait_keys(self, keys: list[str], seconds: float | None) -> bool:
        """Block until every key (relative to the sync's prefix) exists (``True``) or ``seconds`` pass (``False``)."""
        store = self.store
        full = [self.prefix + k for k in keys]
        while True:
            slice_s = _FOREVER if seconds is None else max(seconds, 0.001)
            try:
                store.wait(full, datetime.timedelta(seconds=slice_s))
            except dist.DistStoreError:
                if seconds is None:
                    continue
                return False
            except RuntimeError as err:
                raise _lost_store(err, self.layout, self.what) from err
            return True

    def failed(self, error: BaseException, step: str) -> MetricSyncError:
        """The error for a step after the check-in that failed on this rank (a collective, a computation).

        This rank leaves a note, waits a few seconds for the notes of the other ranks whose step failed too, and
        names the ranks that left none: they died or stopped responding.
        """
        layout, store = self.layout, self.store
        me = layout.describe(layout.rank)
        try:
            store.set(f"{self.prefix}failed/{layout.rank}", f"{type(error).__name__}: {error}"[:500])
            deadline = time.monotonic() + _ERROR_PATH_WAIT
            others = [r for r in range(layout.world) if r != layout.rank]
            noted: dict[int, str] = {}
            while True:
                for r in others:
                    if r not in noted and store.check([f"{self.prefix}failed/{r}"]):
                        noted[r] = store.get(f"{self.prefix}failed/{r}").decode()
                if len(noted) == len(others) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        except RuntimeError as err:
            return _lost_store(err, layout, self.what)
        silent = [r for r in others if r not in noted]
        lines = [f"{self.what} on {me} ({self.identity!r}): {step} failed ({type(error).__name__}: {error})."]
        if silent:
            lines.append(
                f"{layout.describe_all(silent)} stopped responding after the check-in (died, or stuck elsewhere)."
            )
        lines += [f"  {layout.describe(r)}: {text}" for r, text in sorted(noted.items())]
        failure = MetricSyncError("\n".join(lines))
        failure.missing_ranks = silent
        return failure


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
            raise _lost_store(err, layout, what) from err
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
        first = ticket.store_op(store.compare_set, ticket.prefix + "sig", "", signature)
        same = first == signature.encode()
        arrival = int(ticket.store_op(store.add, ticket.prefix + "n", 1 if same else 1 + _MISMATCH))
        if arrival < _ABORT:
            break
        # Abandoned before this rank arrived: the others gave up on these states. Where they went decides.
        if not late:
            late, late_by = True, _abandoned_since(ticket)
        if _moved_on(ticket, ns, place):
            _raise_left_behind(ticket, late, late_by, timeout)
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
        _raise_mismatch(ticket, record)
    if left_behind or decision.startswith(_MOVED):
        _raise_left_behind(ticket, late, late_by, timeout)
    _raise_missing(ticket, arrival & _COUNT, max(collect, 0), late, late_by)
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
            raise _lost_store(err, layout, what) from err
    return Place(epoch, version, 0, 0) if last is None else last.after(epoch, version)


def _give_up(ticket: Ticket) -> int:
    """Stop waiting: add this rank's abort to the counter, and unless the count completed just before, abandon the
    sync. Returns -1 if the count completed (the decision is on its way), else how many ranks had arrived if this
    rank is the first to give up (it names the missing ranks for everyone), else 0.
    """
    store, world = ticket.store, ticket.layout.world
    after = int(ticket.store_op(store.add, ticket.prefix + "n", _ABORT))
    if after & _COUNT >= world:
        ticket.wait_keys(["d"], _ERROR_PATH_WAIT)  # the last rank arrived just now: "go" is on its way
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
    """Whether some rank checked in at a later place of this metric: new states in this epoch, or the next epoch."""
    base = f"{ns.prefix}{ticket.identity}/"
    return any(ticket.store_op(ticket.store.check, [f"{base}{tag}/sig"]) for tag in place.later())


def _abandoned_since(ticket: Ticket) -> float | None:
    """Seconds since the ranks of an abandoned sync gave up on it (from the wall clock the first of them wrote)."""
    if not ticket.wait_keys(["d"], _ERROR_PATH_WAIT):
        return None
    parts = ticket.get("d").decode().split()
    if len(parts) != 2 or parts[0] != _ABANDON:
        return None
    return max(0.0, time.time() - float(parts[1]))


def _raise_left_behind(ticket: Ticket, late: bool, late_by: float | None, timeout: float | None) -> None:
    """Raise on a rank whose states the other ranks will not sync: they moved on to later states or a new epoch."""
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
        msg = (
            f"{ticket.what} on {me} waited at the sync of {ticket.identity!r}, but another rank reset the metric and"
            " synced in the next epoch without calling compute() in this one. Nothing was exchanged, and its states"
            f" were left as they were. {ticket.fix}"
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


def _raise_missing(ticket: Ticket, arrived_as: int, collect: int, late: bool, late_by: float | None) -> None:
    """Raise on a rank that took part in an abandoned sync, naming the ranks that never arrived.

    Each such rank writes its arrival slot; the first rank that gave up (``collect``: how many had arrived by then)
    reads the slots and publishes the missing ranks, so that every rank's message names them.
    """
    layout, store = ticket.layout, ticket.store
    ticket.store_op(store.set, f"{ticket.prefix}at/{arrived_as}", str(layout.rank))
    if collect:
        slots = [f"at/{i}" for i in range(1, collect + 1)]
        ticket.wait_keys(slots, _ERROR_PATH_WAIT)
        present = {
            int(ticket.store_op(store.get, ticket.prefix + s))
            for s in slots
            if ticket.store_op(store.check, [ticket.prefix + s])
        }
        missing = [r for r in range(layout.world) if r not in present]
        ticket.store_op(store.set, ticket.prefix + "missing", json.dumps(missing))
    missing_ranks: list[int] = []
    if ticket.wait_keys(["missing"], _ERROR_PATH_WAIT):
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


def _raise_mismatch(ticket: Ticket, record: Callable[[], dict[str, Any]]) -> None:
    """Raise the same error on every rank: which fields of the ranks' records differ, and each rank's value."""
    layout, store = ticket.layout, ticket.store
    ticket.store_op(store.set, f"{ticket.prefix}rec/{layout.rank}", json.dumps(record(), sort_keys=True))
    if layout.rank == 0:
        keys = [f"rec/{r}" for r in range(layout.world)]
        why = "(the ranks' descriptions could not be collected)"
        if ticket.wait_keys(keys, _ERROR_PATH_WAIT):
            records = [json.loads(v) for v in ticket.store_op(store.multi_get, [ticket.prefix + k for k in keys])]
            why = describe_differences(records, layout)
        ticket.store_op(store.set, ticket.prefix + "why", why)
    why = "(rank 0 did not explain the difference)"
    if ticket.wait_keys(["why"], _ERROR_PATH_WAIT):
        why = ticket.store_op(store.get, ticket.prefix + "why").decode()
    msg = (
        f"{ticket.what} ({ticket.identity!r}): the ranks disagree on {why}\nConstruct the metric with the same"
        " arguments on every rank and feed it inputs of the same kind."
    )
    raise MetricSyncError(msg)


def describe_differences(records: list[dict[str, Any]], layout: GroupLayout) -> str:
    """``"`max_fpr` (config), so ...:"`` plus one line per rank with its values of the differing fields."""
    differing: list[tuple[str, str]] = []
    for section in sorted({s for r in records for s in r}):
        fields = sorted({f for r in records for f in r.get(section, {})})
        for name in fields:
            values = [json.dumps(r.get(section, {}).get(name)) for r in records]
            if len(set(values)) > 1:
                differing.append((section, name))
    names = ", ".join(f"`{name}` ({section})" for section, name in differing) or "their description"
    rows = [
        f"  {layout.describe(r)}: "
        + "{"
        + ", ".join(f"{name!r}: {rec.get(section, {}).get(name)!r}" for section, name in differing)
        + "}"
        for r, rec in enumerate(records)
    ]
    return f"{names}, so their states cannot be combined:\n" + "\n".join(rows)


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
