"""Worker threads for the CPU passes over sorted keys (NumPy releases the GIL in its sorts and array loops).

The exact metrics on CPU spend their time in one sort of N integer keys and a few passes over them. Split at key
boundaries (:func:`split_points`), each part is sorted and summed on its own thread, as many parts as torch's
intra-op thread count allows (``torch.set_num_threads``). The results are integers or come back to the calling
thread in a fixed order, so they are the same bits for any number of threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")

# Keys per part below which splitting costs more than it saves (thread hand-off, the partition pass).
PART_MIN = 1 << 19
# At most this many parts (the sort is memory bound; more threads than this gain little).
MAX_PARTS = 8

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _forget_after_fork() -> None:
    """In a forked child: the parent's pool threads do not exist there (a copied pool would count its idle threads and
    wait on them forever), and the lock may have been held by a parent thread at the fork.
    """
    global _lock, _pool
    _lock, _pool = threading.Lock(), None


if hasattr(os, "register_at_fork"):  # no fork on Windows
    os.register_at_fork(after_in_child=_forget_after_fork)


def parts_for(n: int) -> int:
    """How many parts to split ``n`` keys into: a power of two, at most torch's thread count and
    :data:`MAX_PARTS`, each part at least :data:`PART_MIN` keys (1: no threads).
    """
    limit = min(torch.get_num_threads(), MAX_PARTS)
    parts = 1
    while parts * 2 <= limit and n // (parts * 2) >= PART_MIN:
        parts *= 2
    return parts


def _executor() -> ThreadPoolExecutor:
    """The package's pool (threads start on demand, at most :data:`MAX_PARTS`; how many run at once is how many
    items a call submits). A forked child makes its own (:func:`_forget_after_fork`).
    """
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(MAX_PARTS, thread_name_prefix="torchmetrics_varlen")
        return _pool


def run_all(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(item) for item in items]``, the items on worker threads when there are several (``fn`` must not call
    :func:`run_all` itself); the first exception is raised here.
    """
    todo = list(items)
    if len(todo) <= 1:
        return [fn(item) for item in todo]
    return list(_executor().map(fn, todo))
