"""The sync every metric of the package goes through: one guarded check-in and one exchange, inside torchmetrics'
own ``sync`` / ``compute`` machinery (its result cache and ``unsync`` included).

A metric says what it sends (``_sync_payload``) and what it does with what comes back (``_sync_receive``);
:class:`GuardedMetric` does the rest:

- ``_sync_dist`` (torchmetrics calls it from ``sync()``, in place of its per-state gathers) checks in and exchanges
  the payload, or takes the result that a collection-level sync (``_core/joint.py``) already fetched for it;
- metrics holding the very same state objects (the members of a ``MetricCollection`` compute group) each check in,
  but reuse one data exchange when every rank can (``SHARED_SYNCS``);
- ``_wrap_compute`` puts the local states back when the computation fails after the sync (torchmetrics' sync context
  would leave them synced, and the next ``compute()`` would fail with "already synced"), and silences torchmetrics'
  "compute before update" warning on a rank that legitimately saw no data.
"""

from __future__ import annotations

import functools
import hashlib
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torchmetrics import Metric

from torchmetrics_varlen._core.rollback import restore, snapshot
from torchmetrics_varlen._dist.checkin import identity_qualifier, leave_epoch, new_identity
from torchmetrics_varlen._dist.exchange import (
    Agreed,
    CheckedIn,
    Gathered,
    SyncRequest,
    check_in_states,
    exchange_states,
)
from torchmetrics_varlen._dist.group import GroupLayout, distributed_available, group_position

if TYPE_CHECKING:
    from torchmetrics_varlen._core.ledger import Ledger

# What the metric classes, ``Varlen`` and ``VarlenCollection`` use of the transport: through this seam only.
__all__ = [
    "SHARED_SYNCS",
    "CheckedIn",
    "Gathered",
    "GroupLayout",
    "GuardedMetric",
    "Agreed",
    "Payload",
    "SyncRequest",
    "distributed_available",
    "group_position",
    "leave_epoch",
    "new_identity",
]


@dataclass
class Payload:
    """What one metric sends in a sync: cat states as stored pieces, summed states, small per-rank counters
    (``info``), settings the ranks must agree on (``modes``), and where the result goes (``dst``: one rank, or all).
    """

    cat: dict[str, list[Tensor]]
    device: torch.device
    summed: dict[str, Tensor] = field(default_factory=dict)
    info: dict[str, int] = field(default_factory=dict)
    modes: dict[str, Agreed] = field(default_factory=dict)
    dst: int | None = None


def _fingerprint(obj: Any) -> Any:
    """What tells whether a state changed since a sync: a list's items (stored batches are never written in place,
    so the same tensors in the same order are the same data), a copy of a tensor's values (summed states are written
    in place; they are small: counts per bin, at most a 16-bit histogram per class).
    """
    if isinstance(obj, list):
        return list(obj)  # (the items themselves: held, so that their ids cannot be reused by other tensors)
    return obj.detach().clone() if isinstance(obj, Tensor) else None


def _unchanged(kept: list[Any], objs: list[Any]) -> bool:
    """Whether the states ``objs`` hold what they held when ``kept`` (their :func:`_fingerprint`) was taken."""
    for before, obj in zip(kept, objs, strict=True):
        if isinstance(obj, list):
            if len(before) != len(obj) or any(a is not b for a, b in zip(before, obj, strict=True)):
                return False
        elif not (
            isinstance(obj, Tensor)
            and before.shape == obj.shape
            and before.dtype == obj.dtype
            and before.device == obj.device
            and torch.equal(before, obj)
        ):
            return False
    return True


@dataclass(frozen=True)
class SharedSync:
    """A sync's received states, kept for the other members of a compute group, and the sync's key prefix."""

    cat: dict[str, Tensor | list[Tensor]]
    summed: dict[str, Tensor]
    prefix: str

    def token(self) -> int:
        """A 60-bit digest of the prefix: what each rank reports to say which sync it could reuse."""
        return int(hashlib.sha1(self.prefix.encode()).hexdigest()[:15], 16)


@dataclass
class _Entry:
    objs: list[Any]  # the state objects synced (a compute group's members hold the very same objects)
    kept: list[Any]  # their fingerprints at the sync
    shared: SharedSync
    metric: weakref.ref[Any]  # the metric that synced them: its entry goes with it


class _SharedSyncs:
    """Syncs that the metrics of one torchmetrics compute group share (AUROC, AP, curves in one collection).

    Metrics of a compute group hold the very same state objects, so the first of them to compute syncs and the
    others reuse its result, as long as those states hold what they held then (:func:`_fingerprint`). An entry is
    keyed by its compute group (the ids of its state objects, what decides the sync, the process group) and lives
    from its sync until the next ``update()`` or ``reset()`` of a metric holding those states (:meth:`forget`), a
    newer sync of states of the same kind, or the metric that synced them, whichever comes first: an update of
    another metric changes nothing here. So after an evaluation at most one gathered copy per compute group stays
    alive, until the group's next ``update()`` frees it. An entry holds the received states and the sync's key
    prefix, never the process group or its store, so it cannot keep either alive past ``destroy_process_group()``.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], _Entry] = {}

    def __bool__(self) -> bool:
        return bool(self._entries)

    def find(self, key: tuple[Any, ...], objs: list[Any]) -> SharedSync | None:
        """The sync of exactly these state objects, if they have not changed since."""
        self._drop_dead()
        entry = self._entries.get(key)
        if entry is None or any(a is not b for a, b in zip(entry.objs, objs, strict=True)):
            return None
        return entry.shared if _unchanged(entry.kept, objs) else None

    def drop_superseded(self, key: tuple[Any, ...]) -> None:
        """Forget older syncs of the same kind, so that their buffers are freed before a new one is allocated."""
        for stale in [k for k in self._entries if k[1:] == key[1:]]:
            del self._entries[stale]

    def keep(self, key: tuple[Any, ...], metric: Any, objs: list[Any], result: Gathered) -> None:
        """Remember a sync for the other metrics of the compute group."""
        shared = SharedSync(result.cat, result.summed, result.checked.ticket.prefix)
        self._entries[key] = _Entry(list(objs), [_fingerprint(o) for o in objs], shared, weakref.ref(metric))

    def forget(self, metric: Any) -> None:
        """Forget the syncs of ``metric``'s states (its update or reset is changing them); no other metric's."""
        if not self._entries:
            return
        state = metric.__dict__
        mine = [state[name] for name in metric._defaults if name in state]
        for key, entry in list(self._entries.items()):
            if entry.metric() is None or any(o is m for o in entry.objs for m in mine):
                del self._entries[key]

    def _drop_dead(self) -> None:
        for key in [k for k, e in self._entries.items() if e.metric() is None]:
            del self._entries[key]


SHARED_SYNCS = _SharedSyncs()


def check_sync_key(sync_key: object) -> None:
    """Raise unless ``sync_key`` (a metric's or a collection's) is ``None`` or a non-empty string without ``/``."""
    if sync_key is not None and (not isinstance(sync_key, str) or not sync_key or "/" in sync_key):
        msg = f"Expected argument `sync_key` to be a non-empty string without '/', or None, but got {sync_key!r}."
        raise ValueError(msg)


class GuardedMetric(Metric):
    """A ``Metric`` whose states sync in one guarded exchange; see the module docstring."""

    sync_timeout: float | None
    _config: dict[str, Any]
    _ledger: Ledger  # the sample ledger: positions, counters, the report and its warning (``_core/ledger.py``)
    _sync_base: str
    _sync_identity: str
    _sync_qualifier: str = ""
    _pending_sync: Gathered | None = None
    _sync_epoch: int = 0  # reset() calls so far (not forward()'s internal ones): the epoch of the metric's syncs
    _in_forward: int = 0  # forward() calls under way: their reset() is no new epoch, their value no evaluation
    _synced = False  # whether the states are every rank's (from a sync until its unsync), as torchmetrics tracks it

    def _init_sync(self, sync_key: str | None) -> None:
        """Give the metric its sync identity: ``sync_key``, or its class and creation order (see ``checkin.py``)."""
        check_sync_key(sync_key)
        self._sync_base = sync_key or self._sync_name()
        # Metrics on a subgroup or that never sync on compute() count apart: other ranks may not create them.
        self._sync_qualifier = identity_qualifier(self.process_group, self.sync_on_compute)
        self._sync_identity = new_identity(self._sync_base, self._sync_qualifier)
        self._pending_sync = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy (``deepcopy``, ``clone``, unpickling in a spawned process) is a new metric: a new identity, and
        tensor states of its own (:func:`own_tensor_states`).
        """
        super().__setstate__(state)
        self._sync_identity = new_identity(self._sync_base, getattr(self, "_sync_qualifier", ""))
        own_tensor_states(self)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        """As torchmetrics'; the loaded states are the metric's own: its tensors (:func:`own_tensor_states`) and its
        lists (torchmetrics installs the state_dict's list objects, which the next batches would append to: the same
        state_dict loaded again, into this metric or another, would hold them too).
        """
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        own_tensor_states(self)
        own_list_states(self)

    # ------------------------------------------------------------------ hooks

    def _sync_name(self) -> str:
        """How errors and the default identity name this metric."""
        return type(self).__name__

    def _sync_payload(self) -> Payload:
        """What this rank sends."""
        raise NotImplementedError

    def _sync_receive(self, result: Gathered) -> None:
        """Install the synced states (the sync's own view, or a compute-group member's / a collection's)."""
        raise NotImplementedError

    def _sync_share_key(self) -> tuple[list[Any], str] | None:
        """The state objects a compute-group member's sync can be reused for, and what else must match."""
        return None

    def _sync_alias_key(self) -> tuple[list[Any], str] | None:
        """The state objects this metric's payload is made of, and what else decides it: in a joint sync, a metric
        with the same key on a rank sends nothing there and takes the other's rows (``_core/joint.py``).
        """
        return self._sync_share_key()

    def _joins_collection_sync(self) -> bool:
        """Whether a collection-level sync may fetch this metric's states (not when it gathers to one rank)."""
        return True

    def _synced_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        """The computation run inside torchmetrics' compute wrapper (default: ``compute`` itself)."""
        return compute

    def _after_compute(self) -> None:
        """Runs after every ``compute()``, whatever happened."""

    # ------------------------------------------------------------------ sync

    def _sync_fix(self) -> str:
        name = self._sync_name()
        return (
            f"Call {name}.compute() (or log the metric) on every rank of its process group, not only on rank 0. To"
            " compute on one rank only, every rank still calls compute(): pass compute_on_rank=0 so that only rank 0"
            " receives the data (sync_on_compute=False would give each rank the value of its own samples only). If"
            " the ranks create their metrics in different orders, give each metric the same `sync_key` on every rank."
        )

    def _request(self, process_group: Any | None) -> SyncRequest:
        return SyncRequest(
            layout=GroupLayout.of(process_group or self.process_group),
            # forward()'s batch syncs (dist_sync_on_step) are placed apart from compute()'s: a rank with one batch
            # more or less then fails that batch's sync, and never pairs its batch with another rank's compute()
            identity=self._sync_identity + ("#step" if self._in_forward else ""),
            config=self._config,
            timeout=self.sync_timeout,
            what=f"{self._sync_name()}.{'forward' if self._in_forward else 'compute'}()",
            fix=self._sync_fix(),
            epoch=self._sync_epoch,
            # forward()'s batch value (dist_sync_on_step) syncs one batch each time: always new states
            version=None if self._in_forward else int(self._update_count),
        )

    # ------------------------------------------------------------------ epochs

    @torch.jit.unused
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Torchmetrics' ``forward``; the ``reset()`` it makes inside starts no new epoch of the metric's syncs, and
        a call that raises (a refused batch) leaves the states as they were (torchmetrics' would leave them reset).
        """
        self._in_forward += 1
        before = snapshot(self, update=False)  # torchmetrics' forward resets before it updates
        try:
            return super().forward(*args, **kwargs)
        except BaseException:
            restore(self, before, self._forward_rows(args, kwargs))
            raise
        finally:
            self._in_forward -= 1
            self._synced = False  # torchmetrics' forward keeps the batch's synced value but not its states

    def _forward_rows(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        """The rows (sampler positions) of a ``forward`` call's batch; ``None``: not known here."""
        return None

    def reset(self) -> None:
        """Torchmetrics' ``reset``; each call (outside ``forward``) starts a new epoch of the metric's syncs, so that
        a sync never pairs one rank's states of one epoch with another rank's of another.
        """
        SHARED_SYNCS.forget(self)  # before its states are replaced: the syncs of these states
        if not self._in_forward:
            if self.sync_on_compute:  # ranks still waiting at this epoch's sync learn at once that it left
                leave_epoch(self.process_group, self._sync_identity, self._sync_epoch)
            self._sync_epoch += 1
        fresh_lists(self)
        super().reset()
        self._synced = False

    def _sync_dist(self, dist_sync_fn: Callable[..., Any] | None = None, process_group: Any | None = None) -> None:
        """One guarded check-in and one exchange (replaces torchmetrics' per-state gathers; ``dist_sync_fn`` is not
        used), or the result a collection-level sync fetched for this metric.
        """
        pending, self._pending_sync = self._pending_sync, None
        result = pending if pending is not None else self._exchange(self._request(process_group))
        if result is not None:
            self._sync_receive(result)
        self._synced = True

    def unsync(self, should_unsync: bool = True) -> None:
        """Torchmetrics' ``unsync``: the states are this rank's own again."""
        super().unsync(should_unsync)
        if should_unsync:
            self._synced = False

    def _exchange(self, request: SyncRequest) -> Gathered | None:
        """Sync this metric's payload, or reuse the sync another compute-group member just did on these states.

        Every metric checks in, whether it reuses or not: torchmetrics forms compute groups on each rank from that
        rank's first batch (a rank without data forms none), so whether a metric can reuse a sync may differ from
        rank to rank. Each rank reports which sync it could reuse (``reuses``: a digest of that sync's key, 0 for
        none); the data moves again unless every rank could reuse the very same sync.
        """
        payload = self._sync_payload()
        share = self._sync_share_key()
        key: tuple[Any, ...] | None = None
        found: SharedSync | None = None
        if share is not None:
            key = (tuple(id(o) for o in share[0]), share[1], request.layout.name)
            found = SHARED_SYNCS.find(key, share[0])
        token = found.token() if found is not None else 0
        checked = check_in_states(
            request,
            payload.cat,
            payload.summed,
            device=payload.device,
            info={**payload.info, "reuses": token},
            modes=payload.modes,
        )
        if found is not None and all(i["reuses"] == token for i in checked.info):
            return Gathered(found.cat, found.summed, checked)
        if key is not None:
            SHARED_SYNCS.drop_superseded(key)
        result = exchange_states(
            checked, payload.cat, payload.summed, device=payload.device, dst=payload.dst, concat=False
        )
        if share is not None and key is not None:
            SHARED_SYNCS.keep(key, self, share[0], result)
        return result

    # ------------------------------------------------------------------ compute

    def _wrap_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        """Torchmetrics' compute wrapper (sync context, result cache) around the strategy's compute.

        Plus: no "compute before update" warning on a rank that legitimately saw no data, and if the computation
        fails after the sync, the states are put back.
        """
        wrapped = super()._wrap_compute(self._synced_compute(compute))

        @functools.wraps(compute)
        def wrapped_compute(*args: Any, **kwargs: Any) -> Any:
            try:
                if self._update_count or not (self.sync_on_compute and distributed_available()):
                    return wrapped(*args, **kwargs)
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=r"The ``compute`` method of metric", category=UserWarning)
                    return wrapped(*args, **kwargs)
            except BaseException:
                if self._synced:
                    self.unsync()
                raise
            finally:
                self._pending_sync = None
                self._after_compute()

        return wrapped_compute


def own_tensor_states(metric: Metric) -> None:
    """Give ``metric`` tensor states of its own (clones), as the batches add to them in place (``state += n``, as
    torchmetrics' metrics do): a metric unpickled in a process spawned per rank (its tensors may share one memory
    across the ranks) and one loaded from a ``state_dict`` (whose tensors share memory with the saved metric's) would
    otherwise count into another metric's states.
    """
    for name in metric._defaults:
        value = metric.__dict__.get(name)
        if isinstance(value, Tensor):
            setattr(metric, name, value.clone())


def own_list_states(metric: Metric) -> None:
    """Give ``metric`` list states of its own (shallow copies) after ``load_state_dict``: torchmetrics installs the
    state_dict's list objects, which the metric's next batches would append to (the same state_dict loaded again
    would hold them too). Not for copies: ``deepcopy`` keeps the lists a compute group's members share.
    """
    for name, default in metric._defaults.items():
        value = metric.__dict__.get(name)
        if isinstance(default, list) and isinstance(value, list):
            setattr(metric, name, list(value))


def fresh_lists(metric: Metric) -> None:
    """Give ``metric``'s list states new lists before its ``reset()``, which empties them in place (torchmetrics'):
    the members of a compute group share those lists, and one member's reset must not empty another's states (a loop
    that computes and resets the members of a collection one by one).
    """
    for name, default in metric._defaults.items():
        if isinstance(default, list):
            setattr(metric, name, [])
