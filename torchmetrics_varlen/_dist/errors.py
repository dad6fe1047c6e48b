"""The package's one exception type."""

from __future__ import annotations


class MetricSyncError(RuntimeError):
    """The ranks of a process group could not synchronise a metric.

    Raised on every rank that can know: when some rank did not reach the sync within ``sync_timeout`` seconds
    (``missing_ranks`` lists them, by rank in the metric's process group), or when the ranks' states cannot be
    combined (different metric configuration, task, dtype family or trailing shape; the message shows each rank's
    value).

    Example:
        >>> err = MetricSyncError("VarlenAUROC.compute() on rank 0 waited 60 s ..., but rank 1 never arrived.")
        >>> err.missing_ranks = [1]
        >>> isinstance(err, RuntimeError), err.missing_ranks
        (True, [1])
    """

    missing_ranks: list[int]

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.missing_ranks = []
