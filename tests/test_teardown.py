"""Bounded teardown: after a peer died or got stuck in the middle of a data exchange, every survivor gets a
``MetricSyncError`` within ``sync_timeout`` + 5 s, can destroy the group, build a new one and compute exactly there,
and its process exits within ``sync_timeout`` + 10 s of the error, while the stuck peer is still stuck.

On gloo the package gives every collective of a sync its own timeout (``_dist/collectives.py``), so gloo's worker
thread lets go of the silent peer by itself; without it the interpreter's exit waits for the stuck peer (or the
group's own timeout, here 300 s). The figures are printed for the guard page (``pytest -s``).
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _dist import free_port
from _float32 import f32
from _teardown_worker import STUCK_FOR, SYNC_TIMEOUT, rank_data, survive
from sklearn.metrics import roc_auc_score

pytestmark = pytest.mark.distributed

WORLD = 3


@pytest.mark.parametrize("fault", ["stuck", "killed"])
def test_survivors_raise_rebuild_and_exit_in_bounded_time(fault: str) -> None:
    ctx = mp.get_context("spawn")
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    results = ctx.Queue()
    procs = [ctx.Process(target=survive, args=(r, WORLD, port, fault, results), daemon=True) for r in range(WORLD)]
    for proc in procs:
        proc.start()
    try:
        survivors = procs[:-1]
        outcomes = [results.get(timeout=120) for _ in survivors]
        exited: dict[int, float] = {}
        deadline = time.monotonic() + STUCK_FOR / 2  # well before the stuck peer wakes up
        while len(exited) < len(survivors) and time.monotonic() < deadline:
            for r, proc in enumerate(survivors):
                if r not in exited and not proc.is_alive():
                    exited[r] = time.time()
            time.sleep(0.05)
        stuck_alive = procs[-1].is_alive()
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=10)
        del store
    part = [rank_data(r) for r in range(WORLD - 1)]
    truth = f32(
        roc_auc_score(torch.cat([t for _, t in part]).numpy(), torch.cat([p for p, _ in part]).double().numpy())
    )
    for out in sorted(outcomes, key=lambda o: o["rank"]):
        rank = out["rank"]
        print(
            f"{fault}: rank {rank} raised after {out['raised']:.2f} s, destroy {out['destroyed']:.3f} s, new group"
            f" and exact compute {out['rebuilt']:.3f} s,"
            f" exited {exited.get(rank, float('nan')) - out['returned_at']:.2f} s after returning"
        )
        assert "rank 2" in out["error"], out
        assert out["raised"] < SYNC_TIMEOUT + 5, out
        assert out["value"] == pytest.approx(truth, abs=1e-7)
        assert rank in exited, f"rank {rank} still running {STUCK_FOR / 2:g} s after the error ({fault} peer)"
        assert exited[rank] - out["returned_at"] + out["destroyed"] + out["rebuilt"] < SYNC_TIMEOUT + 10, out
    if fault == "stuck":
        assert stuck_alive, "the stuck peer must still be stuck while the survivors exit (else the test proves nothing)"
