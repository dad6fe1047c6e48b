"""Who called the metric: the user's line a warning points at, and whether Lightning's sanity check is running.

Both walk the call stack, and only when a warning is about to be raised; both look only at libraries already
imported (never importing Lightning).
"""

from __future__ import annotations

import os
import sys
from types import FrameType

_LIBRARIES = ("torchmetrics_varlen", "torchmetrics", "torch", "lightning", "pytorch_lightning", "lightning_fabric")


def user_stacklevel() -> int:
    """``stacklevel`` for a warning raised by the caller of this function that points at the first frame outside
    the libraries a metric is called through (only those already imported are looked at).
    """
    files = [getattr(sys.modules.get(name), "__file__", None) for name in _LIBRARIES]
    roots = tuple(os.path.dirname(os.path.abspath(f)) + os.sep for f in files if isinstance(f, str))
    frame: FrameType | None = sys._getframe(2)  # level 1 is the caller's own line (the warnings.warn call)
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(roots):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 2


_TRAINERS = ("lightning.pytorch", "pytorch_lightning")


def lightning_sanity_check() -> bool:
    """Whether this call runs inside Lightning's sanity check: a Lightning ``Trainer`` up the call stack (a
    ``self`` of its methods, or a ``trainer`` argument of its hooks) says ``sanity_checking``. Read only when about
    to warn, and only if Lightning is already imported (never imports it); either package name.
    """
    kinds = tuple(
        t for t in (getattr(sys.modules.get(name), "Trainer", None) for name in _TRAINERS) if isinstance(t, type)
    )
    if not kinds:
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        local = frame.f_locals
        for key in ("self", "trainer"):
            trainer = local.get(key)
            if isinstance(trainer, kinds):
                return bool(getattr(trainer, "sanity_checking", False))
        frame = frame.f_back
    return False
