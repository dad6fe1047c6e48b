"""The package's one exception type (and its form for a bad-input error raised on another rank)."""

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


class RemoteValueError(MetricSyncError, ValueError):
    """A ``ValueError`` (bad input, such as one sample id with two targets) raised by the computation on another
    rank (``compute_on_rank``), re-raised here: a :class:`MetricSyncError` quoting it, and also a ``ValueError``, so
    that ``except ValueError`` catches it on every rank as it does on the rank that found it.

    Example:
        >>> err = RemoteValueError("VarlenAUROC.compute(): the computation on rank 0 failed: ValueError: ...")
        >>> isinstance(err, MetricSyncError), isinstance(err, ValueError)
        (True, True)
    """
