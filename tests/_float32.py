"""References in the package's output dtype.

The metrics compute exactly (integer counts, float64 ratios) and return torchmetrics' float32, rounded once at the
end: the value to expect is the reference rounded to the nearest float32, compared as tightly as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def f32(value: Any) -> Any:
    """``value`` (a number, or a sequence / array / tensor of them) rounded to float32, as Python floats."""
    rounded = np.asarray(value, dtype=np.float64).astype(np.float32).astype(np.float64)
    return float(rounded) if rounded.ndim == 0 else rounded.tolist()
