"""Timing and peak-memory helpers shared by the benchmarks (not part of the package)."""

from __future__ import annotations

import datetime
import gc
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size of this process, now."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


def _high_water_mark() -> int | None:
    """Peak RSS of this process since the last reset (Linux ``VmHWM``), or ``None`` where unavailable."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_high_water_mark() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # Linux: reset VmHWM to the current RSS
    except OSError:
        return False
    return True


class PeakRSS:
    """Peak resident memory inside the block; ``extra`` is the peak above the level at entry.

    On Linux the kernel's high-water mark is reset at entry and read at exit (exact); elsewhere the RSS is sampled
    every millisecond in a thread.
    """

    def __enter__(self) -> PeakRSS:
        gc.collect()
        self.base = rss_bytes()
        self.peak = self.base
        self._exact = _reset_high_water_mark() and _high_water_mark() is not None
        self._stop = False
        self._thread = threading.Thread(target=self._watch, daemon=True)
        if not self._exact:
            self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.001)

    def __exit__(self, *exc: Any) -> None:
        self._stop = True
        if self._exact:
            self.peak = max(self.peak, _high_water_mark() or 0)
        else:
            self._thread.join()
        self.peak = max(self.peak, rss_bytes())

    @property
    def extra(self) -> int:
        return self.peak - self.base


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``repeats`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the OS just reported free."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def init_gloo(rank: int, world: int, port: int) -> None:
    """Join a gloo process group over a TCP store on 127.0.0.1 (as torchrun, Lightning and Accelerate use; a
    FileStore polls every 10 ms in its wait), with a 600 s collective timeout.
    """
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=600),
    )
