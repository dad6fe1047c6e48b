"""The 16-bit mode's small batches, held as plain list states and counted together into the histogram state.

Counting a batch into the 16-bit histogram (:func:`~torchmetrics_varlen.functional._hist.histogram_into`) costs
about seven tensor operations whatever the batch size: for 64 samples, more than the rest of ``update()``. So a
batch of fewer than :data:`HOLD` scores is only converted to its 16-bit scores and appended, with its labels, to the
metric's list states ``held_scores`` / ``held_labels``; once they hold :data:`HOLD` scores or :data:`MAX_PIECES`
batches they are concatenated and counted in one pass (:func:`count_held`). The histogram holds integer counts: the
same integers whatever the grouping.

They still pay for themselves with the counting in place (``index_add_``, no ``bincount``): measured on the CPU
(``thresholds=torch.bfloat16``, 262,144 scores, one thread, CPU time per ``update()``), counting every batch at once
costs 42.7 / 49.6 us at B = 64 (validate_args False / True) and 49.4 / 56.1 us at B = 512, holding them 27.2 / 22.7 and
23.7 / 30.5 us: 1.6x to 2.2x. Holding reads nothing back from the device either (an append, and one ``cat`` and one
count per :data:`HOLD` scores).

The metric's 16-bit state is the pair (``hist``, the held batches): both are ordinary states (reset, saved, copied,
shared by a compute group, merged by ``forward`` as torchmetrics does for any state), and reading either writes
nothing. The held batches are counted into the state at two points only: in ``update`` when they reach the limits,
and in ``forward``'s batch value (on the batch's own states). The sync and ``compute()`` read them without changing
a state (:func:`counted_hist`: a counted copy); a sync's result holds them, so it holds no held batches. Counting
keeps every holder of the states consistent: into a histogram this metric made, in place, the held lists emptied in
place (a compute-group member holding the same objects sees both change); into any other, a copy, with new empty
lists (a holder of the old objects keeps the old, consistent pair). A held batch is a copy (the 16-bit conversion;
the labels are copied when they are the caller's own tensor), so that a caller who reuses its input tensors changes
nothing afterwards.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

from torchmetrics_varlen.functional._count import count_into

HOLD = 1 << 15  # scores (elements) held at most before counting; a bigger batch is counted at once
MAX_PIECES = 256  # batches held at most before counting (few tensors alive, one cat of bounded cost)
HELD = ("held_scores", "held_labels")  # the list states of the held batches (16-bit mode only)
# ``x.bfloat16()`` / ``x.half()``: the conversion ``x.to(dtype)`` makes (the same rounding), with less argument parsing
_CONVERT = {torch.bfloat16: Tensor.bfloat16, torch.float16: Tensor.half}


# The summed state each metric owns (it made the tensor itself), so that batches are counted into it in place: kept
# as ``(process id, tensor, its memory address)`` in the metric's ``_owned_sum``. A metric pickled to spawned
# processes (Lightning's ddp_spawn) can share its tensor states' storage across ranks: there the process id differs,
# so it clones before its first in-place add; the source's storage moved into shared memory (another address), so it
# clones too; so does a metric whose state was replaced (reset, load, sync, compute-group reference), whose state is
# then another tensor. (A dict keyed by the metric does not work: torchmetrics' ``Metric.__hash__`` hashes the states,
# so the key changed with every batch and every update cloned the 65,536-bin histogram.)

_PID = [os.getpid()]  # this process's id, kept current in a forked child
if hasattr(os, "register_at_fork"):  # no fork on Windows
    os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def _owns(metric: Any, value: Tensor) -> bool:
    # the memory address too: pickling for another process (``share_memory_()``) moves the storage, then shared
    owned = metric._owned_sum
    return owned is not None and owned[1] is value and owned[0] == _PID[0] and owned[2] == value.data_ptr()


def owned_state(metric: Any, name: str) -> Tensor:
    """The metric's summed state ``name``, cloned once if this metric did not make it (then added to in place)."""
    value: Tensor = getattr(metric, name)
    if not _owns(metric, value):
        value = value.clone()
        setattr(metric, name, value)
        metric._owned_sum = (_PID[0], value, value.data_ptr())
    return value


def hold(metric: Any, scores: Tensor, labels: Tensor, given: torch.dtype) -> None:
    """Count one unweighted batch of stored rows into the 16-bit histogram, now or later (module docstring).

    ``given`` is the dtype of the caller's ``target``: labels of that dtype may be the caller's tensor (copied).
    """
    hist: Tensor = metric.hist
    size = scores.numel()
    same_device = (scores.is_cpu and hist.is_cpu) or scores.device == hist.device
    if size >= HOLD or not same_device or hist.dtype != torch.int64:
        # counted now: a big batch, or one that fails there as it always did (another device, a weighted state)
        count_into(metric.mode, owned_state(metric, "hist"), scores, labels, metric.task, None)
        return
    dtype = metric.mode.dtype
    pieces: list[Tensor] = metric.held_scores
    pieces.append(scores.clone() if scores.dtype == dtype else _CONVERT[dtype](scores))
    metric.held_labels.append(labels.clone() if labels.dtype == given else labels)
    if len(pieces) >= MAX_PIECES or len(pieces) * size >= HOLD:  # (batches of one size: exactly HOLD scores)
        count_held(metric)


def _held_rows(metric: Any) -> tuple[Tensor, Tensor] | None:
    """The held batches as one tensor of scores and one of labels, on the histogram's device (``None``: none held)."""
    pieces: list[Tensor] = metric.held_scores
    if not pieces:
        return None
    labels_held: list[Tensor] = metric.held_labels
    scores = pieces[0] if len(pieces) == 1 else torch.cat(pieces)
    labels = labels_held[0] if len(labels_held) == 1 else torch.cat(labels_held)
    hist: Tensor = metric.hist
    if scores.device != hist.device:  # ``compute_on_cpu`` moves list states to the CPU after each update
        scores, labels = scores.to(hist.device), labels.to(hist.device)
    return scores, labels


def count_held(metric: Any) -> None:
    """Count the held batches, if any, into the histogram state (module docstring: who sees what)."""
    rows = _held_rows(metric)
    if rows is None:
        return
    pieces: list[Tensor] = metric.held_scores
    labels_held: list[Tensor] = metric.held_labels
    in_place = _owns(metric, metric.hist)
    count_into(metric.mode, owned_state(metric, "hist"), *rows, metric.task, None)
    if in_place:
        del pieces[:], labels_held[:]
    else:
        metric.held_scores, metric.held_labels = [], []


def counted_hist(metric: Any) -> Tensor:
    """The histogram with the held batches counted in, changing no state: the histogram state itself when none is
    held, else a counted copy (what the sync sends and ``compute()`` reads).
    """
    hist: Tensor = metric.hist
    rows = _held_rows(metric)
    return hist if rows is None else count_into(metric.mode, hist.clone(), *rows, metric.task, None)
