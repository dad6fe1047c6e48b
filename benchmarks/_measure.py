"""Timing and peak-memory helpers shared by the benchmarks (not part of the package)."""

from __future__ import annotations

import gc
import os
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


class PeakRSS:
    """Sample the RSS every millisecond in a thread; ``extra`` is the peak above the level at entry."""

    def __enter__(self) -> PeakRSS:
        gc.collect()
        self.base = rss_bytes()
        self.peak = self.base
        self._stop = False
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.001)

    def __exit__(self, *exc: Any) -> None:
        self._stop = True
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
