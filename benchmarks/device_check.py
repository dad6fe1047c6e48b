"""The GPU path in one prepared command: update() host syncs, the sigmoid, distributed correctness, timings.

On a CUDA machine, from the repository root (the package is imported from this checkout; torch, torchmetrics,
scikit-learn and NumPy must be installed)::

    python benchmarks/device_check.py                      # or: nox -s device
    python benchmarks/device_check.py --sizes 1e7,1e8 --parts bench --out /tmp/check.json

The sections (``--parts``, in this order; each within ``--budget`` seconds in all, 420 by default, so the whole
check fits in 8 minutes on one H100):

1. **updates: host syncs of ``update()``** (issue 37). ``VarlenAUROC`` fed probabilities, float32 logits, bfloat16
   logits, with ``dataset_size``, the 16-bit mode (float16 and bfloat16), ``VarlenMulticlassAUROC`` and
   ``VarlenMultilabelAUROC``, in batches of 8,192, each with ``validate_args=False`` (no host sync allowed per batch)
   and ``True`` (at most one): after a warm-up batch, the syncs of each of 3 updates are counted under
   ``torch.cuda.set_sync_debug_mode("warn")`` with the place of each, then (``validate_args=False``) the same
   updates on a fresh metric run under ``set_sync_debug_mode("error")``, whose first error is reported. Without
   CUDA the same updates run on CPU tensors under ``force_device_path()`` and ``tests/_syncs.py``'s
   ``HostSyncCounter`` (``item``, ``tolist``, ``__bool__``, ``nonzero``, ``numpy``, ``cpu``, boolean masks, ...).
   Reported per case (pass / the syncs and where), never a failure of the check.
2. **sigmoid: is the device's float32 sigmoid position-free?** The same logits at 11 offsets into a buffer, as
   slices of 20 sizes, strided and in place must give the same bits; ``torch.sigmoid`` in float32 and float64 and
   the package's normalisation, plus how many float32 results differ from the float64 sigmoid rounded once. On CPU
   torch's sigmoid is not position-free (the package refines it there): reported, not asserted.
3. **dist: correctness.** The distributed cases (uneven shards with an empty rank, ``DistributedSampler`` padding
   with ``dataset_size=``, ``sample_ids=``, ``compute_on_rank=0``, ``compute_sharded=True``, ``compute_on_cpu=True``,
   multiclass, the 16-bit mode and ``gather_varlen``) run with the metric states on ``cuda``: W = 2 spawned ranks
   sharing the one GPU over gloo, then W = 1 over NCCL (NCCL refuses two ranks on one device). Every rank's value is
   compared with scikit-learn on the full, undistributed data (absolute 1e-6). Every collective is bounded: the
   metrics' ``sync_timeout``, the process group's timeout, and a deadline after which the parent kills the ranks. A
   case that fails or kills a rank is recorded and the remaining cases go on in fresh processes.
4. **bench: timings** at each ``--sizes`` N (default 1e7, 1e8, 5e8; float32 scores, int64 labels, generated on the
   GPU): this package's exact ``auroc`` / ``average_precision`` and ``VarlenAUROC``, against ``torch.sort`` of the
   same scores and torchmetrics' ``BinaryAUROC``, plus the 16-bit histogram mode; the median of ``--repeats`` calls
   with ``torch.cuda.synchronize()`` after each (so before the next), and the peak of
   ``torch.cuda.max_memory_allocated`` (after ``reset_peak_memory_stats``) above the level at the start of the first
   call, as a multiple of the variant's input. A size whose data cannot fit in the free GPU memory is skipped;
   repeats are cut, then variants skipped, when ``--budget`` seconds would be exceeded; every skip is said.
5. **small: small batches** (``--small-batch N,B``, default 1e7,256): ``VarlenAUROC`` and ``BinaryAUROC`` fed ``N``
   scores in batches of ``B``, against ``VarlenAUROC`` fed the same data in one piece: microseconds per update and
   seconds of ``compute()``; and 1,000 updates of 256 (``--rate-updates``, ``--rate-batch``) of each, timed alone.

**Targets** (issue 37, at ``--target-size``, default N = 1e8; reported as ratios to the competitor timed in the same
process, never asserted): exact ``auroc`` <= 1.5x one ``torch.sort`` of the scores; ``VarlenAUROC`` update + compute
faster than ``BinaryAUROC``; peak memory above the input <= 2x the input; the 16-bit mode >= 5x faster than one
``torch.sort``; ``update()`` of a batch of 256 no slower than ``BinaryAUROC``'s (and issue 20's small-batch ones).

**Output.** One JSON file (``--out``; default ``$OUT/device_check.json`` when ``OUT`` is set, else
``./device_check.json``), written again after every section and every timed row (a crash or a kill keeps what was
done), markdown tables on stdout, and a compact summary table last. The exit status is 1 if a correctness case did
not pass, an ``update()`` or a timed call raised, or a section crashed; else 0 (host syncs and targets never fail it).

Without a CUDA device the same code runs as a dry run on CPU at tiny sizes, with the package's device path forced
(``force_device_path()``) in every section except the W = 1 distributed group (its CPU path), and exits 0 with a
"no CUDA device" message when every case passes: CI runs it (under a minute on 2 cores), so the script cannot rot.
"""

from __future__ import annotations

import time

_STARTED = time.monotonic()  # the --budget counts from here: the imports below are part of it

import argparse  # noqa: E402 - after the clock on purpose
import contextlib  # noqa: E402
import datetime  # noqa: E402
import functools  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable, Iterable  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from multiprocessing import connection as mp_connection  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import Tensor  # noqa: E402

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)

TOL = 1e-6  # absolute, against scikit-learn on the full data
CASE_N = 200_000  # samples per correctness case: more than 2 chunks of 65,536, so the streaming crosses chunk ends
BATCH = 8192
CLASSES = 5
GIB = 2**30

# ----------------------------------------------------------------------------------------------- correctness cases


@dataclass(frozen=True)
class Ctx:
    """Where a case runs: this rank, the world size, the device of the states, the metrics' sync timeout."""

    rank: int
    world: int
    device: torch.device
    sync_timeout: float


@functools.lru_cache(maxsize=8)
def binary_data(kind: str, n: int = CASE_N) -> tuple[Tensor, Tensor]:
    """Deterministic scores (float32) and int64 labels: ``probs`` in [0, 1], ``logits`` or a ``grid`` with ties.

    The grid is ``k / 128``: exact in float16 and bfloat16, so the 16-bit mode must match scikit-learn exactly.
    """
    gen = torch.Generator().manual_seed(0)
    target = torch.randint(0, 2, (n,), generator=gen)
    if kind == "grid":
        preds = (torch.randint(0, 97, (n,), generator=gen) + 32 * target).float() / 128
    elif kind == "logits":  # negative scores: the wide (twice the width) sort keys
        preds = torch.randn(n, generator=gen) * 2 + target
    else:
        preds = torch.rand(n, generator=gen) * 0.8 + 0.2 * target
    return preds, target


@functools.lru_cache(maxsize=1)
def multiclass_data(n: int = CASE_N // 4) -> tuple[Tensor, Tensor]:
    """Softmax class scores ``(n, CLASSES)`` (in [0, 1]: no softmax is applied again) and class indices."""
    gen = torch.Generator().manual_seed(1)
    target = torch.randint(0, CLASSES, (n,), generator=gen)
    logits = torch.randn(n, CLASSES, generator=gen) + 1.5 * torch.nn.functional.one_hot(target, CLASSES)
    return logits.softmax(dim=1), target


def share(n: int, ctx: Ctx, empty_first: bool = False) -> slice:
    """This rank's contiguous share: rank r gets weight r + 1 (uneven), or r (rank 0 empty) with ``empty_first``."""
    weights = [r + (0 if empty_first else 1) for r in range(ctx.world)]
    if not sum(weights):
        weights = [1]
    cuts = [n * sum(weights[:r]) // sum(weights) for r in range(ctx.world + 1)]
    return slice(cuts[ctx.rank], cuts[ctx.rank + 1])


def sampler_rows(n: int, ctx: Ctx, rank: int | None = None) -> Tensor:
    """The indices a shuffling ``DistributedSampler(drop_last=False)`` deals to a rank, its padding included."""
    from torch.utils.data import DistributedSampler

    rank = ctx.rank if rank is None else rank
    dataset: Any = range(n)  # the sampler only needs len()
    return torch.tensor(list(DistributedSampler(dataset, num_replicas=ctx.world, rank=rank, shuffle=True, seed=0)))


def make(cls: Any, ctx: Ctx, **kwargs: Any) -> Any:
    """A metric with a bounded sync, its states on the case's device."""
    return cls(sync_timeout=ctx.sync_timeout, **kwargs).to(ctx.device)


def feed(metrics: Iterable[Any], preds: Tensor, target: Tensor, ctx: Ctx, ids: Tensor | None = None) -> None:
    """Update every metric batch by batch with the batches on the case's device."""
    metrics = list(metrics)
    for a in range(0, preds.shape[0], BATCH):
        extra = {} if ids is None else {"sample_ids": ids[a : a + BATCH].to(ctx.device)}
        p, t = preds[a : a + BATCH].to(ctx.device), target[a : a + BATCH].to(ctx.device)
        for metric in metrics:
            metric.update(p, t, **extra)


def values(metrics: dict[str, Any]) -> dict[str, list[float]]:
    """``compute()`` of every metric (on every rank, in the same order), as lists of floats."""
    return {name: m.compute().double().reshape(-1).cpu().tolist() for name, m in metrics.items()}


def _case_uneven(ctx: Ctx) -> dict[str, Any]:
    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

    preds, target = binary_data("probs")
    part = share(CASE_N, ctx)
    metrics = {"auroc": make(VarlenAUROC, ctx), "ap": make(VarlenAveragePrecision, ctx)}
    feed(metrics.values(), preds[part], target[part], ctx)
    return values(metrics)


def _case_empty_rank(ctx: Ctx) -> dict[str, Any]:
    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

    preds, target = binary_data("logits")
    part = share(CASE_N, ctx, empty_first=True)  # rank 0 never calls update()
    raw = {"normalization": None}  # rank the raw logits (no sigmoid): the wide sort keys, as scikit-learn does
    metrics = {"auroc": make(VarlenAUROC, ctx, **raw), "ap": make(VarlenAveragePrecision, ctx, **raw)}
    feed(metrics.values(), preds[part], target[part], ctx)
    return values(metrics)


def _case_dataset_size(ctx: Ctx) -> dict[str, Any]:
    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

    n = CASE_N + 1  # odd: the sampler pads when W = 2
    preds, target = binary_data("probs", n)
    rows = sampler_rows(n, ctx)
    metrics = {"auroc": make(VarlenAUROC, ctx, dataset_size=n), "ap": make(VarlenAveragePrecision, ctx, dataset_size=n)}
    feed(metrics.values(), preds[rows], target[rows], ctx)
    out = values(metrics)
    out["kept"] = [float(metrics["auroc"].sync_report.kept)]
    return out


def duplicated_rows(n: int, ctx: Ctx) -> Tensor:
    """Sampler rows (padding included) plus the first 500 rows of the next rank: every copy must count once."""
    return torch.cat([sampler_rows(n, ctx), sampler_rows(n, ctx, (ctx.rank + 1) % ctx.world)[:500]])


def _case_sample_ids(ctx: Ctx) -> dict[str, Any]:
    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

    n = CASE_N + 1
    preds, target = binary_data("probs", n)
    rows = duplicated_rows(n, ctx)
    metrics = {"auroc": make(VarlenAUROC, ctx), "ap": make(VarlenAveragePrecision, ctx)}
    feed(metrics.values(), preds[rows], target[rows], ctx, ids=rows)
    out = values(metrics)
    out["kept"] = [float(metrics["auroc"].sync_report.kept)]
    return out


def _case_on_rank0(ctx: Ctx) -> dict[str, Any]:
    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

    preds, target = binary_data("probs")
    part = share(CASE_N, ctx)
    metrics = {
        "auroc": make(VarlenAUROC, ctx, compute_on_rank=0),
        "ap": make(VarlenAveragePrecision, ctx, compute_on_rank=0),
    }
    feed(metrics.values(), preds[part], target[part], ctx)
    return values(metrics)


def _case_sharded(ctx: Ctx) -> dict[str, Any]:
    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

    preds, target = binary_data("grid")  # heavy ties: runs of equal scores cross the splitters and the chunk ends
    part = share(CASE_N, ctx)
    metrics = {
        "auroc": make(VarlenAUROC, ctx, compute_sharded=True),
        "ap": make(VarlenAveragePrecision, ctx, compute_sharded=True),
    }
    feed(metrics.values(), preds[part], target[part], ctx)
    n = CASE_N + 1
    preds, target = binary_data("probs", n)
    rows = duplicated_rows(n, ctx)
    with_ids = {"auroc, sample_ids": make(VarlenAUROC, ctx, compute_sharded=True)}  # rows routed by id first
    feed(with_ids.values(), preds[rows], target[rows], ctx, ids=rows)
    return {**values(metrics), **values(with_ids)}


def _case_compute_on_cpu(ctx: Ctx) -> dict[str, Any]:
    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

    preds, target = binary_data("probs")
    part = share(CASE_N, ctx)
    metrics = {
        "auroc": make(VarlenAUROC, ctx, compute_on_cpu=True),
        "ap, sharded": make(VarlenAveragePrecision, ctx, compute_on_cpu=True, compute_sharded=True),
        "auroc, on rank 0": make(VarlenAUROC, ctx, compute_on_cpu=True, compute_on_rank=0),
    }
    feed(metrics.values(), preds[part], target[part], ctx)
    return values(metrics)


def _case_multiclass(ctx: Ctx) -> dict[str, Any]:
    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

    preds, target = multiclass_data()
    part = share(preds.shape[0], ctx)
    task = {"task": "multiclass", "num_classes": CLASSES}
    metrics = {
        "auroc per class": make(VarlenAUROC, ctx, average="none", **task),
        "ap per class": make(VarlenAveragePrecision, ctx, average="none", **task),
        "auroc macro": make(VarlenAUROC, ctx, average="macro", **task),
        "auroc per class, sharded": make(VarlenAUROC, ctx, average="none", compute_sharded=True, **task),
    }
    feed(metrics.values(), preds[part], target[part], ctx)
    return values(metrics)


def _case_16bit(ctx: Ctx) -> dict[str, Any]:
    from torchmetrics_varlen import VarlenAUROC, VarlenAveragePrecision

    preds, target = binary_data("grid")
    part = share(CASE_N, ctx, empty_first=True)
    auroc = {"auroc float16": make(VarlenAUROC, ctx, thresholds=torch.float16)}
    ap = {"ap bfloat16": make(VarlenAveragePrecision, ctx, thresholds=torch.bfloat16)}
    feed(auroc.values(), preds[part].half(), target[part], ctx)
    feed(ap.values(), preds[part].bfloat16(), target[part], ctx)
    return {**values(auroc), **values(ap)}


def gather_inputs(rank: int) -> tuple[Tensor, Tensor]:
    """Rank ``rank``'s tensors for ``gather_varlen``: ``(1000 r, 3)`` float32 (rank 0 empty) and int64 rows."""
    rows = 1000 * rank
    floats = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) + 0.25 * rank
    ints = torch.arange(17 * rank + 3, dtype=torch.int64) - 5 * rank
    return floats, ints


def _case_gather_varlen(ctx: Ctx) -> dict[str, Any]:
    from torchmetrics_varlen import gather_varlen

    out: dict[str, list[float]] = {}
    mine = gather_inputs(ctx.rank)
    for i, name in enumerate(("float32 (n, 3)", "int64 (n,)")):
        got = gather_varlen(mine[i].to(ctx.device), sync_timeout=ctx.sync_timeout)
        want = torch.cat([gather_inputs(r)[i] for r in range(ctx.world)])
        same_shape = got.shape == want.shape and got.dtype == want.dtype
        error = (got.cpu().double() - want.double()).abs().max().item() if same_shape and want.numel() else 0.0
        out[f"{name}: max |error|"] = [error if same_shape else float("inf")]
        out[f"{name}: on {ctx.device.type}"] = [float(got.device.type == ctx.device.type)]
    return out


CASES: dict[str, Callable[[Ctx], dict[str, Any]]] = {
    "uneven shards": _case_uneven,
    "empty rank, logits": _case_empty_rank,
    "sampler padding, dataset_size": _case_dataset_size,
    "sample_ids, duplicates": _case_sample_ids,
    "compute_on_rank=0": _case_on_rank0,
    "compute_sharded=True": _case_sharded,
    "compute_on_cpu=True": _case_compute_on_cpu,
    "multiclass": _case_multiclass,
    "16-bit mode": _case_16bit,
    "gather_varlen": _case_gather_varlen,
}


@functools.lru_cache(maxsize=8)
def reference(kind: str, n: int = CASE_N) -> dict[str, list[float]]:
    """scikit-learn's AUROC and AP on the full binary data set."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    preds, target = binary_data(kind, n)
    p, t = preds.double().numpy(), target.numpy()
    return {"auroc": [float(roc_auc_score(t, p))], "ap": [float(average_precision_score(t, p))]}


def multiclass_reference() -> dict[str, list[float]]:
    """scikit-learn one-vs-rest per class on the full multiclass data set."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    preds, target = multiclass_data()
    p, t = preds.double().numpy(), target.numpy()
    auroc = [float(roc_auc_score(t == k, p[:, k])) for k in range(CLASSES)]
    ap = [float(average_precision_score(t == k, p[:, k])) for k in range(CLASSES)]
    return {
        "auroc per class": auroc,
        "ap per class": ap,
        "auroc macro": [sum(auroc) / CLASSES],
        "auroc per class, sharded": auroc,
    }


def expected(case: str, device_type: str) -> dict[str, list[float]]:
    """What every rank must return for ``case`` (scikit-learn on the full data, or exact values)."""
    probs, padded = reference("probs"), reference("probs", CASE_N + 1)
    grid = reference("grid")
    table: dict[str, Callable[[], dict[str, list[float]]]] = {
        "uneven shards": lambda: probs,
        "empty rank, logits": lambda: reference("logits"),
        "sampler padding, dataset_size": lambda: {**padded, "kept": [float(CASE_N + 1)]},
        "sample_ids, duplicates": lambda: {**padded, "kept": [float(CASE_N + 1)]},
        "compute_on_rank=0": lambda: probs,
        "compute_sharded=True": lambda: {**grid, "auroc, sample_ids": padded["auroc"]},
        "compute_on_cpu=True": lambda: {
            "auroc": probs["auroc"],
            "ap, sharded": probs["ap"],
            "auroc, on rank 0": probs["auroc"],
        },
        "multiclass": multiclass_reference,
        "16-bit mode": lambda: {"auroc float16": grid["auroc"], "ap bfloat16": grid["ap"]},
        "gather_varlen": lambda: {
            key: [value]
            for name in ("float32 (n, 3)", "int64 (n,)")
            for key, value in ((f"{name}: max |error|", 0.0), (f"{name}: on {device_type}", 1.0))
        },
    }
    return table[case]()


Outcome = tuple[str, Any, str, float]  # (status, value, error text, seconds) of one case on one rank


def compare(case: str, device_type: str, outcomes: dict[int, Outcome]) -> tuple[str, float | None, str]:
    """``(status, largest absolute error, details)`` of one case from every rank's outcome."""
    errors = [f"rank {r}: {o[2].strip()}" for r, o in sorted(outcomes.items()) if o[0] != "ok"]
    if errors:
        return "fail", None, "\n".join(errors)
    want = expected(case, device_type)
    worst, problems = 0.0, []
    for rank, (_, got, _, _) in sorted(outcomes.items()):
        if sorted(got) != sorted(want):
            problems.append(f"rank {rank}: returned {sorted(got)}, expected {sorted(want)}")
            continue
        for key, ref in want.items():
            if len(got[key]) != len(ref):
                problems.append(f"rank {rank}: {key} has {len(got[key])} values, expected {len(ref)}")
                continue
            for value, truth in zip(got[key], ref, strict=True):
                error = abs(value - truth)
                worst = max(worst, error) if error == error else float("inf")  # NaN is never within tolerance
                if not error <= TOL:
                    problems.append(f"rank {rank}: {key} = {value!r}, expected {truth!r}")
    return ("fail" if problems else "pass"), worst, "\n".join(problems)


# ------------------------------------------------------------------------------------------- the spawned ranks


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}\n{traceback.format_exc()}"


def _rank_main(
    rank: int,
    world: int,
    backend: str,
    device_type: str,
    init_file: str,
    cases: list[str],
    results: Any,
    timeouts: tuple[float, float],
    forced: bool = False,
) -> None:
    """One spawned rank: join the group, run the cases in order, send one result per case through ``results``.

    ``forced``: the cases run under ``force_device_path()`` (the CPU dry run's check of the device path).
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    pg_timeout, sync_timeout = timeouts
    device = torch.device("cuda", 0) if device_type == "cuda" else torch.device("cpu")
    try:
        if device.type == "cuda":
            torch.cuda.set_device(device)  # the ranks share the one GPU (gloo); NCCL runs one rank
        dist.init_process_group(
            backend,
            init_method=f"file://{init_file}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=pg_timeout),
        )
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        results.send((rank, cases[0], "error", None, "joining the process group: " + _describe(err), 0.0))
        return
    ctx = Ctx(rank, world, device, sync_timeout)
    from torchmetrics_varlen.functional._device import force_device_path

    with force_device_path() if forced else contextlib.nullcontext():
        for name in cases:
            started = time.monotonic()
            try:
                value = CASES[name](ctx)
                results.send((rank, name, "ok", value, "", time.monotonic() - started))
            except BaseException as err:  # noqa: BLE001 - reported to the parent, which decides
                results.send((rank, name, "error", None, _describe(err), time.monotonic() - started))
    dist.destroy_process_group()


@dataclass
class CaseResult:
    """One correctness case on one backend and world size."""

    backend: str
    world: int
    device: str
    case: str
    status: str  # "pass", "fail" or "not run"
    max_abs_error: float | None  # None when some rank returned no value
    seconds: float  # the slowest rank
    detail: str = ""
    path: str = ""  # "device": the package's device path (CUDA tensors, or forced on CPU ones); "cpu": its CPU path


@dataclass
class Group:
    """How one set of ranks runs: backend, world size, device of the states, timeouts, deadline."""

    backend: str
    world: int
    device_type: str
    pg_timeout: float
    sync_timeout: float
    deadline: float  # time.monotonic() after which the ranks are killed
    forced: bool = False  # CPU tensors take the device path (force_device_path() in every rank)

    @property
    def path(self) -> str:
        """Which implementation the package takes for the states: ``"device"`` or ``"cpu"``."""
        return "device" if self.forced or self.device_type != "cpu" else "cpu"


class _Ranks:
    """The spawned ranks of one group running a list of cases, and what they reported so far.

    Each rank sends its results through its own pipe, synchronously: a result sent just before the rank dies still
    arrives. A rank that dies is a failure of the case it was in; a rank that has not reported a case
    ``sync_timeout + 15`` seconds after another rank did (or by the deadline) is hung.
    """

    def __init__(self, group: Group, todo: list[str], init_file: str) -> None:
        ctx = mp.get_context("spawn")
        self.group = group
        self.got: dict[str, dict[int, Outcome]] = {c: {} for c in todo}
        self.first_seen: dict[str, float] = {}
        self.procs: list[Any] = []
        self.readers: list[Any] = []
        timeouts = (group.pg_timeout, group.sync_timeout)
        for rank in range(group.world):
            reader, writer = ctx.Pipe(duplex=False)
            args = (rank, group.world, group.backend, group.device_type, init_file, todo, writer, timeouts)
            args += (group.forced,)
            proc = ctx.Process(target=_rank_main, args=args, daemon=True)
            proc.start()
            writer.close()  # the rank holds the only writing end now
            self.procs.append(proc)
            self.readers.append(reader)

    def _record(self, case: str, rank: int, outcome: Outcome) -> None:
        self.got[case][rank] = outcome
        self.first_seen.setdefault(case, time.monotonic())

    def poll(self, case: str) -> None:
        """Read what arrives within 0.2 s; on silence, mark dead ranks, and hung ones past the grace or deadline."""
        ready: list[Any] = mp_connection.wait(self.readers, timeout=0.2)
        for conn in ready:
            try:
                rank, name, *outcome = conn.recv()
            except EOFError:  # the rank exited: every result it sent was read before the end of its pipe
                self.readers.remove(conn)
                continue
            self._record(name, rank, (outcome[0], outcome[1], outcome[2], outcome[3]))
        if ready:
            return
        for rank, proc in enumerate(self.procs):
            if not proc.is_alive() and rank not in self.got[case]:
                self._record(case, rank, ("died", None, f"the rank died (exit code {proc.exitcode})", 0.0))
        now = time.monotonic()
        late = case in self.first_seen and now > self.first_seen[case] + self.group.sync_timeout + 15
        if late or now > self.group.deadline:
            why = "long after another rank reported this case" if late else "before the deadline"
            for rank in set(range(self.group.world)) - set(self.got[case]):
                self._record(case, rank, ("hung", None, f"no result {why}: killed", 0.0))

    def close(self, clean: bool) -> None:
        """Let ranks that finished exit (``clean``), kill the others."""
        for proc in self.procs:
            proc.join(timeout=10 if clean else 0.1)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
        for reader in self.readers:
            reader.close()


def _one_spawn(group: Group, todo: list[str]) -> tuple[list[CaseResult], list[str]]:
    """Run ``todo`` in fresh ranks up to the first case that does not pass; return the results and the cases left."""
    out: list[CaseResult] = []
    pending = list(todo)
    with tempfile.TemporaryDirectory() as tmp:
        ranks = _Ranks(group, todo, os.path.join(tmp, "store"))
        try:
            while pending:
                ranks.poll(pending[0])
                while pending and len(ranks.got[pending[0]]) == group.world:
                    out.append(_conclude(group, pending[0], ranks.got[pending.pop(0)]))
                    if out[-1].status != "pass":
                        return out, pending  # the ranks may be out of step now: fresh ones for the rest
        finally:
            ranks.close(clean=not out or out[-1].status == "pass")
    return out, pending


def _conclude(group: Group, case: str, outcomes: dict[int, Outcome]) -> CaseResult:
    status, worst, detail = compare(case, group.device_type, outcomes)
    seconds = max(o[3] for o in outcomes.values())
    args = (group.backend, group.world, group.device_type, case, status, worst, seconds, detail)
    return CaseResult(*args, path=group.path)


def run_group(group: Group, cases: list[str]) -> list[CaseResult]:
    """Every case on one group of spawned ranks; a failing case does not stop the others."""
    results: list[CaseResult] = []
    todo = list(cases)
    while todo:
        if time.monotonic() >= group.deadline:
            why = "time budget spent before this case"
            args = (group.backend, group.world, group.device_type)
            results += [CaseResult(*args, case, "not run", None, 0.0, why, group.path) for case in todo]
            break
        done, todo = _one_spawn(group, todo)
        results += done
    return results


# ------------------------------------------------------------------------------------------------------ timings

BENCH_VARIANTS = [
    "torch.sort",  # all but the two 16-bit ones are benchmarks/bench_exact.py's variants, run as they are there
    "varlen auroc",
    "VarlenAUROC update+compute",
    "BinaryAUROC update+compute",
    "16-bit: VarlenAUROC(thresholds=float16), float16 scores",
    "varlen ap",
    "16-bit: VarlenAUROC(thresholds=bfloat16), float32 scores",
]
PARTS = ("updates", "sigmoid", "dist", "bench", "small")  # the sections, in the order they run
INPUT_BYTES_PER_SAMPLE = 12  # float32 score + int64 label


def device_data(n: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """bench_exact's data (float32 probabilities, int64 labels), generated on ``device``."""
    gen = torch.Generator(device=device).manual_seed(0)
    target = torch.randint(0, 2, (n,), device=device, generator=gen)
    preds = torch.rand(n, device=device, generator=gen).mul_(0.8).add_(target, alpha=0.2)
    return preds, target


def _nbytes(*tensors: Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def bench_fn(name: str, preds: Tensor, target: Tensor, device: torch.device) -> tuple[Callable[[], Any], int]:
    """The call to time for variant ``name`` and the bytes of its input."""
    if name.startswith("16-bit"):
        from torchmetrics_varlen import VarlenAUROC

        half = "float16" in name
        scores = preds.half() if half else preds
        dtype = torch.float16 if half else torch.bfloat16

        def run16() -> Any:
            metric = VarlenAUROC(thresholds=dtype, validate_args=False).to(device)  # the histogram state there
            metric.update(scores, target)
            return metric.compute()

        return run16, _nbytes(scores, target)
    from bench_exact import _variant

    return _variant(name, preds, target), _nbytes(preds, target)


def _synced(fn: Callable[[], Any], device: torch.device) -> Callable[[], Any]:
    if device.type != "cuda":
        return fn

    def run() -> Any:
        out = fn()
        torch.cuda.synchronize()  # every call ends idle, so the next one starts on an idle device
        return out

    return run


def peak_extra(fn: Callable[[], Any], device: torch.device) -> int:
    """Peak memory of one call above the level at its start: CUDA allocator on a GPU, RSS on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        return int(torch.cuda.max_memory_allocated() - base)
    from _measure import PeakRSS

    with PeakRSS() as mem:
        fn()
    return int(mem.extra)


def _free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def measure(
    name: str, n: int, data: tuple[Tensor, Tensor], device: torch.device, repeats: int, deadline: float
) -> dict[str, Any]:
    """One variant at one size: peak memory of the first call, then the median of up to ``repeats`` calls."""
    from _measure import median_time

    row: dict[str, Any] = {"n": n, "variant": name, "seconds": None, "repeats": 0, "note": ""}
    try:
        fn, row["input_bytes"] = bench_fn(name, *data, device)
        synced = _synced(fn, device)
        start = time.perf_counter()
        row["peak_extra_bytes"] = peak_extra(synced, device)
        row["first_call_s"] = first = time.perf_counter() - start
        affordable = int((deadline - time.monotonic()) / max(first, 1e-6)) - 1  # median_time warms up once more
        row["repeats"] = max(0, min(repeats, affordable))
        if row["repeats"]:
            row["seconds"] = median_time(synced, row["repeats"])
        else:
            row["seconds"] = first
            row["note"] = "time budget: first call only (with its warm-up costs)"
        if 0 < row["repeats"] < repeats:
            row["note"] = f"time budget: median of {row['repeats']}"
        del fn, synced
    except torch.OutOfMemoryError:
        row["note"] = "out of GPU memory"
    except Exception as err:  # noqa: BLE001 - a crash on the device path is a finding: recorded, the rest goes on
        row["note"] = f"error: {type(err).__name__}: {_first_line(str(err))}"
        row["error"] = _describe(err)
    finally:
        _free_memory()
    return row


def _skip_size(n: int, device: torch.device, mem_factor: float) -> str:
    """Why size ``n`` cannot run here, or ``""``."""
    if device.type != "cuda":
        return ""
    free, _ = torch.cuda.mem_get_info()
    need = (1 + mem_factor) * n * INPUT_BYTES_PER_SAMPLE
    if free < need:
        return f"skipped: needs ~{need / GIB:.1f} GiB free (input x {1 + mem_factor:g}), {free / GIB:.1f} GiB free"
    return ""


def bench(
    sizes: list[int], device: torch.device, repeats: int, deadline: float, mem_factor: float, report: Any
) -> None:
    """Every variant at every size, in order, within the deadline and the free memory: rows appended to the report's
    ``timings``, the report saved after each.
    """
    rows: list[dict[str, Any]] = report.data["timings"]
    warm = device_data(1000, device)
    for name in BENCH_VARIANTS:  # imports, lazy initialisation and kernels, on small data
        with contextlib.suppress(Exception):  # an error raises again, and is recorded, in measure()
            _synced(bench_fn(name, *warm, device)[0], device)()
    del warm
    last_first: dict[str, tuple[int, float]] = {}
    for n in sizes:
        _free_memory()
        skip = _skip_size(n, device, mem_factor)
        if skip:
            rows.append({"n": n, "variant": "(all)", "seconds": None, "repeats": 0, "note": skip})
            continue
        data = device_data(n, device)
        for name in BENCH_VARIANTS:
            prev_n, prev_first = last_first.get(name, (n, 0.0))
            if time.monotonic() + prev_first * n / prev_n > deadline:
                rows.append({"n": n, "variant": name, "seconds": None, "repeats": 0, "note": "skipped: time budget"})
                continue
            rows.append(measure(name, n, data, device, repeats, deadline))
            report.save()
            if rows[-1].get("first_call_s") is not None:
                last_first[name] = (n, rows[-1]["first_call_s"])
        del data
    _free_memory()


def small_batches(n: int, batch: int, device: torch.device, deadline: float) -> list[dict[str, Any]]:
    """The shape validation loops have (issue 20): ``n`` scores fed in batches of ``batch`` to ``VarlenAUROC`` and
    to torchmetrics' ``BinaryAUROC``, and to ``VarlenAUROC`` in one piece. One pass each (``n / batch`` updates is
    already many calls), ``torch.cuda.synchronize()`` after the updates and after ``compute()``: seconds per update
    and of ``compute()``. Per-piece kernel launches show here, not in the one-piece timings.
    """
    import torchmetrics.classification as tmc

    import torchmetrics_varlen as tv

    preds, target = device_data(n, device)
    variants: list[tuple[str, Callable[[], Any], int]] = [
        (f"VarlenAUROC, B = {batch}", lambda: tv.VarlenAUROC(validate_args=False).to(device), batch),
        (f"BinaryAUROC, B = {batch}", lambda: tmc.BinaryAUROC(validate_args=False).to(device), batch),
        ("VarlenAUROC, one piece", lambda: tv.VarlenAUROC(validate_args=False).to(device), n),
    ]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows: list[dict[str, Any]] = []
    for name, make, b in variants:
        row: dict[str, Any] = {"n": n, "batch": b, "variant": name, "update_s": None, "compute_s": None, "note": ""}
        rows.append(row)
        if time.monotonic() > deadline:
            row["note"] = "skipped: time budget"
            continue
        try:
            warm = make()  # kernels and lazy initialisation on a few batches
            for s in range(0, min(n, 8 * b), b):
                warm.update(preds[s : s + b], target[s : s + b])
            warm.compute()
            metric = make()
            sync()
            start = time.perf_counter()
            for s in range(0, n, b):
                metric.update(preds[s : s + b], target[s : s + b])
            sync()
            updated = time.perf_counter()
            row["value"] = float(metric.compute())
            sync()
            row["compute_s"] = time.perf_counter() - updated
            row["update_s"] = (updated - start) / -(-n // b)
        except Exception as err:  # noqa: BLE001 - a crash on the device path is a finding: recorded, the rest goes on
            row["note"] = f"error: {type(err).__name__}: {_first_line(str(err))}"
            row["error"] = _describe(err)
        finally:
            _free_memory()
    return rows


def _judge(at: str, what: str, value: float | None, op: str, bound: float, n: int | None = None) -> dict[str, Any]:
    met = None if value is None else (value <= bound if op == "<=" else value < bound if op == "<" else value >= bound)
    return {"at": at, "n": n, "target": f"{what} {op} {bound:g}", "measured": value, "met": met}


def small_batch_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 20's targets on the small-batch rows: compute at B vs one piece and vs torchmetrics."""
    at = {r["variant"].split(",")[0] + (" one" if "one piece" in r["variant"] else ""): r for r in rows}
    ours, theirs, one = at.get("VarlenAUROC"), at.get("BinaryAUROC"), at.get("VarlenAUROC one")

    def ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str) -> float | None:
        return a[key] / b[key] if a and b and a.get(key) and b.get(key) else None

    n = rows[0]["n"]
    where = f"N = {n:.0e}, B = {rows[0]['batch']}"
    return [
        _judge(
            where,
            "`VarlenAUROC` compute after small batches / after one piece",
            ratio(ours, one, "compute_s"),
            "<=",
            1.3,
            n,
        ),
        _judge(
            where,
            "`VarlenAUROC` / `BinaryAUROC` compute after small batches",
            ratio(ours, theirs, "compute_s"),
            "<=",
            0.35,
            n,
        ),
        _judge(
            where, "`VarlenAUROC` / `BinaryAUROC` update per small batch", ratio(ours, theirs, "update_s"), "<=", 1.0, n
        ),
    ]


def rate_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 37's small-batch target: ``VarlenAUROC.update()`` no slower than torchmetrics' per batch."""
    at = {r["variant"]: r for r in rows if r.get("update_s")}
    if not rows:
        return []
    value = at["VarlenAUROC"]["update_s"] / at["BinaryAUROC"]["update_s"] if len(at) == 2 else None
    where = f"{rows[0]['updates']:,} x B = {rows[0]['batch']}"
    return [_judge(where, "`VarlenAUROC` / `BinaryAUROC` update() time per batch", value, "<=", 1.0)]


SIXTEEN = {
    "float16 scores": "16-bit: VarlenAUROC(thresholds=float16), float16 scores",
    "bfloat16, float32 scores": "16-bit: VarlenAUROC(thresholds=bfloat16), float32 scores",
}


def targets(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """Issue 37's targets at size ``n``, as ratios to the competitor timed in the same process (never asserted)."""
    at = {r["variant"]: r for r in rows if r["n"] == n and r.get("seconds") and r["repeats"]}

    def ratio(num: str, den: str) -> float | None:
        return at[num]["seconds"] / at[den]["seconds"] if num in at and den in at else None

    def memory(name: str) -> float | None:
        return at[name]["peak_extra_bytes"] / at[name]["input_bytes"] if name in at else None

    where = f"N = {n:.0e}"
    out = [
        _judge(
            where,
            "exact `auroc` time / one `torch.sort` of the scores",
            ratio("varlen auroc", "torch.sort"),
            "<=",
            1.5,
            n,
        ),
        _judge(
            where,
            "`VarlenAUROC` / torchmetrics `BinaryAUROC` time (update + compute)",
            ratio("VarlenAUROC update+compute", "BinaryAUROC update+compute"),
            "<",
            1.0,
            n,
        ),
    ]
    for name, label in (
        ("varlen auroc", "exact `auroc`"),
        ("VarlenAUROC update+compute", "`VarlenAUROC` update + compute"),
        ("varlen ap", "exact `average_precision`"),
    ):
        out.append(_judge(where, f"peak memory above the input / the input, {label}", memory(name), "<=", 2.0, n))
    for label, name in SIXTEEN.items():
        what = f"16-bit mode ({label}, update + compute) time / one `torch.sort`"
        out.append(_judge(where, what, ratio(name, "torch.sort"), "<=", 0.2, n))
    return out


# ------------------------------------------------------------------------------------- host syncs of update()

SYNC_BATCH = 8192  # above the 4,096 logits from which the float32 sigmoid used to test its rounding on the host
SYNC_WARM = 1  # warm-up batches (lazy initialisation, first-batch work), not counted
SYNC_COUNTED = 3  # batches whose host synchronisations are counted, one count per update()


def _sync_batches(kind: str, device: torch.device, count: int) -> list[tuple[Tensor, Tensor]]:
    """``count`` batches of ``SYNC_BATCH`` samples of one input kind, generated on ``device`` before any counting."""
    gen = torch.Generator(device=device).manual_seed(2)
    out = []
    for _ in range(count):
        shape = (SYNC_BATCH, CLASSES) if kind in ("multiclass", "multilabel") else (SYNC_BATCH,)
        logits = torch.randn(shape, device=device, generator=gen) * 3
        if kind == "multiclass":
            target = torch.randint(0, CLASSES, (SYNC_BATCH,), device=device, generator=gen)
        else:
            target = torch.randint(0, 2, shape, device=device, generator=gen)
        preds = {
            "probs": lambda x: x.sigmoid(),
            "float16 probs": lambda x: x.sigmoid().half(),
            "bfloat16 logits": lambda x: x.bfloat16(),
        }.get(kind, lambda x: x)(logits)
        out.append((preds, target))
    return out


# (case, input kind, constructor keywords); ``dataset_size`` is filled in (the number of samples fed), and every
# case runs with ``validate_args=False`` then ``True``.
SYNC_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("VarlenAUROC, probabilities", "probs", {}),
    ("VarlenAUROC, float32 logits", "logits", {}),
    ("VarlenAUROC, bfloat16 logits", "bfloat16 logits", {}),
    ("VarlenAUROC, dataset_size", "probs", {"dataset_size": None}),
    ("16-bit mode (float16), float16 probabilities", "float16 probs", {"thresholds": torch.float16}),
    ("16-bit mode (bfloat16), float32 logits", "logits", {"thresholds": torch.bfloat16}),
    ("VarlenMulticlassAUROC", "multiclass", {"task": "multiclass", "num_classes": CLASSES}),
    ("VarlenMultilabelAUROC", "multilabel", {"task": "multilabel", "num_labels": CLASSES}),
]


def _package_frame(stack: traceback.StackSummary | list[traceback.FrameSummary]) -> str:
    """The innermost frame of the package (else of anything but this file and torch) as ``path:line: code``."""
    frames = [f for f in stack if os.sep + "torchmetrics_varlen" + os.sep in f.filename]
    frames = frames or [f for f in stack if f.filename != __file__ and os.sep + "torch" + os.sep not in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{os.path.relpath(f.filename, _ROOT)}:{f.lineno} in {f.name}: {(f.line or '').strip()}"


def _load_sync_counter() -> Any:
    """``tests/_syncs.py``'s ``HostSyncCounter``, loaded by path (a ``tests`` package elsewhere cannot shadow it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_varlen_syncs", os.path.join(_ROOT, "tests", "_syncs.py"))
    if spec is None or spec.loader is None:
        msg = "tests/_syncs.py not found"
        raise ImportError(msg)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HostSyncCounter


class _SyncProbe:
    """Counts the host synchronisations of each call it wraps, and the places they happened.

    On CUDA: ``torch.cuda.set_sync_debug_mode("warn")``, each warning counted with the Python stack that raised it.
    On CPU (the dry run, under ``force_device_path()``): ``tests/_syncs.py``'s ``HostSyncCounter``, which counts the
    calls that would read a GPU tensor back (``item``, ``tolist``, ``__bool__``, ``nonzero``, boolean masks, ...).
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.sites: list[str] = []  # "kind at path:line in function: code" of every sync, each place once
        if not self.cuda:
            base = _load_sync_counter()
            probe = self

            class Counter(base):  # type: ignore[misc, valid-type]
                def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                    before = dict(self.counts)
                    out = super().__torch_function__(func, types, args, kwargs)
                    if self.counts != before:
                        kind = next(k for k in self.counts if self.counts[k] != before.get(k, 0))
                        probe.seen(kind, traceback.extract_stack()[:-1])
                    return out

            self._counter_cls = Counter

    def count(self, fn: Callable[[], Any]) -> int:
        """Host synchronisations made by ``fn()``."""
        if not self.cuda:
            with self._counter_cls() as counter:
                fn()
            return int(counter.total)
        import warnings

        seen = [0]

        def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            if "synchroniz" in str(message):
                seen[0] += 1
                self.seen("synchronizing CUDA operation", traceback.extract_stack()[:-1])
            else:
                print(f"warning during the sync check: {category.__name__}: {message}")

        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            torch.cuda.set_sync_debug_mode("warn")
            try:
                fn()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        return seen[0]

    def seen(self, kind: str, stack: traceback.StackSummary) -> None:
        """Record one sync of ``kind`` made at the innermost package frame of ``stack``."""
        site = f"{kind} at {_package_frame(stack)}"
        if site not in self.sites:
            self.sites.append(site)


def _raise_on_sync(fn: Callable[[], Any]) -> str:
    """CUDA only: ``fn()`` under ``torch.cuda.set_sync_debug_mode("error")``; ``""``, or the first sync's error."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as err:
        tb = traceback.extract_tb(err.__traceback__)
        return f"{_first_line(str(err))} at {_package_frame(tb)}"
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return ""


def _sync_case(name: str, kind: str, kwargs: dict[str, Any], validate: bool, device: torch.device) -> dict[str, Any]:
    """One case: a warm-up batch, then the host syncs of each of ``SYNC_COUNTED`` updates (and on CUDA the error
    mode's first sync, ``validate_args=False``).
    """
    import torchmetrics_varlen as tv

    allowed = 1 if validate else 0
    row: dict[str, Any] = {"case": name, "validate_args": validate, "batch": SYNC_BATCH, "allowed": allowed}
    row.update(syncs=None, status="error", first_sync="", detail="")
    batches = _sync_batches(kind, device, SYNC_WARM + SYNC_COUNTED)
    kwargs = dict(kwargs)
    if "dataset_size" in kwargs:  # one process: a DistributedSampler adds no padding, every position counts
        kwargs["dataset_size"] = SYNC_BATCH * len(batches)
    try:
        metric = tv.VarlenAUROC(validate_args=validate, **kwargs).to(device)
        for preds, target in batches[:SYNC_WARM]:
            metric.update(preds, target)
        probe = _SyncProbe(device)
        row["syncs"] = [probe.count(functools.partial(metric.update, p, t)) for p, t in batches[SYNC_WARM:]]
        row["first_sync"] = probe.sites[0] if probe.sites else ""
        row["sync_sites"] = probe.sites  # every place that synced, in the order first seen
        row["value"] = float(metric.compute().double().mean())  # it still computes after the counted updates
        if device.type == "cuda" and not validate:  # the same updates again, a fresh metric: the first sync raises
            again = tv.VarlenAUROC(validate_args=validate, **kwargs).to(device)
            again.update(*batches[0])
            row["detail"] = _raise_on_sync(lambda: [again.update(p, t) for p, t in batches[SYNC_WARM:]])
        syncs_ok = max(row["syncs"]) <= allowed and not row["detail"]
        row["status"] = "pass" if syncs_ok else "syncs"
    except Exception as err:  # noqa: BLE001 - a crash in update() is a finding: recorded, the rest goes on
        row["status"], row["detail"] = "error", _describe(err)
    finally:
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode(0)
    return row


def update_syncs(device: torch.device, rows: list[dict[str, Any]], save: Callable[[], None], deadline: float) -> None:
    """Every ``SYNC_CASES`` case with ``validate_args=False`` and ``True``, appended to ``rows`` (saved after each)."""
    for name, kind, kwargs in SYNC_CASES:
        for validate in (False, True):
            if time.monotonic() > deadline:
                rows.append({"case": name, "validate_args": validate, "status": "not run", "detail": "time budget"})
            else:
                rows.append(_sync_case(name, kind, kwargs, validate, device))
            save()


# ------------------------------------------------------------------------------------- sigmoid, position-free

SIGMOID_OFFSETS = (1, 2, 3, 4, 5, 7, 8, 13, 31, 64, 127)
SIGMOID_SIZES = (1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 33, 127, 128, 129, 4095, 4096, 4097, 65535, 65537)


def _sigmoid_logits(n: int, device: torch.device) -> Tensor:
    """``n`` float32 logits: a grid over [-120, 120] (saturation on both sides), then normal ones of scale 8."""
    grid = torch.linspace(-120, 120, min(n, 24_001), device=device)
    gen = torch.Generator(device=device).manual_seed(3)
    return torch.cat([grid, torch.randn(n - grid.numel(), device=device, generator=gen) * 8])


def _mismatches(fn: Callable[[Tensor], Tensor], x: Tensor) -> dict[str, int]:
    """Elements of ``fn`` on ``x`` whose bits change with the element's position or the tensor's size or layout."""
    ref = fn(x)
    bits = torch.int32 if ref.dtype == torch.float32 else torch.int64

    def diff(got: Tensor, want: Tensor) -> int:
        return int((got.contiguous().view(bits) != want.contiguous().view(bits)).sum())

    out = {"offsets": 0, "sizes": 0, "strided": 0, "in place": 0}
    for offset in SIGMOID_OFFSETS:
        buf = torch.empty(x.numel() + offset, dtype=x.dtype, device=x.device)
        buf[offset:] = x
        out["offsets"] += diff(fn(buf)[offset:], ref)
    for size in SIGMOID_SIZES:
        for start in (0, 1, 1000):
            if start + size <= x.numel():
                out["sizes"] += diff(fn(x[start : start + size].clone()), ref[start : start + size])
    wide = torch.stack([x, -x], dim=1)  # x at every other element: a non-contiguous view
    out["strided"] = diff(fn(wide[:, 0]), ref)
    out["in place"] = diff(x.clone().sigmoid_() if fn is torch.sigmoid else fn(x.clone()), ref)
    return out


def sigmoid_check(n: int, device: torch.device) -> dict[str, Any]:
    """Whether the device's sigmoid gives an element the same bits at every position, size and layout.

    ``torch.sigmoid`` on float32 (and float64), and the package's normalisation (``functional._normalize.sigmoid``,
    position-free by construction); plus how many float32 results differ from the float64 sigmoid rounded once (the
    value the CPU path stores). On CPU torch's own sigmoid is not position-free: the package refines it there.
    """
    from torchmetrics_varlen.functional import _normalize

    x = _sigmoid_logits(n, device)
    out: dict[str, Any] = {
        "n": n,
        "device": device.type,
        "offsets": list(SIGMOID_OFFSETS),
        "sizes": list(SIGMOID_SIZES),
    }
    ours = getattr(_normalize, "sigmoid", None)  # the package's normalisation, if it is still there by that name
    variants: dict[str, tuple[Callable[[Tensor], Tensor], Tensor]] = {
        "torch.sigmoid, float32": (torch.sigmoid, x),
        "torch.sigmoid, float64": (torch.sigmoid, x.double()),
    }
    if ours is not None:
        variants["package sigmoid, float32"] = (ours, x)
    for name, (fn, data) in variants.items():
        found = _mismatches(fn, data)
        out[name] = {**found, "position_free": not any(found.values())}
    rounded_once = x.double().sigmoid().float()
    out["torch.sigmoid float32 != float64 sigmoid rounded once"] = int((x.sigmoid() != rounded_once).sum())
    if ours is not None:
        out["package sigmoid != float64 sigmoid rounded once"] = int((ours(x) != rounded_once).sum())
    out["position_free"] = out["torch.sigmoid, float32"]["position_free"]
    return out


# ------------------------------------------------------------------------------- small batches: update() rate


def update_rate(device: torch.device, batch: int, count: int) -> list[dict[str, Any]]:
    """``count`` updates of ``batch`` samples, after 20 warm-up ones, timed with a device sync at both ends:
    ``VarlenAUROC`` against torchmetrics' ``BinaryAUROC`` (``validate_args=False``), seconds per update.
    """
    import torchmetrics.classification as tmc

    import torchmetrics_varlen as tv

    preds, target = device_data(batch * 64, device)
    pieces = [(preds[i : i + batch], target[i : i + batch]) for i in range(0, preds.numel(), batch)]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = []
    makers = {"VarlenAUROC": tv.VarlenAUROC, "BinaryAUROC": tmc.BinaryAUROC}
    for name, cls in makers.items():
        row: dict[str, Any] = {"variant": name, "batch": batch, "updates": count, "update_s": None, "note": ""}
        try:
            metric = cls(validate_args=False).to(device)
            for p, t in pieces[:20]:
                metric.update(p, t)
            sync()
            start = time.perf_counter()
            for i in range(count):
                p, t = pieces[i % len(pieces)]
                metric.update(p, t)
            sync()
            row["update_s"] = (time.perf_counter() - start) / count
        except Exception as err:  # noqa: BLE001 - recorded, the rest goes on
            row["note"] = f"error: {type(err).__name__}: {_first_line(str(err))}"
            row["error"] = _describe(err)
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------------- output


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[0][:200] if lines else ""


def print_cases(cases: list[CaseResult]) -> None:
    """Markdown table of the correctness cases, then the first line of each failure."""
    print("\n| backend | W | states on | path | case | result | max abs error | seconds |")
    print("|---|---:|---|---|---|---|---:|---:|")
    for c in cases:
        err = "-" if c.max_abs_error is None else f"{c.max_abs_error:.1e}"
        row = f"{c.backend} | {c.world} | {c.device} | {c.path} | {c.case} | {c.status} | {err} | {c.seconds:.2f}"
        print(f"| {row} |")
    for c in cases:
        if c.status != "pass":
            print(f"- {c.backend} W={c.world} `{c.case}`: {_first_line(c.detail)}")


def print_timings(rows: list[dict[str, Any]], device: torch.device) -> None:
    """Markdown table of the timings with ratios to ``torch.sort`` and ``BinaryAUROC`` at the same N."""
    memory = "peak extra MiB (CUDA allocator)" if device.type == "cuda" else "peak extra MiB (RSS)"
    print(f"\n| N | variant | seconds | / `torch.sort` | / `BinaryAUROC` | {memory} | / input | repeats | note |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        same = {r["variant"]: r.get("seconds") for r in rows if r["n"] == row["n"]}
        sec = row.get("seconds")
        sort, tm = same.get("torch.sort"), same.get("BinaryAUROC update+compute")
        extra = row.get("peak_extra_bytes")
        print(
            f"| {row['n']:.0e} | {row['variant']} | {_fmt(sec)} | {_fmt(sec / sort if sec and sort else None, 2)}"
            f" | {_fmt(sec / tm if sec and tm else None, 2)} | {_fmt(None if extra is None else extra / 2**20, 1)}"
            f" | {_fmt(None if extra is None else extra / row['input_bytes'], 2)} | {row['repeats']} | {row['note']} |"
        )


def print_small_batches(rows: list[dict[str, Any]]) -> None:
    """Markdown table of the small-batch rows."""
    print("\n| N | B | variant | update, us per batch | compute, s | value | note |")
    print("|---:|---:|---|---:|---:|---:|---|")
    for r in rows:
        upd = None if r.get("update_s") is None else r["update_s"] * 1e6
        print(
            f"| {r['n']:.0e} | {r['batch']} | {r['variant']} | {_fmt(upd, 1)} | {_fmt(r.get('compute_s'))}"
            f" | {_fmt(r.get('value'), 6)} | {r['note']} |"
        )


def print_update_syncs(rows: list[dict[str, Any]]) -> None:
    """Markdown table of the update() sync check, then where each failing case synced first."""
    print(f"\n| update() case (batches of {SYNC_BATCH}) | validate_args | host syncs per update | allowed | result |")
    print("|---|---|---|---:|---|")
    for r in rows:
        syncs = "-" if r.get("syncs") is None else ", ".join(map(str, r["syncs"]))
        print(f"| {r['case']} | {r['validate_args']} | {syncs} | {r.get('allowed', '-')} | {r['status']} |")
    for r in rows:
        if r["status"] != "pass":
            where = "; ".join(r.get("sync_sites") or [])
            error = _first_line(r.get("detail") or "") if r["status"] == "error" else r.get("detail") or ""
            print(f"- {r['case']}, validate_args={r['validate_args']}: {' | '.join(x for x in (where, error) if x)}")


def print_sigmoid(check: dict[str, Any]) -> None:
    """Markdown table of the sigmoid check."""
    head = f"sigmoid on {check['device']}, {check['n']} logits | bits moved: offsets | sizes | strided | in place"
    print(f"\n| {head} | position-free |\n|---|---:|---:|---:|---:|---|")
    for name in ("torch.sigmoid, float32", "torch.sigmoid, float64", "package sigmoid, float32"):
        if name not in check:
            continue
        v = check[name]
        print(f"| {name} | {v['offsets']} | {v['sizes']} | {v['strided']} | {v['in place']} | {v['position_free']} |")
    for key in (
        "torch.sigmoid float32 != float64 sigmoid rounded once",
        "package sigmoid != float64 sigmoid rounded once",
    ):
        if key in check:
            print(f"- {key}: {check[key]} of {check['n']}")


def print_targets(checks: list[dict[str, Any]]) -> None:
    """Markdown table of the targets: measured ratio and met / not met."""
    print("\n| at | target | measured | met |")
    print("|---|---|---:|---|")
    for t in checks:
        met = "not measured" if t["met"] is None else ("**met**" if t["met"] else "**not met**")
        print(f"| {t['at']} | {t['target']} | {_fmt(t['measured'], 3)} | {met} |")


def _summary(data: dict[str, Any]) -> list[tuple[str, str]]:
    """One line per section: what it found."""
    cases, syncs, sig = data["cases"], data["update_syncs"], data["sigmoid"]
    lines = []
    if cases:
        lines.append(("correctness", f"{sum(c['status'] == 'pass' for c in cases)}/{len(cases)} cases pass"))
    if syncs:
        status = [r["status"] for r in syncs]
        more = "".join(f", {status.count(s)} {s}" for s in ("syncs", "error", "not run") if s in status)
        lines.append(("update() host syncs (cases x validate_args)", f"{status.count('pass')}/{len(syncs)} pass{more}"))
    if sig:
        free = "position-free" if sig["position_free"] else "NOT position-free"
        free += "" if sig["device"] == "cuda" else " (expected on CPU: the package refines it there)"
        lines.append((f"float32 sigmoid on {sig['device']}", free))
    measured = [t for t in data["targets"] if t["met"] is not None]
    if data["targets"]:
        met = sum(bool(t["met"]) for t in measured)
        lines.append(
            (
                "targets",
                f"{met} met, {len(measured) - met} not met, {len(data['targets']) - len(measured)} not measured",
            )
        )
    crashed = [f"{r['variant']}" for r in data["timings"] + data["small_batches"] + data["update_rate"] if "error" in r]
    if crashed:
        lines.append(("timed calls that raised", "; ".join(crashed)))
    for name, err in data["section_errors"].items():
        lines.append((f"section {name} raised", _first_line(err)))
    return lines


def print_report(data: dict[str, Any], device: torch.device, out_path: str) -> int:
    """Every table, then the compact summary; the exit status (see :func:`main`)."""
    if data["update_syncs"]:
        print_update_syncs(data["update_syncs"])
    if data["sigmoid"]:
        print_sigmoid(data["sigmoid"])
    if data["cases"]:
        print_cases([CaseResult(**c) for c in data["cases"]])
    if data["timings"]:
        print_timings(data["timings"], device)
    if data["small_batches"]:
        print_small_batches(data["small_batches"])
    if data["targets"]:
        print_targets(data["targets"])
    print("\n| section | result |\n|---|---|")
    for section, result in _summary(data):
        print(f"| {section} | {result} |")
    print(f"\n{data['elapsed_s']:.0f} s; JSON: {out_path}")
    if device.type != "cuda":
        print("no CUDA device: this was the CPU dry run (device path forced); nothing above is a GPU measurement.")
    failed = any(c["status"] != "pass" for c in data["cases"]) or data["section_errors"]
    crashed = any("error" in r for r in data["timings"] + data["small_batches"] + data["update_rate"])
    return 1 if failed or crashed or any(r["status"] == "error" for r in data["update_syncs"]) else 0


def environment(device: torch.device) -> dict[str, Any]:
    """Versions and the device, for the JSON."""
    import sklearn
    import torchmetrics

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchmetrics": torchmetrics.__version__,
        "scikit-learn": sklearn.__version__,
        "cuda": torch.version.cuda,
        "device": "cpu (dry run)",
        "nccl": dist.is_nccl_available(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(device=props.name, gpu_memory_gib=round(props.total_memory / GIB, 1))
    return env


# --------------------------------------------------------------------------------------------------------- main


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default=None, help="comma-separated N (default 1e7,1e8,5e8; no CUDA: 2000,20000)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per variant (default 5; no CUDA: 2)")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"what to run, in this order: {', '.join(PARTS)} (default: all)"
    )
    parser.add_argument(
        "--small-batch", default=None, help="N,B of the small-batch case (default 1e7,256; no CUDA: 20000,256)"
    )
    parser.add_argument("--rate-batch", type=int, default=256, help="batch of the update() rate target (256)")
    parser.add_argument("--rate-updates", type=int, default=1000, help="updates timed for that target (1000)")
    parser.add_argument("--sigmoid-size", type=int, default=None, help="logits of the sigmoid check (2**22; CPU 2**16)")
    parser.add_argument("--out", default=None, help="JSON file (default $OUT/device_check.json, ./device_check.json)")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for everything, imports included")
    parser.add_argument("--dist-budget", type=float, default=170.0, help="seconds from start for the distributed part")
    parser.add_argument(
        "--target-size", type=float, default=None, help="N at which the targets are judged (1e8; no CUDA: largest)"
    )
    parser.add_argument("--mem-factor", type=float, default=12.0, help="free GPU memory needed per input byte")
    return parser.parse_args(argv)


def _use_checkout() -> None:
    """Import the package from this checkout, and the benchmark helpers beside this file (ranks inherit it)."""
    for path in (_HERE, _ROOT):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)


def run_distributed(cuda: bool, dist_deadline: float) -> list[CaseResult]:
    """The cases on W = 2 over gloo, then on W = 1 over NCCL (gloo on CPU).

    Without CUDA, the W = 2 ranks take the package's device path (``force_device_path()``) and the W = 1 rank its
    CPU path, so the dry run checks both against scikit-learn. The first group may use half of the time left to
    ``dist_deadline``, the second whatever is left then.
    """
    device_type = "cuda" if cuda else "cpu"
    results: list[CaseResult] = []
    runs = [("gloo", 2), ("nccl" if cuda else "gloo", 1)]
    for i, (backend, world) in enumerate(runs):
        now = time.monotonic()
        deadline = now + (dist_deadline - now) / (len(runs) - i)
        group = Group(backend, world, device_type, pg_timeout=60, sync_timeout=20, deadline=deadline)
        group.forced = not cuda and world > 1
        if backend == "nccl" and not dist.is_nccl_available():
            args = (backend, world, device_type)
            results += [CaseResult(*args, c, "not run", None, 0.0, "NCCL is not available", "device") for c in CASES]
            continue
        results += run_group(group, list(CASES))
    return results


class Report:
    """The JSON report, written again (atomically) after every section and every timed row: a crash keeps the rest."""

    def __init__(self, path: str, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.save()

    def save(self) -> None:
        """Write the report as it is now."""
        self.data["elapsed_s"] = time.monotonic() - _STARTED
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(_jsonable(self.data), fh, indent=1, default=str)
        os.replace(tmp, self.path)


def _sizes(text: str | None, default: str) -> list[int]:
    return [int(float(s)) for s in (text or default).split(",")]


def _run_sections(args: argparse.Namespace, device: torch.device, report: Report) -> None:
    """Each section of ``--parts`` in turn, within the budget; a section that raises is recorded, the next runs."""
    from torchmetrics_varlen.functional._device import force_device_path

    cuda, data = device.type == "cuda", report.data
    deadline = _STARTED + args.budget - 5
    sizes = _sizes(args.sizes, "1e7,1e8,5e8" if cuda else "2000,20000")
    small_n, small_b = _sizes(args.small_batch, "1e7,256" if cuda else "20000,256")
    target_n = int(args.target_size or (1e8 if cuda else max(sizes)))
    data.update(sizes=sizes, cases=[], update_syncs=[], sigmoid={}, timings=[], small_batches=[], update_rate=[])
    data.update(targets=[], section_errors={})
    sections: dict[str, Callable[[], None]] = {
        "updates": lambda: update_syncs(device, data["update_syncs"], report.save, deadline),
        "sigmoid": lambda: data.update(sigmoid=sigmoid_check(args.sigmoid_size or (2**22 if cuda else 2**16), device)),
        "dist": lambda: data.update(cases=[asdict(c) for c in run_distributed(cuda, _STARTED + args.dist_budget)]),
        "bench": lambda: bench(sizes, device, args.repeats or (5 if cuda else 2), deadline, args.mem_factor, report),
        "small": lambda: data.update(
            small_batches=small_batches(small_n, small_b, device, deadline),
            update_rate=update_rate(device, args.rate_batch, args.rate_updates),
        ),
    }
    parts = args.parts.split(",")
    for name in sections:
        if name not in parts:
            continue
        print(f"[{time.monotonic() - _STARTED:5.0f} s] {name}", flush=True)
        # the dry run exercises the device path on CPU tensors (the distributed cases choose per group)
        forced = contextlib.nullcontext() if cuda or name == "dist" else force_device_path()
        try:
            with forced:
                sections[name]()
        except Exception as err:  # noqa: BLE001 - recorded; the next section still runs
            data["section_errors"][name] = _describe(err)
            print(f"section {name} raised: {type(err).__name__}: {_first_line(str(err))}", flush=True)
        _free_memory()
        data["targets"] = targets(data["timings"], target_n) + rate_targets(data["update_rate"])
        data["targets"] += small_batch_targets(data["small_batches"]) if data["small_batches"] else []
        report.save()


def _jsonable(obj: Any) -> Any:
    """``obj`` with non-finite floats as strings (strict JSON has no NaN or Infinity)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    """Run the check; 1 if a correctness case did not pass, an update() or a timed call raised, or a section did."""
    args = _parse_args(argv)
    _use_checkout()
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a kill keeps what was printed
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    out_path = args.out or os.path.join(os.environ.get("OUT") or ".", "device_check.json")
    if not cuda:
        print("no CUDA device: dry run of the same code on CPU at tiny sizes, the device path forced on CPU tensors")
    report = Report(out_path, {"environment": environment(device), "dry_run": not cuda})
    print("environment: " + ", ".join(f"{k} {v}" for k, v in report.data["environment"].items()))
    _run_sections(args, device, report)
    return print_report(report.data, device, out_path)


if __name__ == "__main__":
    sys.exit(main())
