"""Every batch size validation loops use: N scores fed in batches of B to this package's class and to the matching
torchmetrics class (or collection), in the same process, on the same data.

For each class and each B it prints the cost of one ``update()`` (microseconds per batch, ``validate_args`` on and
off), of ``compute()`` after the N / B updates (milliseconds), the ratios ours / torchmetrics, and ours after B-sized
batches / ours after the same data in one piece (what the number of ``update()`` calls costs at compute time).
Nothing is asserted: the ratios are the result.

    python benchmarks/bench_batches.py --num-samples 2000000 --batches 64,512,4096,65536 --repeats 3

``--dataset-size`` / ``--sample-ids`` add the update cost of our class built with ``dataset_size=N`` / fed
``sample_ids`` (with ``validate_args=True``), against torchmetrics' plain update (it has neither), and with
``--sample-ids`` the compute after those updates (deduplicated by id) against torchmetrics' plain compute;
``--update-only`` skips ``compute()`` (faster, for the update columns); ``--interleave`` alternates the classes run
by run (steadier ratios on a loaded host).

By default every batch is a slice of tensors made before the loop, so each ``update()`` reads its batch from memory
(cold caches: at B = 65,536 a batch is 1.3 MiB). ``--warm`` copies each batch just before its ``update()``, outside
the timed region, as a validation loop hands over a batch the DataLoader and the model have just written (in cache):
the update then costs what its own work costs, not the memory reads, for both libraries alike.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

BATCHES = (64, 512, 4096, 65536)
NUM_CLASSES = 10


def _data(kind: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Probabilities, or with ``--logits`` the logits of the same scores (every batch then gets normalised)."""
    gen = torch.Generator().manual_seed(0)
    if kind == "multiclass":
        target = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        logits = torch.randn(n, NUM_CLASSES, generator=gen) + 2 * torch.nn.functional.one_hot(target, NUM_CLASSES)
        return (logits if LOGITS else torch.softmax(logits, dim=1)), target
    if kind == "multilabel":
        target = torch.randint(0, 2, (n, NUM_CLASSES), generator=gen)
        probs = torch.rand(n, NUM_CLASSES, generator=gen) * 0.8 + 0.2 * target
        return (torch.logit(probs) if LOGITS else probs), target
    target = torch.randint(0, 2, (n,), generator=gen)
    probs = torch.rand(n, generator=gen) * 0.8 + 0.2 * target
    return (torch.logit(probs) if LOGITS else probs), target


def _cases() -> dict[str, tuple[str, Callable[[bool], Any], Callable[[bool], Any] | None, dict[str, Any]]]:
    """Each class: (data kind, ours(validate_args), torchmetrics'(validate_args) or None, extra update kwargs)."""
    import torchmetrics.classification as tmc
    from torchmetrics import MetricCollection

    import torchmetrics_varlen as tv

    mc = {"num_classes": NUM_CLASSES}
    ml = {"num_labels": NUM_CLASSES}
    return {
        "AUROC": ("binary", lambda v: tv.VarlenAUROC(validate_args=v), lambda v: tmc.BinaryAUROC(validate_args=v), {}),
        "AveragePrecision": (
            "binary",
            lambda v: tv.VarlenAveragePrecision(validate_args=v),
            lambda v: tmc.BinaryAveragePrecision(validate_args=v),
            {},
        ),
        "MulticlassAUROC": (
            "multiclass",
            lambda v: tv.VarlenMulticlassAUROC(**mc, validate_args=v),
            lambda v: tmc.MulticlassAUROC(**mc, validate_args=v),
            {},
        ),
        "MultilabelAUROC": (
            "multilabel",
            lambda v: tv.VarlenMultilabelAUROC(**ml, validate_args=v),
            lambda v: tmc.MultilabelAUROC(**ml, validate_args=v),
            {},
        ),
        "ROC": ("binary", lambda v: tv.VarlenROC(validate_args=v), lambda v: tmc.BinaryROC(validate_args=v), {}),
        "PrecisionRecallCurve": (
            "binary",
            lambda v: tv.VarlenPrecisionRecallCurve(validate_args=v),
            lambda v: tmc.BinaryPrecisionRecallCurve(validate_args=v),
            {},
        ),
        "BestF1": (
            "binary",
            lambda v: tv.VarlenBestF1(validate_args=v),
            lambda v: tmc.BinaryPrecisionRecallCurve(validate_args=v),  # the curve best F1 is read from
            {},
        ),
        "GroupAUROC": ("binary", lambda v: tv.VarlenGroupAUROC(validate_args=v), None, {"groups": True}),
        "AUROC bfloat16": (
            "binary",
            lambda v: tv.VarlenAUROC(thresholds=torch.bfloat16, validate_args=v),
            lambda v: tmc.BinaryAUROC(validate_args=v),
            {},
        ),
        "Varlen(BinaryAUROC)": (
            "binary",
            lambda v: tv.Varlen(tmc.BinaryAUROC(validate_args=v)),
            lambda v: tmc.BinaryAUROC(validate_args=v),
            {},
        ),
        "VarlenCollection": (
            "binary",
            lambda v: tv.VarlenCollection(
                {"auroc": tv.VarlenAUROC(validate_args=v), "ap": tv.VarlenAveragePrecision(validate_args=v)}
            ),
            lambda v: MetricCollection(
                {"auroc": tmc.BinaryAUROC(validate_args=v), "ap": tmc.BinaryAveragePrecision(validate_args=v)}
            ),
            {},
        ),
    }


CLOCK = time.perf_counter  # --clock cpu: time.process_time (CPU seconds of this process: steadier on a loaded host)
COMPUTE = True  # --update-only sets it False
INTERLEAVE = False  # --interleave: one run of each variant per round
LOGITS = False  # --logits: logits instead of probabilities (the sigmoid / softmax runs in every update)
WARM = False  # --warm: each batch copied (into the caches) just before its update, outside the timed region


def _clock_cost() -> float:
    """What reading the clock twice costs (the median of many tries): taken out of each batch timed on its own."""
    tries = []
    for _ in range(1001):
        start = CLOCK()
        tries.append(CLOCK() - start)
    return statistics.median(tries)


def _fresh(batch: tuple[Any, ...]) -> tuple[Any, ...]:
    """A copy of ``batch`` (its tensors, also in the keyword arguments), just written: in the caches."""
    preds, target, kwargs = batch
    return preds.clone(), target.clone(), {k: v.clone() for k, v in kwargs.items()}


def _run(make: Callable[[bool], Any], batches: list[tuple[Any, ...]], validate: bool) -> tuple[float, float]:
    """(seconds per update, seconds of compute) for one pass over ``batches``."""
    metric = make(validate)
    gc.collect()
    if WARM:
        spent = -_clock_cost() * len(batches)  # each batch is timed on its own: the clock's own cost taken out
        for batch in batches:
            preds, target, kwargs = _fresh(batch)
            start = CLOCK()
            metric.update(preds, target, **kwargs)
            spent += CLOCK() - start
    else:
        start = CLOCK()
        for batch in batches:
            metric.update(*batch[:2], **batch[2])
        spent = CLOCK() - start
    updated = CLOCK()
    if COMPUTE:
        metric.compute()
    done = CLOCK()
    return spent / len(batches), done - updated


def _median(make: Callable[[bool], Any], batches: list[tuple[Any, ...]], validate: bool, repeats: int) -> list[float]:
    runs = [_run(make, batches, validate) for _ in range(repeats)]
    return [statistics.median(r[i] for r in runs) for i in range(2)]


def _medians(
    makers: list[Callable[[bool], Any]], batches: list[list[tuple[Any, ...]]], validate: bool, repeats: int
) -> list[list[float]]:
    """:func:`_median` of each maker (with its batches); with ``--interleave`` one run of each per round, so that a
    loaded host slows them alike.
    """
    if not INTERLEAVE:
        return [_median(m, b, validate, repeats) for m, b in zip(makers, batches, strict=True)]
    rounds = [[_run(m, b, validate) for m, b in zip(makers, batches, strict=True)] for _ in range(repeats)]
    return [[statistics.median(r[k][i] for r in rounds) for i in range(2)] for k in range(len(makers))]


def _with_dataset_size(make: Callable[[bool], Any], n: int) -> Callable[[bool], Any]:
    """The same metric built with ``dataset_size=n`` (one process: nothing is padding, the rule still runs)."""

    def build(validate: bool) -> Any:
        metric = make(validate)
        kwargs: dict[str, Any] = {"dataset_size": n}
        import torchmetrics_varlen as tv

        if isinstance(metric, tv.Varlen):
            return tv.Varlen(metric.metric, dataset_size=n)
        if isinstance(metric, tv.VarlenCollection):
            return tv.VarlenCollection(dict(metric.items(keep_base=True)), dataset_size=n)
        return type(metric)(**{**_init_kwargs(metric), **kwargs})

    return build


def _init_kwargs(metric: Any) -> dict[str, Any]:
    """The constructor arguments the benchmark's classes were built with (task sizes, thresholds, validate_args)."""
    out: dict[str, Any] = {"validate_args": metric.validate_args}
    for key in ("num_classes", "num_labels"):
        if getattr(metric, key, None) is not None:
            out[key] = getattr(metric, key)
    if metric.mode.kind != "exact":
        out["thresholds"] = metric.mode.dtype
    return out


def measure(name: str, n: int, sizes: list[int], repeats: int, dedup: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Rows of the table for one class."""
    kind, ours, theirs, extra = _cases()[name]
    preds, target = _data(kind, n)
    groups = torch.arange(n) // 50 if extra.get("groups") else None

    ids = torch.arange(n)

    def split(b: int, with_ids: bool = False) -> list[tuple[Any, ...]]:
        out = []
        for s in range(0, n, b):
            kw = {"groups": groups[s : s + b]} if groups is not None else {}
            if with_ids:
                kw["sample_ids"] = ids[s : s + b]
            out.append((preds[s : s + b], target[s : s + b], kw))
        return out

    whole = split(n)
    _run(ours, split(min(sizes))[:20] or whole, True)  # warm-up: imports, lazy initialisation
    one_piece = _median(ours, whole, False, repeats)[1]
    rows = []
    for b in sizes:
        batches = split(b)
        row: dict[str, Any] = {"class": name, "n": n, "batch": b, "one_piece_compute_s": one_piece}
        for validate in (True, False):
            makers, feeds, keys = [ours], [batches], ["ours"]
            if theirs is not None:
                makers, feeds, keys = [*makers, theirs], [*feeds, batches], [*keys, "tm"]
            if validate and "dataset_size" in dedup:
                makers, feeds, keys = [*makers, _with_dataset_size(ours, n)], [*feeds, batches], [*keys, "ds"]
            if validate and "sample_ids" in dedup and " bfloat16" not in name:  # ids need the exact mode
                makers, feeds, keys = [*makers, ours], [*feeds, split(b, with_ids=True)], [*keys, "ids"]
            for key, (upd, comp) in zip(keys, _medians(makers, feeds, validate, repeats), strict=True):
                if key in ("ds", "ids"):
                    row[f"ours_update_s_{key}"] = upd
                    if key == "ids" and COMPUTE:
                        row["ours_compute_s_ids"] = comp  # the sort-free dedup by id, then the metric
                else:
                    row[f"{key}_update_s_{validate}"], row[f"{key}_compute_s_{validate}"] = upd, comp
        rows.append(row)
    return rows


def _ratio(a: float | None, b: float | None) -> str:
    return "   n/a" if a is None or b is None else f"{a / b:6.2f}"


def main() -> None:
    """Measure every class at every batch size; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-samples", type=int, default=2_000_000)
    parser.add_argument("--batches", default=",".join(str(b) for b in BATCHES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--classes", default=",".join(_cases()))
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="cpu: CPU time of the process (for a loaded host)"
    )
    parser.add_argument("--dataset-size", action="store_true", help="also: update with dataset_size=N")
    parser.add_argument("--sample-ids", action="store_true", help="also: update with sample_ids")
    parser.add_argument("--update-only", action="store_true", help="skip compute()")
    parser.add_argument(
        "--interleave", action="store_true", help="alternate ours, torchmetrics' and the variants run by run"
    )
    parser.add_argument(
        "--warm", action="store_true", help="copy each batch just before its update (in cache, as a loop hands it)"
    )
    parser.add_argument("--logits", action="store_true", help="feed logits: every update normalises its batch")
    args = parser.parse_args()
    global CLOCK, COMPUTE, INTERLEAVE, LOGITS, WARM
    INTERLEAVE, LOGITS, WARM = args.interleave, args.logits, args.warm
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":
        CLOCK = time.process_time
    COMPUTE = not args.update_only
    dedup = tuple(k for k in ("dataset_size", "sample_ids") if getattr(args, k))
    sizes = [int(b) for b in args.batches.split(",")]
    rows = [r for c in args.classes.split(",") for r in measure(c, args.num_samples, sizes, args.repeats, dedup)]
    print(
        f"N = {args.num_samples:,}; update in us per batch, compute in ms; ratios ours / torchmetrics;"
        f" {torch.get_num_threads()} threads, {args.clock} clock, batches {'warm' if WARM else 'cold'}"
    )
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    head = (
        f"{'class':22} {'B':>6} {'upd':>8} {'tm upd':>8} {'ratio':>6} {'upd nv':>8} {'ratio':>6}"
        f" {'compute':>9} {'tm comp':>9} {'ratio':>6} {'/1piece':>7}"
    )
    print(head)
    for r in rows:
        us, ms = 1e6, 1e3
        tm_u, tm_c = r.get("tm_update_s_True"), r.get("tm_compute_s_True")
        print(
            f"{r['class']:22} {r['batch']:>6} {r['ours_update_s_True'] * us:8.1f}"
            f" {(tm_u or float('nan')) * us:8.1f} {_ratio(r['ours_update_s_True'], tm_u)}"
            f" {r['ours_update_s_False'] * us:8.1f} {_ratio(r['ours_update_s_False'], r.get('tm_update_s_False'))}"
            f" {r['ours_compute_s_True'] * ms:9.1f} {(tm_c or float('nan')) * ms:9.1f}"
            f" {_ratio(r['ours_compute_s_True'], tm_c)} {_ratio(r['ours_compute_s_True'], r['one_piece_compute_s'])}"
            + "".join(
                f" {label} {r[key] * us:8.1f} {_ratio(r[key], tm_u)}"
                for key, label in (("ours_update_s_ds", "ds"), ("ours_update_s_ids", "ids"))
                if key in r
            )
            + (
                f" ids comp {r['ours_compute_s_ids'] * ms:7.1f} {_ratio(r['ours_compute_s_ids'], tm_c)}"
                if "ours_compute_s_ids" in r
                else ""
            )
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
