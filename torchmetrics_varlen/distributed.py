"""The public face of ``_dist/``: the variable-length gather and the sync error."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from torchmetrics_varlen._dist.errors import MetricSyncError
from torchmetrics_varlen._dist.exchange import SyncRequest, sync_states
from torchmetrics_varlen._dist.group import GroupLayout, distributed_available

__all__ = ["MetricSyncError", "distributed_available", "gather_varlen"]

_FIX_GATHER = "Call gather_varlen() on every rank of the process group, the same number of times."


def gather_varlen(tensor: Tensor, group: Any | None = None, *, sync_timeout: float | None = 60.0) -> Tensor:
    """Concatenate every rank's ``tensor`` along dim 0, whatever each rank's length.

    Each rank may pass any number of rows, zero included, as long as the trailing dimensions agree across the ranks
    that have rows. Any layout works (strided, transposed, expanded or offset views give what their contiguous copy
    gives). Floating dtypes that differ across ranks are promoted to a common dtype (``float16`` and
    ``bfloat16`` give ``float32``), never reinterpreted; mixing floating point and integer data raises. The data
    moves in one exchange on the tensor's device (CUDA for NCCL), after a check-in on the process group's store
    that turns a missing rank into a :class:`MetricSyncError` within ``sync_timeout`` seconds instead of a hang.
    Every rank gets the same result, in rank order. Without an initialised process group the tensor is returned
    as it is.

    Args:
        tensor: At least 1-D; dim 0 is the variable one.
        group: The process group (``None``: the default group).
        sync_timeout: Seconds to wait for the other ranks at the check-in; ``None`` waits forever.

    Returns:
        The concatenation of all ranks' tensors, on ``tensor.device``.

    Raises:
        ValueError: If ``tensor`` is 0-D and there is no process group to gather over.
        MetricSyncError: On every rank, if a rank does not arrive in time, a rank's tensor cannot be sent (0-D, or
            a dtype such as ``uint16`` or ``float8`` that has no wire encoding: the error names the rank and why;
            no data moves and the process group stays usable), or the ranks' tensors cannot be concatenated.

    Example:
        >>> import torch
        >>> gather_varlen(torch.arange(3))  # no process group: the tensor itself
        tensor([0, 1, 2])
    """
    layout = GroupLayout.of(group) if distributed_available() else None
    if layout is None or layout.world == 1:
        if tensor.ndim == 0:
            msg = "Expected `tensor` to have at least one dimension (the one that varies across ranks), not a scalar."
            raise ValueError(msg)
        return tensor
    # With other ranks, what this rank cannot send (a scalar, an unsupported dtype) is raised on every rank.
    request = SyncRequest(
        layout, "gather_varlen", {"op": "gather_varlen"}, sync_timeout, "gather_varlen()", _FIX_GATHER
    )
    result = sync_states(request, {"tensor": [tensor]}, {}, device=tensor.device)
    gathered = result.cat["tensor"]
    assert isinstance(gathered, Tensor)
    return gathered
