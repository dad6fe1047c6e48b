"""A value computed on one rank, given to every rank of the sync (``compute_on_rank``): shapes through the store,
bytes in one broadcast, both with the sync's deadline; nothing is pickled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen._dist import collectives
from torchmetrics_varlen._dist.checkin import Ticket
from torchmetrics_varlen._dist.errors import MetricSyncError, RemoteValueError
from torchmetrics_varlen._dist.group import comm_device
from torchmetrics_varlen._dist.records import _DTYPES, nbytes
from torchmetrics_varlen._dist.transport import wait, write_into


def broadcast_value(
    ticket: Ticket, src: int, compute: Callable[[], tuple[Any, dict[str, Any]]], device: torch.device, *, key: str
) -> tuple[Any, dict[str, Any]]:
    """Run ``compute`` on rank ``src`` only and give its result to every rank of the sync.

    ``compute`` returns ``(value, extra)``: the value is a tensor or a (nested) tuple / list of tensors, ``extra``
    small JSON. The shapes and ``extra`` travel through the store (one key), the tensors' bytes in one broadcast,
    both with the sync's deadline. If ``compute`` raises on ``src``, every rank raises, with its message. ``key``
    names the value among those of the sync (metrics of a compute group share one sync).
    """
    layout, store_key = ticket.layout, f"value/{key}"
    ticket.extra_keys.append(store_key)
    if layout.rank == src:
        # Everything that can fail here (the computation, encoding and packing its value) happens before the
        # others learn that a value comes: a failure reaches them as a note, never as a missing broadcast.
        try:
            value, extra = compute()
            tensors: list[Tensor] = []
            spec = _spec(value, tensors)
            note = json.dumps({"spec": spec, "extra": extra})
            sizes = [nbytes(t.numel(), (), t.dtype) for t in tensors]
            payload = torch.empty(sum(sizes), dtype=torch.uint8, device=comm_device(layout.group, device))
            offset = 0
            for t, size in zip(tensors, sizes, strict=True):
                if t.numel():
                    write_into(payload[offset : offset + t.numel() * t.dtype.itemsize].view(t.dtype), t)
                offset += size
        except Exception as err:
            ticket.set(store_key, json.dumps({"error": f"{type(err).__name__}: {err}", "bad_input": _bad_input(err)}))
            raise
        ticket.set(store_key, note)
    else:
        # The other ranks wait for the computation on ``src`` at most ``sync_timeout`` seconds.
        if not ticket.wait_keys([store_key], ticket.timeout):
            late = TimeoutError(f"no value from {layout.describe(src)} within {ticket.timeout:g} s")
            raise ticket.failed(late, f"waiting for the value computed on {layout.describe(src)}")
        note = json.loads(ticket.get(store_key))
        if "error" in note:
            msg = f"{ticket.what}: the computation on {layout.describe(src)} failed: {note['error']}"
            raise (RemoteValueError if note.get("bad_input") else MetricSyncError)(msg)
        spec, extra = note["spec"], note["extra"]
        total = sum(nbytes(math.prod(s[1]), (), _DTYPES[s[0]]) for s in _leaves(spec))
        payload = torch.empty(total, dtype=torch.uint8, device=comm_device(layout.group, device))
    if payload.numel():
        work = collectives.broadcast(payload, src, layout.group, layout.global_ranks[src], ticket.timeout)
        wait(work, ticket, "the broadcast of the computed value")
    if layout.rank == src:
        return value, extra
    return _rebuild(spec, payload.to(device), [0]), extra


def _bad_input(err: Exception) -> bool:
    """Whether the computation's error is about the data (a ``ValueError`` that is not itself a sync failure)."""
    return isinstance(err, ValueError) and not isinstance(err, MetricSyncError)


def _spec(value: Any, tensors: list[Tensor]) -> Any:
    """JSON description of a value: ``[dtype code, shape]`` per tensor, lists for tuples / lists."""
    if isinstance(value, Tensor):
        if value.dtype not in _DTYPES:
            msg = f"Cannot send a computed value of dtype {value.dtype}."
            raise TypeError(msg)
        tensors.append(value)
        return [_DTYPES.index(value.dtype), list(value.shape)]
    if isinstance(value, (tuple, list)):
        return {"seq": [_spec(v, tensors) for v in value], "tuple": isinstance(value, tuple)}
    msg = f"Cannot send a computed value of type {type(value).__name__} (tensors, tuples and lists only)."
    raise TypeError(msg)


def _leaves(spec: Any) -> list[Any]:
    if isinstance(spec, dict):
        return [leaf for s in spec["seq"] for leaf in _leaves(s)]
    return [spec]


def _rebuild(spec: Any, payload: Tensor, offset: list[int]) -> Any:
    if isinstance(spec, dict):
        items = [_rebuild(s, payload, offset) for s in spec["seq"]]
        return tuple(items) if spec["tuple"] else items
    dtype, shape = _DTYPES[spec[0]], spec[1]
    numel = math.prod(shape)
    chunk = payload[offset[0] : offset[0] + numel * dtype.itemsize]
    offset[0] += nbytes(numel, (), dtype)
    return chunk.view(dtype).reshape(shape).clone()
