"""Where a metric's sync stands (:class:`Place`), and a sync that every rank entered (:class:`Ticket`): its store
keys, its deadline, and the error of a step after the check-in that failed (which names the ranks that stopped
responding).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from torchmetrics_varlen._dist.errors import MetricSyncError
from torchmetrics_varlen._dist.group import GroupLayout

FOREVER = 3600.0  # sync_timeout=None: wait in slices of an hour
ERROR_PATH_WAIT = 2.0  # seconds the error paths wait for the (live) ranks' keys


def lost_store(err: BaseException, layout: GroupLayout, what: str) -> MetricSyncError:
    msg = (
        f"{what} on {layout.describe(layout.rank)} lost the connection to the process group's store ({err})."
        " The store is served by global rank 0's process under env:// and torch.multiprocessing.spawn (by the"
        " launcher agent under torchrun): that process has probably exited or crashed, and the job cannot"
        " synchronise any more. Look for the first error of global rank 0."
    )
    return MetricSyncError(msg)


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
            raise lost_store(err, self.layout, self.what) from err

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
            slice_s = FOREVER if seconds is None else max(seconds, 0.001)
            try:
                store.wait(full, datetime.timedelta(seconds=slice_s))
            except dist.DistStoreError:
                if seconds is None:
                    continue
                return False
            except RuntimeError as err:
                raise lost_store(err, self.layout, self.what) from err
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
            deadline = time.monotonic() + ERROR_PATH_WAIT
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
            return lost_store(err, layout, self.what)
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
