"""The guard's check-in: latency on real spawned ranks, and store traffic simulated at thousands of ranks.

1. **Real ranks** (W = 2, 4, 8, 16 spawned CPU processes, gloo on 127.0.0.1, tiny data): the median time of one
   ``VarlenAUROC.compute()`` of 8 samples per rank (check-in, metadata all-gather, data exchange, compute), and of
   the check-in alone, next to a bare ``dist.barrier()`` on the same ranks.
2. **Simulation** (W = 1,024 and 4,096 threads on one ``TCPStore``, as one store serves every rank of a job): the
   wall time until every thread has finished one check-in of this package, against the bare arrival-counter
   protocol (``add`` to a counter, the last rank writes a decision key, the others ``wait`` for it and ``get``
   it), in the same run. The ratio is what the package's protocol costs over the bare minimum.

    python benchmarks/bench_checkin.py --world-sizes 2,4,8,16 --simulate 1024,4096
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import statistics
import sys
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank(rank: int, world: int, port: int, repeats: int, out: Any) -> None:
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=datetime.timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    from torchmetrics_varlen import VarlenAUROC
    from torchmetrics_varlen._dist.checkin import check_in
    from torchmetrics_varlen._dist.group import GroupLayout

    layout = GroupLayout.of(None)
    metric = VarlenAUROC(sync_timeout=60)
    metric.update(torch.rand(8), torch.arange(8) % 2)
    times: dict[str, list[float]] = {"barrier": [], "check-in": [], "compute": []}
    for i in range(repeats + 1):
        dist.barrier()
        started = time.perf_counter()
        dist.barrier()
        barrier = time.perf_counter() - started
        dist.barrier()
        started = time.perf_counter()
        check_in(layout, identity="bench", signature="s", record=dict, timeout=60, what="bench", fix="")
        checkin = time.perf_counter() - started
        dist.barrier()
        metric.update(torch.rand(1), torch.ones(1, dtype=torch.long))  # a new state: compute() syncs again
        started = time.perf_counter()
        metric.compute()
        compute = time.perf_counter() - started
        if i:  # the first round warms up
            times["barrier"].append(barrier)
            times["check-in"].append(checkin)
            times["compute"].append(compute)
    if rank == 0:
        out.put({k: statistics.median(v) for k, v in times.items()})
    dist.destroy_process_group()


def real_ranks(world: int, repeats: int) -> dict[str, float]:
    """Median seconds of a barrier, a check-in and a whole compute() on ``world`` spawned ranks."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, repeats, out)) for r in range(world)]
    for proc in procs:
        proc.start()
    result: dict[str, float] = out.get(timeout=600)
    for proc in procs:
        proc.join(timeout=60)
    return result


def _bare(store: Any, world: int, key: str) -> None:
    if store.add(key + "n", 1) == world:
        store.set(key + "d", "go")
    else:
        store.wait([key + "d"], datetime.timedelta(seconds=600))
    store.get(key + "d")


def _ours(store: Any, world: int, rank: int, key: str) -> None:
    from torchmetrics_varlen._dist.checkin import Scope, check_in
    from torchmetrics_varlen._dist.group import GroupLayout

    layout = GroupLayout(None, rank, world, "sim", tuple(range(world)))
    check_in(
        layout, identity=key, signature="s", record=dict, timeout=600, what="sim", fix="", store=store, scope=Scope()
    )


def connect(port: int, world: int) -> list[Any]:
    """``world`` store clients, connected concurrently (one after another, each takes ~0.2 s past a few dozen)."""
    clients: list[Any] = [None] * world

    def one(rank: int) -> None:
        clients[rank] = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=600))

    threads = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return clients


def simulate(clients: list[Any], protocol: str, round_: int) -> float:
    """Seconds until every simulated rank (a thread with its own store client) has completed one check-in."""
    world = len(clients)
    start = threading.Barrier(world + 1)
    key = f"{protocol}/{world}/{round_}/"

    def run(rank: int) -> None:
        start.wait()
        if protocol == "bare":
            _bare(clients[rank], world, key)
        else:
            _ours(clients[rank], world, rank, key)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    """Print both tables (and write them as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", default="2,4,8,16", help="real spawned ranks")
    parser.add_argument("--simulate", default="1024,4096", help="simulated ranks (threads on one TCPStore)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"real": {}, "simulated": {}}
    print("| W (spawned ranks) | barrier ms | check-in ms | compute() ms |")
    print("|---:|---:|---:|---:|")
    for world in [int(w) for w in args.world_sizes.split(",") if w]:
        r = real_ranks(world, args.repeats)
        results["real"][world] = r
        print(f"| {world} | {r['barrier'] * 1e3:.2f} | {r['check-in'] * 1e3:.2f} | {r['compute'] * 1e3:.2f} |")
    sys.stdout.flush()
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    print("\n| W (simulated) | bare counter s | this package s | ratio | per rank, this package (ms) |")
    print("|---:|---:|---:|---:|---:|")
    for world in [int(w) for w in args.simulate.split(",") if w]:
        clients = connect(server.port, world)
        bare = statistics.median(simulate(clients, "bare", i) for i in range(3))
        ours = statistics.median(simulate(clients, "ours", i) for i in range(3))
        del clients
        results["simulated"][world] = {"bare": bare, "ours": ours, "ratio": ours / bare}
        print(f"| {world} | {bare:.3f} | {ours:.3f} | {ours / bare:.2f} | {ours / world * 1e3:.3f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
