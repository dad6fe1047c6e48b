"""The work objects of this process's collectives, kept until its next sync so that no backend thread frees them.

Why: a ``torch.distributed`` work object owns the tensors of its collective. gloo runs every collective on a worker
thread that drops its own reference to the work when it is done, *after* ``work.wait()`` has returned here. When
that reference is the last one, the worker thread frees the tensors, and freeing a tensor that Python created takes
the GIL. If the interpreter is shutting down at that moment (a process that exits right after a sync, without
``destroy_process_group()``: a Lightning ``ddp_spawn`` worker on gloo, a script that ends after ``compute()``),
CPython ends the worker thread with ``pthread_exit`` inside a C++ destructor and the process aborts with
``terminate called without an active exception``. On torch 2.13 that aborted about one run in three (two ranks
that exit right after plain ``dist.all_gather`` calls), and 10-25% of runs that exited right after this package's
``compute()`` (``tests/test_exit.py``).

Keeping the work objects here until the next sync starts makes this process's main thread, not the backend's
thread, drop the last reference: at the next sync, or during interpreter shutdown (where the main thread may take
the GIL). Works that have not completed (a collective abandoned after a timeout) are kept until they complete,
since their worker thread may still finish them at any time. The cost is memory: the buffers of the last sync
(e.g. the gathered predictions) stay allocated until the next sync of any metric of the package in this process.
"""

from __future__ import annotations

from typing import Any

_KEPT: dict[int, Any] = {}  # by id(): a kept work is alive, so its id is its own


def keep(work: Any) -> Any:
    """Keep ``work`` (a ``torch.distributed`` work object) until a later sync finds it completed; return it.

    A work is kept once, however often it is passed: a sync keeps the works it starts together (so that those left
    unwaited after one fails are kept too), and :func:`~torchmetrics_varlen._dist.transport.wait` keeps every work it
    waits for.
    """
    if work is not None:
        _KEPT.setdefault(id(work), work)
    return work


def release_finished() -> None:
    """At the start of a sync: drop the works of earlier syncs that completed (their backend threads are done)."""
    for key in [key for key, work in _KEPT.items() if _completed(work)]:
        del _KEPT[key]


def kept() -> int:
    """How many work objects are kept now (for tests)."""
    return len(_KEPT)


def _completed(work: Any) -> bool:
    try:
        return bool(work.is_completed())
    except RuntimeError:  # pragma: no cover - a backend that cannot tell: assume done
        return True
