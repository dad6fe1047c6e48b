"""Shared fixtures: the pool of spawned gloo ranks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch.distributed as dist
from _dist import DistPool


@pytest.fixture(scope="session")
def pool() -> Iterator[DistPool]:
    """Up to four CPU ranks (gloo on 127.0.0.1), spawned once and reused by every multi-process test."""
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this build of PyTorch")
    workers = DistPool()
    yield workers
    workers.close()
