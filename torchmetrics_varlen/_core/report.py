"""What a ``compute()`` evaluated: the public :class:`SyncReport` and how it is counted from every rank's counters.

The counters themselves (rows seen, padding dropped, rejected rows) are the ledger's (``_core/ledger.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SyncReport:
    """What the last ``compute()`` evaluated, counted in samples (rows of the ``update`` inputs).

    Attributes:
        world_size: Ranks whose data was combined (1 without a sync).
        seen_per_rank: Samples of the accepted ``update()`` calls of each rank, padding included.
        received: Samples that reached ``compute()`` after sampler padding was dropped (``dataset_size``).
        duplicates_dropped: Sampler padding plus repeated ``sample_ids`` that were not counted.
        kept: Distinct samples evaluated.
        missing: With ``dataset_size``: samples of the data set that no rank evaluated
            (``drop_last=True`` loses the tail; rejected batches count here too); ``None`` without ``dataset_size``.
        rejected: Samples of ``update()`` calls that raised a ``ValueError`` (bad input): not evaluated and not in
            ``seen_per_rank``, but they took their sampler positions, so the padding rule stays exact after them.

    Example:
        >>> from torch import tensor
        >>> from torchmetrics_varlen import VarlenAUROC
        >>> metric = VarlenAUROC(dataset_size=3)
        >>> ids = tensor([0, 1, 2, 0])  # sample 0 fed twice: counted once
        >>> metric.update(tensor([0.2, 0.7, 0.4, 0.2]), tensor([0, 1, 1, 0]), sample_ids=ids)
        >>> _ = metric.compute()
        >>> metric.sync_report
        SyncReport(world_size=1, seen_per_rank=(4,), received=4, duplicates_dropped=1, kept=3, missing=0, rejected=0)
    """

    world_size: int
    seen_per_rank: tuple[int, ...]
    received: int
    duplicates_dropped: int
    kept: int
    missing: int | None
    rejected: int = 0


def report_from_counts(
    info: list[dict[str, int]], kept: int | None, dataset_size: int | None, *, partial: bool
) -> SyncReport:
    """The report of one evaluation from every rank's counters (``rows_seen``, ``padding_dropped``, ``rejected``).

    ``kept`` is the number of distinct samples after id dedup (``None``: every received sample counts); ``partial``
    means a rank-local view of a multi-rank evaluation, for which nothing can be said to be missing.

    Example:
        >>> report_from_counts([{"rows_seen": 4, "padding_dropped": 1, "rejected": 0}], None, 3, partial=False)
        SyncReport(world_size=1, seen_per_rank=(4,), received=3, duplicates_dropped=1, kept=3, missing=0, rejected=0)
    """
    seen = tuple(i["rows_seen"] for i in info)
    padding = sum(i["padding_dropped"] for i in info)
    received = sum(seen) - padding
    kept = received if kept is None else kept
    return SyncReport(
        world_size=len(info),
        seen_per_rank=seen,
        received=received,
        duplicates_dropped=padding + received - kept,
        kept=kept,
        missing=None if dataset_size is None or partial else max(0, dataset_size - kept),
        rejected=sum(i["rejected"] for i in info),
    )
