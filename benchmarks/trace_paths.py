"""Which package files run during one ``update()`` and one ``compute()`` of ``VarlenAUROC(dataset_size=N)`` on 2
gloo ranks (spawned), and the package classes in its MRO: the path a maintainer follows.

    PYTHONPATH=$PWD python benchmarks/trace_paths.py [--json]

The counts are per phase, rank 0's, split into metric side (the package outside ``functional/`` and ``_dist/``),
``functional/`` and ``_dist/`` (transport). Nothing is asserted: the numbers are the result.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _files_during(package: Path, fn: Any) -> list[str]:
    seen: set[str] = set()
    root = str(package)

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            name = frame.f_code.co_filename
            if name.startswith(root):
                seen.add(str(Path(name).relative_to(package)))

    sys.setprofile(tracer)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return sorted(seen)


def _split(files: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"metric": [], "functional": [], "transport": []}
    for f in files:
        key = "functional" if f.startswith("functional") else "transport" if f.startswith("_dist") else "metric"
        out[key].append(f)
    return out


def _rank(rank: int, port: int, queue: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60)
    )
    import torchmetrics_varlen
    from torchmetrics_varlen import VarlenAUROC

    package = Path(torchmetrics_varlen.__file__).parent
    gen = torch.Generator().manual_seed(rank)
    preds, target = torch.rand(7, generator=gen), torch.randint(0, 2, (7,), generator=gen)
    metric = VarlenAUROC(dataset_size=13)
    metric.update(preds[:3], target[:3])  # warm: the first batch decides modes once
    update = _files_during(package, lambda: metric.update(preds[3:], target[3:]))
    compute = _files_during(package, metric.compute)
    chain = [
        f"{c.__module__}.{c.__qualname__}"
        for c in type(metric).__mro__
        if c.__module__.startswith("torchmetrics_varlen")
    ]
    if rank == 0:
        queue.put({"update": _split(update), "compute": _split(compute), "mro": chain})
    dist.destroy_process_group()


def main() -> None:
    """Spawn the two ranks and print what rank 0 traced."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    procs = [ctx.Process(target=_rank, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    result = queue.get(timeout=120)
    for p in procs:
        p.join(60)
    if ns.json:
        print(json.dumps(result, indent=1))
        return
    for phase in ("update", "compute"):
        parts = result[phase]
        print(f"{phase}: " + ", ".join(f"{k} {len(v)}" for k, v in parts.items()))
        for k, v in parts.items():
            print(f"  {k}: {' '.join(v)}")
    print(f"class chain ({len(result['mro'])}): {' > '.join(result['mro'])}")


if __name__ == "__main__":
    main()
