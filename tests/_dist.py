"""The one multi-process helper: a pool of spawned CPU ranks reused across test cases.

Each case gets a fresh gloo process group (on a fresh prefix of one TCP store served by the pytest process, on a
port the OS picked), runs a module-level function on every rank once all of them are ready (imported and past a
barrier) and returns its results in rank order. A case that does not finish in time kills the pool and fails; a
rank that raises fails the case with every rank's traceback. Workers that died (some fault cases kill a rank on
purpose), and the other workers of such a case, are replaced before the next case.
"""

from __future__ import annotations

import datetime
import importlib.util
import inspect
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from multiprocessing import connection
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

MAX_WORLD = 4
_CTX = mp.get_context("spawn")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the OS just reported free (for process groups the tests start themselves)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RankOutcome:
    """What one rank did in a case: ``status`` is ``"ok"``, ``"error"`` or ``"died"``."""

    rank: int
    status: str
    value: Any = None
    error: str = ""
    seconds: float = 0.0


def _load(path: str) -> Any:
    name = "_case_" + os.path.splitext(os.path.basename(path))[0]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _worker(slot: int, tasks: Any, results: Any, port: int, tests_dir: str) -> None:
    sys.path.insert(0, tests_dir)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    while True:
        task = tasks.get()
        if task is None:
            return
        case_id, world, path, fn_name, args, pg_timeout = task
        started = time.monotonic()
        store = dist.PrefixStore(f"case{case_id}/", client)
        try:
            case = getattr(_load(path), fn_name)  # imported before the rendezvous: a fresh worker imports for seconds
            dist.init_process_group(
                "gloo", store=store, rank=slot, world_size=world, timeout=datetime.timedelta(seconds=pg_timeout)
            )
            # Every case starts with every rank ready, so a short sync_timeout measures the scenario, never a rank
            # that was still importing (a worker respawned after a fault case is seconds behind the others).
            dist.barrier()
            value = case(slot, world, *args)
            results.send((case_id, "ok", value, "", time.monotonic() - started))
        except BaseException as err:  # noqa: BLE001 - every failure goes back to the test
            text = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
            results.send((case_id, "error", None, text, time.monotonic() - started))
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()


class DistPool:
    """``MAX_WORLD`` spawned workers; a case of world size W runs on the first W of them."""

    def __init__(self) -> None:
        self._store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        self._procs: list[Any] = [None] * MAX_WORLD
        # One pipe per worker, which only that worker writes (a send returns once the result is in the pipe, with no
        # lock or feeder thread), so killing a worker never blocks the others' results, and its death reads as EOF.
        self._results: list[Any] = [None] * MAX_WORLD
        self._tasks: list[Any] = [None] * MAX_WORLD
        self._case = 0
        self._tests_dir = os.path.dirname(os.path.abspath(__file__))

    def _ensure(self, slot: int) -> None:
        proc = self._procs[slot]
        if proc is not None and proc.is_alive():
            return
        self._tasks[slot] = _CTX.Queue()
        self._results[slot], writer = _CTX.Pipe(duplex=False)
        proc = _CTX.Process(
            target=_worker,
            args=(slot, self._tasks[slot], writer, self._store.port, self._tests_dir),
            daemon=True,
        )
        proc.start()
        writer.close()  # the worker holds the only write end
        self._procs[slot] = proc

    def run(
        self,
        fn: Callable[..., Any],
        world: int,
        *args: Any,
        timeout: float = 120.0,
        pg_timeout: float = 30.0,
        allow_failure: bool = False,
    ) -> list[RankOutcome]:
        """Run ``fn(rank, world, *args)`` on ``world`` ranks; return each rank's outcome in rank order.

        Unless ``allow_failure``, any rank that raises or dies fails the calling test. A case still running after
        ``timeout`` seconds is a hang: the pool is killed and the test fails.
        """
        assert 1 <= world <= MAX_WORLD
        self._case += 1
        path = inspect.getfile(fn)
        for slot in range(world):
            self._ensure(slot)
            self._tasks[slot].put((self._case, world, path, fn.__name__, args, pg_timeout))
        outcomes: dict[int, RankOutcome] = {}
        deadline = time.monotonic() + timeout
        while len(outcomes) < world:
            waiting = {self._results[slot]: slot for slot in range(world) if slot not in outcomes}
            for conn in connection.wait(list(waiting), timeout=0.2):
                slot = waiting[conn]
                try:
                    case, status, value, error, seconds = conn.recv()
                except EOFError:  # the worker died
                    proc = self._procs[slot]
                    proc.join(timeout=5)
                    outcomes[slot] = RankOutcome(slot, "died", error=f"exit code {proc.exitcode}")
                    continue
                if case == self._case:
                    outcomes[slot] = RankOutcome(slot, status, value, error, seconds)
            if time.monotonic() > deadline and len(outcomes) < world:
                self.close()
                pending = sorted(set(range(world)) - set(outcomes))
                msg = f"{fn.__name__} on {world} ranks hung: ranks {pending} still running after {timeout} s"
                raise AssertionError(msg)
        result = [outcomes[r] for r in range(world)]
        if any(o.status == "died" for o in result):
            # The survivors may still hold a collective that waits for the dead rank; their destroy_process_group()
            # would block until pg_timeout (a minute, in the fault cases). Replace them: the next case respawns them.
            self.close(range(world))
        if not allow_failure and any(o.status != "ok" for o in result):
            details = "\n".join(f"--- rank {o.rank}: {o.status}\n{o.error}" for o in result if o.status != "ok")
            msg = f"{fn.__name__} failed on {world} ranks:\n{details}"
            raise AssertionError(msg)
        return result

    def values(self, fn: Callable[..., Any], world: int, *args: Any, **kwargs: Any) -> list[Any]:
        """Like :meth:`run` but every rank must succeed; returns their values."""
        return [o.value for o in self.run(fn, world, *args, **kwargs)]

    def close(self, slots: Iterable[int] | None = None) -> None:
        """Stop the workers in ``slots`` (default: every worker), killing those that do not stop."""
        for slot in range(MAX_WORLD) if slots is None else slots:
            proc = self._procs[slot]
            if proc is None:
                continue
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=5)
            self._procs[slot] = None


_COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_gather_single", "all_reduce", "broadcast", "barrier")
_OURS = ("all_gather_into", "broadcast", "all_reduce_sum", "all_to_all")


def count_syncs(
    fn: Callable[[], Any], names: tuple[str, ...] = _COLLECTIVES, per_name: bool = False
) -> tuple[Any, dict[str, int]]:
    """Run ``fn`` on a rank counting torch.distributed collectives and guard check-ins (both still run): the total
    under ``"collectives"`` and, with ``per_name``, each function's calls under its name.

    The package issues its collectives through ``_dist/collectives.py`` (on gloo straight on the group object, with a
    per-collective timeout; counted under ``collectives.<name>``): each counts once, whichever way it reaches the
    backend.
    """
    from torchmetrics_varlen._dist import collectives, metadata

    counts = {"collectives": 0, "check_ins": 0}
    inside = [0]  # a package collective in progress: its own torch.distributed call is not counted again
    originals = {name: getattr(dist, name) for name in names}
    ours = {name: getattr(collectives, name) for name in _OURS}
    original_check_in = metadata.check_in

    def wrap(original: Any, key: str, name: str = "", nested: bool = False) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not inside[0]:
                counts[key] += 1
                if name and per_name:
                    counts[name] = counts.get(name, 0) + 1
            inside[0] += nested
            try:
                return original(*args, **kwargs)
            finally:
                inside[0] -= nested

        return wrapper

    for name, original in originals.items():
        setattr(dist, name, wrap(original, "collectives", name))
    for name, original in ours.items():
        setattr(collectives, name, wrap(original, "collectives", f"collectives.{name}", nested=True))
    metadata.check_in = wrap(original_check_in, "check_ins")  # type: ignore[assignment]
    try:
        value = fn()
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
        for name, original in ours.items():
            setattr(collectives, name, original)
        metadata.check_in = original_check_in  # type: ignore[assignment]
    return value, counts


# torch's own gloo rendezvous keys of the default group (relative to the store given to init_process_group, as
# torch 2.13 names them): a group re-created under the same name reads them, and may connect to the old group's
# addresses and hang before this package runs at all. The harness clears them (and only them) between incarnations;
# the package's keys stay in the store, which is the case under test.
_GLOO_KEYS = "0//cpu//0/{rank}"  # "0": the default group's name; "cpu//0": the device's context


def _store_barrier(store: Any, world: int, key: str) -> None:
    store.add(key, 1)
    deadline = time.monotonic() + 30
    while int(store.add(key, 0)) < world:
        assert time.monotonic() < deadline, f"store barrier {key} timed out"
        time.sleep(0.01)


def harness_store() -> Any:
    """The store the harness gave init_process_group (torch wraps it in a PrefixStore named after the group, under
    which the package's keys and torch's gloo keys live).
    """
    from torchmetrics_varlen._compat import default_store

    return default_store().underlying_store


def reinit_default_group(store: Any, rank: int, world: int, tag: str) -> None:
    """destroy_process_group() then init_process_group() on the same store, with torch's own gloo address keys
    cleared in between (see _GLOO_KEYS), then a store rendezvous so every rank starts the round together.
    """
    dist.destroy_process_group()
    _store_barrier(store, world, f"test-reinit/{tag}/destroyed")
    if rank == 0:
        for r in range(world):
            assert store.delete_key(_GLOO_KEYS.format(rank=r)), "torch renamed its gloo keys: update _GLOO_KEYS"
    _store_barrier(store, world, f"test-reinit/{tag}/cleared")
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    _store_barrier(store, world, f"test-reinit/{tag}/ready")
