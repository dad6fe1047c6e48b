"""The demo command runs end to end on spawned CPU ranks and exits 0 only when VarlenAUROC matched everywhere."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.distributed


def test_demo_small_grid_exits_zero() -> None:
    cmd = [sys.executable, "-m", "torchmetrics_varlen", "demo", "-w", "1,3", "-n", "11", "-b", "4"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("AUROC of 11 samples")
    assert sum(line.endswith("| yes") for line in lines) == 8
    assert "varlen matched the truth in 8 of 8 configurations" in done.stdout


def test_demo_help_explains_the_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "torchmetrics_varlen", "demo", "--help"], capture_output=True, text=True, check=True
    )
    for option in ("--world-sizes", "--num-samples", "--batch-sizes", "--seed", "DistributedSampler"):
        assert option in done.stdout
