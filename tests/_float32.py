"""References in the package's output dtype.

The metrics compute exactly (integer counts, float64 ratios) and return torchmetrics' float32, rounded once at the
end: the value to expect is the reference rounded to the nearest float32, compared as tightly as before. Logits are
normalised by one rule, whatever their place in a batch: the float64 sigmoid (softmax) rounded once to float64 for
float64 logits, to float32 for any other (16-bit logits get float32 scores: a 16-bit sigmoid merges distinct logits).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def f32(value: Any) -> Any:
    """``value`` (a number, or a sequence / array / tensor of them) rounded to float32, as Python floats."""
    rounded = np.asarray(value, dtype=np.float64).astype(np.float32).astype(np.float64)
    return float(rounded) if rounded.ndim == 0 else rounded.tolist()


def _rounded(values: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """float64 values rounded once to the package's score dtype for ``like``: float64 for float64, else float32."""
    dtype = torch.float64 if like.dtype == torch.float64 else torch.float32
    return torch.from_numpy(values).to(dtype)


def expit(x: torch.Tensor) -> torch.Tensor:
    """The package's sigmoid rule, computed independently: NumPy's float64 ``1 / (1 + exp(-x))`` rounded once to
    float32 (float64 for float64 ``x``; torch's own float32 sigmoid differs by a bit on some elements, by their
    position, and saturates from a logit of ~16.6 where the float32 nearest the value reaches 1.0 only above ~17.3).
    """
    values = x.detach().cpu().double().numpy()
    with np.errstate(over="ignore"):  # exp(-x) = inf for x below about -709: the sigmoid is 0
        return _rounded(1.0 / (1.0 + np.exp(-values)), x)


def softmax(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """The package's softmax rule, computed independently: NumPy's float64 softmax rounded once to float32 (float64
    for float64 ``x``).
    """
    values = x.detach().cpu().double().numpy()
    shifted = np.exp(values - values.max(axis=dim, keepdims=True))
    return _rounded(shifted / shifted.sum(axis=dim, keepdims=True), x)
