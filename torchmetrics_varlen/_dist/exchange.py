"""One guarded sync: the check-in, one fixed-size metadata all-gather, then one data exchange for any number of states.

The facade of the sync's rooms (see ``records.py`` for the architecture): :func:`sync_states` does a whole sync;
the metrics that split it (a check-in whose data moves later, or never) call :func:`check_in_states` and
:func:`exchange_states` themselves. The records and functions of the rooms are re-exported here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchmetrics_varlen._dist.metadata import check_in_states
from torchmetrics_varlen._dist.records import (
    INFO_COMPACT,
    INFO_NUM_SAMPLES,
    INFO_REUSES,
    Agreed,
    CheckedIn,
    Gathered,
    Info,
    Layout,
    Outbox,
    RankMeta,
    StateLayout,
    SyncRequest,
)
from torchmetrics_varlen._dist.transport import all_gather_fixed, exchange_states, wait
from torchmetrics_varlen._dist.value import broadcast_value

__all__ = [
    "INFO_COMPACT",
    "INFO_NUM_SAMPLES",
    "INFO_REUSES",
    "CheckedIn",
    "Gathered",
    "Info",
    "Layout",
    "Agreed",
    "Outbox",
    "RankMeta",
    "StateLayout",
    "SyncRequest",
    "all_gather_fixed",
    "broadcast_value",
    "check_in_states",
    "exchange_states",
    "sync_states",
    "wait",
]


def sync_states(
    request: SyncRequest,
    cat: dict[str, list[Tensor]],
    summed: dict[str, Tensor],
    *,
    device: torch.device,
    info: Info | None = None,
    modes: dict[str, Agreed] | None = None,
    dst: int | None = None,
    concat: bool = True,
) -> Gathered:
    """Check in, verify that all ranks agree, and move every state: one exchange per state kind (cat, summed).

    See :func:`check_in_states` for the arguments they share. ``summed`` tensors must agree exactly in shape and
    dtype. With ``dst`` (a rank of the group) only that rank receives the cat states; the others get them with
    zero rows and never hold more than their own share. ``concat=False`` returns the cat states as per-rank pieces
    (see :class:`Gathered`).
    """
    checked = check_in_states(request, cat, summed, device=device, info=info, modes=modes)
    return exchange_states(checked, cat, summed, device=device, dst=dst, concat=concat)
