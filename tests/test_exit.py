"""A process that exits right after ``compute()``, without ``destroy_process_group()``, exits cleanly.

On gloo, torch frees a collective's tensors on its worker thread once the last reference to the work object goes;
when that happens while the interpreter shuts down, the process aborts with ``terminate called without an active
exception`` (see ``torchmetrics_varlen/_dist/works.py``). Lightning's ``ddp_spawn`` workers exit this way on gloo.
The control case shows the abort is real on this torch: plain ``dist.all_gather`` calls before the same exit.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch.multiprocessing as mp
from _dist import free_port
from _exit_worker import sync_and_exit

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

# Spawned pairs of ranks per case (each pair imports torch afresh: about 3 s). Before the fix about 20%
# (compute_on_rank) and 40% (gather) of such runs aborted, and about 60% of the control's runs do (_exit_worker.py):
# with 6 runs each, a regression goes unseen in both cases with probability about 0.01. The control's rate varies
# with the machine's load (5 of 8 runs once, 0 of 6 another time): when it does not abort it reports xfail.
RUNS = 6


def _aborted_runs(strategy: str, collectives: str) -> list[str]:
    aborted = []
    for _ in range(RUNS):
        try:
            mp.spawn(sync_and_exit, args=(2, free_port(), strategy, collectives), nprocs=2, join=True)
        except mp.ProcessExitedException as err:
            aborted.append(str(err))
    return aborted


@pytest.mark.parametrize("strategy", ["gather", "compute_on_rank"])
def test_exit_right_after_compute_never_aborts(strategy: str) -> None:
    """Pairs of ranks compute once and exit at once, without destroying the group: no process aborts."""
    assert _aborted_runs(strategy, "varlen") == []


def test_control_plain_all_gather_then_exit_does_abort() -> None:
    """The same exit after plain ``dist.all_gather`` calls aborts on this torch (so the test above can fail)."""
    aborted = _aborted_runs("gather", "torch")
    if not aborted:  # pragma: no cover - a torch that frees collective tensors safely
        pytest.xfail("this torch's gloo backend did not abort in 6 exits after plain all_gathers")
    assert all("SIGABRT" in reason for reason in aborted), aborted


def case_works_kept_until_next_sync(rank: int, world: int) -> list[int]:
    """How many work objects are kept after each of three computes of two metrics."""
    import torch

    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision
    from torchmetrics_varlen._dist import works

    works.release_finished()
    counts = [works.kept()]
    gen = torch.Generator().manual_seed(rank)
    auroc, ap = VarlenAUROC(), VarlenAveragePrecision(compute_on_rank=0)
    for _ in range(3):
        preds, target = torch.rand(30, generator=gen), torch.randint(0, 2, (30,), generator=gen)
        auroc.update(preds, target)
        ap.update(preds, target)
        auroc.compute()
        ap.compute()
        counts.append(works.kept())
    return counts


def test_work_objects_are_kept_until_the_next_sync(pool: Any) -> None:
    """After a sync its work objects stay referenced (the main thread frees them, later); the next sync releases
    the completed ones, so the count does not grow from one evaluation to the next.
    """
    for counts in pool.values(case_works_kept_until_next_sync, 2):
        assert counts[0] == 0
        assert counts[1] > 0
        assert counts[1] == counts[2] == counts[3], counts
