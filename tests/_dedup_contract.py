"""The id dedup's contract in plain Python, the reference the dedup tests compare ``dedup_by_id`` with."""

from __future__ import annotations

import math
from collections.abc import Sequence


def contract_keep(ids: Sequence[int], sub: Sequence[int], scores: Sequence[Sequence[float]] | None) -> list[int]:
    """Rows kept, in order: one per (id, sub), ordered by key; of the copies of a key, the one whose whole sample is
    smallest (a sample's elements are consecutive, ``sub`` counting from 0; compared column by column, every
    element's score first, then every element's next column, by value with -0.0 before 0.0), then the first in input
    order.
    """

    def sample(i: int) -> list[tuple[float, float]]:
        start, elements = i - sub[i], []
        for j in range(start, len(ids)):
            if ids[j] != ids[i] or sub[j] != j - start:
                break
            elements.append(scores[j] if scores else [])
        # column by column: every element's score, then every element's next column (the weight)
        return [(e[c], math.copysign(1.0, e[c])) for c in range(len(elements[0])) for e in elements]

    keep, seen = [], set()
    for i in sorted(range(len(ids)), key=lambda i: (ids[i], sub[i], sample(i), i)):
        if (ids[i], sub[i]) not in seen:
            seen.add((ids[i], sub[i]))
            keep.append(i)
    return keep
