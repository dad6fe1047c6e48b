"""The records of one guarded sync, passed between the rooms of ``_dist`` and to the metrics: typed, never pickled.

Architecture of a sync (each room at most a few hundred lines; the metrics see :mod:`.exchange`, the facade):

- ``records.py`` (here): what a sync is (:class:`SyncRequest`), what the ranks agree on (:class:`Agreed`,
  :class:`StateLayout`, :class:`Layout`), what each reported (:class:`RankMeta`, its counters keyed by the
  ``INFO_*`` names) and what a sync returns (:class:`CheckedIn`, :class:`Gathered`); plus the wire format's
  constants (dtype codes, alignment);
- ``metadata.py``: the check-in (``checkin.py``) and the one metadata all-gather, and the ranks' agreement;
- ``transport.py``: packing, the data exchange (gloo broadcasts, NCCL all-gather, point-to-point to one rank),
  the all-reduce of summed states, and the deadline-bounded ``wait`` every collective goes through;
- ``value.py``: one computed value, from one rank to the others;
- ``shard.py``: the collectives of the sharded compute (a sample sort); the metric passes its per-range math in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

import torch
from torch import Tensor

from torchmetrics_varlen._dist.checkin import Ticket
from torchmetrics_varlen._dist.group import GroupLayout

_ALIGN = 16  # the widest element (complex128): every piece can be viewed in its dtype
_MAX_DIMS = 8  # trailing dimensions a cat state may have
# Dtypes by wire code (the position in this tuple). Others (uint16-64, float8, complex32, quantized) cannot be synced.
_DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
)

# Names of the per-rank counters (``info``) that the sync machinery itself reads. ``info`` stays a mapping of names to
# small integers: a metric adds its own counters (the ledger's, a wrapper's), and a collection's joint sync prefixes
# every member's names; the metadata all-gather sends them in name order.
INFO_NUM_SAMPLES: Final = "num_samples"  # samples this rank holds (the package's metrics)
INFO_REUSES: Final = "reuses"  # digest of the compute-group sync this rank could reuse (0: none)
INFO_COMPACT: Final = "compact"  # whether this rank's scores fit compact sort keys (sharded compute)

Info = dict[str, int]


def nbytes(rows: int, trailing: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes of ``rows`` rows of ``trailing`` shape in ``dtype`` on the wire, rounded up to the alignment."""
    raw = rows * math.prod(trailing) * dtype.itemsize
    return -(-raw // _ALIGN) * _ALIGN


@dataclass(frozen=True)
class SyncRequest:
    """Who syncs, and how to talk about it: the same on every rank for the same sync."""

    layout: GroupLayout
    identity: str
    config: dict[str, Any]
    timeout: float | None
    what: str
    fix: str
    epoch: int = 0  # resets of the metric so far: syncs of different epochs never pair
    version: int | None = None  # changes with the states within the epoch (None: every call syncs new states)


@dataclass(frozen=True)
class Agreed:
    """A setting the ranks must agree on once they have one: ``value`` ``None`` (not decided yet) agrees with any."""

    value: str | None
    choices: tuple[str, ...]

    def code(self) -> int:
        return -1 if self.value is None else self.choices.index(self.value)


@dataclass(frozen=True)
class StateLayout:
    """One rank's cat state: element dtype, trailing shape (everything after dim 0) and number of rows."""

    dtype: torch.dtype
    trailing: tuple[int, ...]
    rows: int

    @classmethod
    def of(cls, pieces: list[Tensor]) -> StateLayout:
        """The layout of a state given as its stored batches (at least one, possibly empty)."""
        dtype = pieces[0].dtype
        for piece in pieces[1:]:
            dtype = torch.promote_types(dtype, piece.dtype)
        shaped = next((p for p in pieces if p.shape[0]), pieces[0])
        return cls(dtype, tuple(shaped.shape[1:]), sum(int(p.shape[0]) for p in pieces))

    def describe(self) -> str:
        return f"dtype {self.dtype}, trailing shape {self.trailing}, {self.rows} rows"


@dataclass(frozen=True)
class RankMeta:
    """What one rank reported in the metadata all-gather."""

    states: dict[str, StateLayout]
    info: Info
    modes: dict[str, str | None]


@dataclass
class Outbox:
    """This rank's states as they leave it, packed before the metadata all-gather (taken by the data exchange).

    ``rows``: the cat states' bytes (in name order, each state 16-byte aligned, in this rank's own dtypes) on the
    communication device; ``summed``: the summed states flattened into their wire dtype. ``None`` until packed.
    """

    rows: Tensor | None = None
    summed: Tensor | None = None


@dataclass(frozen=True)
class Layout:
    """The layout every rank agreed on for one cat state: the common dtype and the trailing shape."""

    dtype: torch.dtype
    trailing: tuple[int, ...]


@dataclass(frozen=True)
class CheckedIn:
    """What every rank knows after the check-in and the metadata all-gather (the same on every rank), and this
    rank's packed states (``outbox``).
    """

    ticket: Ticket
    ranks: list[RankMeta]
    layouts: dict[str, Layout] = field(default_factory=dict)
    outbox: Outbox = field(default_factory=Outbox)

    @property
    def info(self) -> list[dict[str, int]]:
        """Every rank's counters, in rank order."""
        return [r.info for r in self.ranks]

    def rows(self, name: str) -> list[int]:
        """Rows of cat state ``name`` on every rank."""
        return [r.states[name].rows for r in self.ranks]


@dataclass(frozen=True)
class Gathered:
    """What one sync returns: the combined states and what every rank reported.

    ``cat`` holds one tensor per cat state, or, with ``concat=False``, one list of per-rank pieces (views of the
    received buffer, no copy; ranks without rows left out, at least one piece).
    """

    cat: dict[str, Tensor | list[Tensor]]
    summed: dict[str, Tensor]
    checked: CheckedIn
