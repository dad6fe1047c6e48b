"""Logit normalisation whose output bits depend on the input value only, never on where it sits in a tensor.

torch's CPU ``sigmoid`` computes the vectorised body of a tensor with one formula and the tail of each chunk with
another (the scalar one), so about 2.5% of float64 and 4% of float32 values come out one bit apart depending on their
position. Equal logits then stop being tied, and a sample scores differently in another batch, on another rank or
after a different ``DistributedSampler`` split: AUROC moves with the batch size and the world size.

Here every score is the one rule's output for its value, wherever it sits:

- a **sigmoid** is computed in float64 by one scalar formula for every element (``1 / (1 + exp(-x))``, the kernel's
  scalar path, which a strided input makes torch take for every element) and rounded once to the score dtype
  (:func:`score_dtype`: float64 stays float64, anything else becomes float32); float16 / bfloat16 logits (at most
  65,536 values) read a table of those float32 values, made once per dtype and device;
- a **softmax** over the classes is computed in float64 (torch's row kernel treats every row alike) and rounded once
  to the score dtype.

So a float32 score is the float32 nearest the float64 sigmoid of its logit (scikit-learn's ``expit`` rounded once),
and equal logits stay tied: the value is bitwise the same for any batch size, world size and order.

**16-bit logits get float32 scores.** AUROC, AP and the curves do not change under a monotone map, so the scores must
not merge logits the model told apart: a bfloat16 sigmoid rounds every logit above about 5.5 to 1.0 (of the 65,536
bfloat16 values, 1,323 distinct scores; float16: 7,666), which moved the AP of 100,000 bf16 logits N(+-2, 2) by
4.8e-4 from scikit-learn's on those logits (torchmetrics still does this). Their float32 sigmoids keep 5,820
(float16: 40,123) distinct scores: every pair of logits whose float64 sigmoids a float32 can tell apart stays apart,
so AUROC / AP / curves / best F1 of 16-bit logits are scikit-learn's on the logits themselves, except where the
float32 sigmoid itself saturates: every logit above about 17 scores 1.0 (as float32 logits do, and as in
torchmetrics) and every one below about -103 scores 0.0. Scores given in 16-bit (a batch inside [0, 1]: not logits)
keep their dtype and values. The 16-bit mode (``thresholds=torch.bfloat16`` / ``torch.float16``) rounds every score
to its dtype as before, so there 16-bit logits count as before (the float32 sigmoid rounded to 16 bits equals the
float64 sigmoid rounded to 16 bits for all 65,536 patterns of both dtypes); its exact answer on the logits
themselves is ``normalization=None``, which counts the logits' own bit patterns (a monotone map: the same ranking).
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchmetrics_varlen.functional._device import on_device

_SIXTEEN_BIT = (torch.float16, torch.bfloat16)
_TABLES: dict[tuple[torch.dtype, torch.device], Tensor] = {}


def score_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the normalised scores of logits of ``dtype``: float64 for float64, float32 for anything else
    (float32, float16 / bfloat16: their sigmoids need a float32 not to merge distinct logits, integers).
    """
    return torch.float64 if dtype == torch.float64 else torch.float32


def _sigmoid64(x: Tensor) -> Tensor:
    """The float64 sigmoid of every element of ``x`` by the scalar formula, shaped as ``x``.

    The values are copied into every other slot of a buffer: a strided input is never vectorised, so torch runs the
    same scalar expression (libm's ``exp``) on each element, wherever it is.
    """
    flat = x.reshape(-1)
    buffer = torch.empty((flat.numel(), 2), dtype=torch.float64, device=x.device)
    column = buffer[:, 0]
    column.copy_(flat)
    return column.sigmoid().view(x.shape)


# Relative width of the interval around a vectorised float64 sigmoid within which the scalar formula's result lies
# (both are within ~2 float64 steps of the true value): if the whole interval rounds to one float32, so does the scalar
# result, and the vectorised one can be kept.
_SPREAD = 16 * 2.0**-53
_VECTORISED_FROM = 4096  # below this many scores the scalar pass alone is cheaper than the pass and the check


def _sigmoid32(x: Tensor) -> Tensor:
    """The float32 sigmoid of ``x``: the scalar formula's float64 result rounded once, taken from torch's vectorised
    float64 sigmoid wherever an interval around it rounds to one float32 (all but about one score in 10**6), from the
    scalar formula elsewhere. Twice as fast as the scalar pass alone from a few thousand scores on.

    On the device path (:func:`~._device.on_device`) the scalar formula's pass alone, whatever the size: the
    refinement needs a host read (``unsure.any()``) that would make every ``update()`` wait for the device. A
    device's elementwise kernel (CUDA's ``sigmoid``) applies one formula to every element wherever it sits, so this is
    a function of the value only there too. That must be checked on each device, not assumed:
    ``benchmarks/device_check.py`` compares the float32 scores of the same logits at shifted positions, in batches of
    several sizes and strides, on the device (and counts where they differ from the CPU's scalar formula).
    """
    if x.numel() < _VECTORISED_FROM or on_device(x):
        return _sigmoid64(x).float()
    flat = x.reshape(-1)
    y = flat.double().sigmoid_()
    out = y.float()
    low = (y * (1 - _SPREAD)).float()
    unsure = low.ne_(y.mul_(1 + _SPREAD).float())  # NaN too: its own scalar result is NaN
    if bool(unsure.any()):
        where = unsure.nonzero().squeeze(1)
        out[where] = _sigmoid64(flat[where]).float()
    return out.view(x.shape)


def _table(dtype: torch.dtype, device: torch.device) -> Tensor:
    """The float32 sigmoid of every value of a 16-bit ``dtype``, indexed by its bit pattern as an unsigned number."""
    key = (dtype, device)
    table = _TABLES.get(key)
    if table is None:
        patterns = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
        table = _sigmoid64(patterns).float()
        table = torch.cat((table[2**15 :], table[: 2**15])).to(device)  # index = the pattern read as unsigned
        _TABLES[key] = table
    return table


def sigmoid(x: Tensor) -> Tensor:
    """``x.sigmoid()``, with every element's bits a function of its value only, in :func:`score_dtype` (float32 for
    16-bit logits; see the module's docstring).

    Example:
        >>> import torch
        >>> x = torch.full((33,), -4.53)  # torch 2.13's x.sigmoid() gives the last element another bit
        >>> bool((sigmoid(x) == sigmoid(x[:1])).all())
        True
        >>> sigmoid(torch.tensor([0.0, 2.0]))
        tensor([0.5000, 0.8808])
        >>> sigmoid(torch.tensor([7.0, 8.0], dtype=torch.bfloat16))  # float32: a bfloat16 sigmoid gives both 1.0
        tensor([0.9991, 0.9997])
    """
    if x.dtype in _SIXTEEN_BIT:
        patterns = x.reshape(-1).view(torch.int16).long()  # a negative index reads from the end: the unsigned one
        return _table(x.dtype, x.device)[patterns].view(x.shape)
    if x.dtype == torch.float32:
        return _sigmoid32(x)
    out = _sigmoid64(x)
    return out if x.dtype == torch.float64 else out.float()


def softmax(x: Tensor) -> Tensor:
    """``x.softmax(dim=1)`` of ``(N, C)`` rows, computed in float64 and rounded once to :func:`score_dtype` (float32
    for 16-bit logits), so a row's scores are a function of the row only.

    Example:
        >>> import torch
        >>> softmax(torch.tensor([[0.0, 0.0], [1.0, 3.0]]))
        tensor([[0.5000, 0.5000],
                [0.1192, 0.8808]])
    """
    out = x.to(torch.float64).contiguous().softmax(dim=1)
    return out if x.dtype == torch.float64 else out.float()
