"""The sampler padding rule: which rows of a batch a ``DistributedSampler`` added as padding, and when a count of
dropped rows shows that ``dataset_size`` is not the sampler's. Pure functions, no ``torch.distributed``.

``DistributedSampler`` deals sample ``j`` of rank ``r`` (of ``W``) from global position ``j * W + r`` of its
(possibly shuffled) index list and pads the list to a multiple of ``W`` by repeating its head: positions
``>= dataset_size`` are the padding. Each rank knows ``j``, ``r`` and ``W`` at update time, so the padding is dropped
before it is ever stored (the ledger, ``_core/ledger.py``, keeps the positions and cuts each batch).
"""

from __future__ import annotations


def sampler_kept_rows(start: int, rows: int, rank: int, world: int, dataset_size: int) -> int:
    """How many of ``rows`` consecutive samples, the first being this rank's ``start``-th, are not sampler padding.

    Positions grow with the sample index, so the real samples are always a prefix of the batch.

    Example:
        >>> sampler_kept_rows(start=2, rows=2, rank=1, world=3, dataset_size=8)  # positions 7 and 10
        1
    """
    # (start + i) * world + rank < dataset_size  <=>  start + i < ceil((dataset_size - rank) / world)
    limit = -(-(dataset_size - rank) // world)
    return max(0, min(rows, limit - start))


def check_padding(
    what: str, dataset_size: int | None, world: int, padding: list[int], rank: int | None = None, rejected: int = 0
) -> None:
    """Raise if more rows were dropped as padding than a ``DistributedSampler`` over ``dataset_size`` samples adds.

    Such a sampler deals every rank ``ceil(dataset_size / W)`` rows: the last ``W * ceil(dataset_size / W) -
    dataset_size`` positions (fewer than ``W``) are padding, at most one a rank. More means that ``dataset_size`` is
    not the sampler's (``len(loader)`` passed for ``len(dataset)``), that the sampler is another one, or that a second
    pass over the data was fed without ``reset()``: the value would silently leave out real samples. ``padding``:
    every rank's count of rows dropped, or (``rank``) this rank's alone; ``rejected``: the rows of refused batches
    among them (a refused batch fed again deals its rows twice: the message then names that cause first).

    Example:
        >>> check_padding("VarlenAUROC", 10, 2, [1, 0])  # 10 samples on 2 ranks: 5 rows each, no padding needed
        >>> check_padding("VarlenAUROC", 10, 2, [1, 1])
        Traceback (most recent call last):
        ...
        ValueError: VarlenAUROC(dataset_size=10): 2 rows were dropped as sampler padding (per rank: [1, 1]), ...
    """
    total = sum(padding)
    if dataset_size is None or (max(padding, default=0) <= min(1, world - 1) and (rank is not None or total < world)):
        return
    where = f" on rank {rank}" if rank is not None else f" (per rank: {padding})" if world > 1 else ""
    refused = (
        f" {rejected} rows were in batches that update() refused, and a refused batch keeps its sampler positions:"
        " feeding it again (fixed) deals its rows twice. Skip a refused batch instead of feeding it again."
        if rejected
        else ""
    )
    msg = (
        f"{what}(dataset_size={dataset_size}): {total} rows were dropped as sampler padding{where}, but a"
        f" DistributedSampler over {dataset_size} samples on {world} rank(s) adds at most {world - 1} (one a rank at"
        f" most), so real samples would be left out.{refused} {'Other' if rejected else 'The likely'} causes:"
        " `dataset_size` set to len(loader), the number of batches, instead of len(dataset), the number of samples;"
        " or a second pass over the data without reset() between the epochs. A sampler other than"
        " DistributedSampler does not follow its padding rule:"
        " pass `sample_ids` (or no dataset_size) there. Nothing was evaluated; after reset() the next epoch starts"
        " afresh."
    )
    raise ValueError(msg)
