"""The 16-bit mode's small batches, held and then counted together into the histogram state.

Counting a batch into the 16-bit histogram (:func:`~torchmetrics_varlen.functional._hist.histogram_into`) costs
about seven tensor operations whatever the batch size: for 64 samples, more than the rest of ``update()``. So a
batch of fewer than :data:`HOLD` scores is only converted to its 16-bit scores and held, with its labels, in the
metric's ``__dict__``; once the held batches reach :data:`HOLD` scores or :data:`MAX_PIECES` batches they are
concatenated and counted in one pass. The histogram holds integer counts: the same integers whatever the grouping.

Nothing reads the histogram without the held batches: the state is a :class:`HeldHistogram` descriptor on the class
(as the ledger's counters are, ``_ledger.Counter``). Reading it first counts what is held (``compute``, the sync,
``state_dict``, ``forward``'s merge, ``_apply``, a ``MetricCollection`` comparing or sharing compute-group states, a
user); assigning it drops what is held (``reset``, ``load_state_dict``: the new state replaces the old one and its
batches). Pickling and ``deepcopy`` count them first (``_VarlenMetric.__getstate__``): a copy holds none, and one
pickled to spawned processes shares its counted state's storage as before (then clones it to count into). A held
batch is a copy (the 16-bit conversion; the labels are copied when they are the caller's own tensor), so that a
caller who reuses its input tensors changes nothing afterwards.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen._core.seam import _OWNED_KEY
from torchmetrics_varlen.functional._count import count_into

HOLD = 1 << 15  # scores (elements) held at most before counting; a bigger batch is counted at once
MAX_PIECES = 256  # batches held at most before counting (few tensors alive, one cat of bounded cost)
_KEY = "_varlen_held"  # [16-bit score pieces, label pieces, number of scores held]
# ``x.bfloat16()`` / ``x.half()``: the conversion ``x.to(dtype)`` makes (the same rounding), with less argument parsing
_CONVERT = {torch.bfloat16: Tensor.bfloat16, torch.float16: Tensor.half}


# The summed state each metric owns (it made the tensor itself), so that batches are counted into it in place: kept
# as ``(process id, tensor)`` in the metric's ``__dict__``. A metric pickled to spawned processes (Lightning's
# ddp_spawn) can share its tensor states' storage across ranks: there the process id differs, so it clones before its
# first in-place add; so does a metric whose state was replaced (reset, load, sync, compute-group reference), whose
# state is then another tensor. (A dict keyed by the metric does not work: torchmetrics' ``Metric.__hash__`` hashes
# the states, so the key changed with every batch and every update cloned the 65,536-bin histogram.)

_PID = [os.getpid()]  # this process's id, kept current in a forked child
if hasattr(os, "register_at_fork"):  # no fork on Windows
    os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def owned_state(metric: Any, name: str) -> Tensor:
    """The metric's summed state ``name``, cloned once if this metric did not make it (then added to in place).

    Read and written through the instance ``__dict__``: what :class:`HeldHistogram` holds stays held.
    """
    state: dict[str, Any] = metric.__dict__
    value: Tensor = state[name]
    owned = state.get(_OWNED_KEY)
    if owned is None or owned[1] is not value or owned[0] != _PID[0]:
        value = state[name] = value.clone()
        state[_OWNED_KEY] = (_PID[0], value)
    return value


def hold(metric: Any, scores: Tensor, labels: Tensor, given: torch.dtype) -> None:
    """Count one unweighted batch of stored rows into the 16-bit histogram, now or later (module docstring).

    ``given`` is the dtype of the caller's ``target``: labels of that dtype may be the caller's tensor (copied).
    """
    state: dict[str, Any] = metric.__dict__
    hist: Tensor = state["hist"]
    size = scores.numel()
    same_device = (scores.is_cpu and hist.is_cpu) or scores.device == hist.device
    if size >= HOLD or not same_device or hist.dtype != torch.int64:
        # counted now: a big batch, or one that fails there as it always did (another device, a weighted state)
        count_into(metric.mode, owned_state(metric, "hist"), scores, labels, metric.task, None)
        return
    dtype = metric.mode.dtype
    held = state.get(_KEY)
    if held is None:
        held = state[_KEY] = [[], [], 0]
    pieces = held[0]
    pieces.append(scores.clone() if scores.dtype == dtype else _CONVERT[dtype](scores))
    held[1].append(labels.clone() if labels.dtype == given else labels)
    held[2] += size
    if held[2] >= HOLD or len(pieces) >= MAX_PIECES:
        count_held(metric)


def count_held(metric: Any) -> None:
    """Count the held batches, if any, into the histogram state (a clone the metric owns)."""
    state: dict[str, Any] = metric.__dict__
    held = state.get(_KEY)
    if held is None:
        return
    scores = held[0][0] if len(held[0]) == 1 else torch.cat(held[0])
    labels = held[1][0] if len(held[1]) == 1 else torch.cat(held[1])
    count_into(metric.mode, owned_state(metric, "hist"), scores, labels, metric.task, None)
    del state[_KEY]  # only once counted


def drop_held(metric: Any) -> None:
    """Forget the held batches (``reset``: not worth counting into a state about to be replaced)."""
    metric.__dict__.pop(_KEY, None)


class HeldHistogram:
    """The ``hist`` state of the 16-bit mode, read with the held batches counted in (module docstring).

    Set on the host's class (keeping the ``hist: Tensor`` annotation for TorchScript); the tensor itself lives in the
    instance ``__dict__`` under the same name, so pickling, ``deepcopy`` and ``torch.jit.script`` see an ordinary
    attribute. Metrics of the other modes have no ``hist``: reading it raises ``AttributeError`` as before.
    """

    name = "hist"

    def __get__(self, host: Any, owner: Any = None) -> Any:
        if host is None:
            return self
        state = host.__dict__
        if _KEY in state:
            count_held(host)
        try:
            return state[self.name]
        except KeyError:
            raise AttributeError(self.name) from None

    def __set__(self, host: Any, value: Any) -> None:
        state = host.__dict__
        state[self.name] = value
        state.pop(_KEY, None)
