"""Regenerate the documentation's figures from code (run by ``nox -s docs`` before the build).

- ``figures/auroc_vs_world_size.png``: ``python -m torchmetrics_varlen demo --plot ...``; the same run's output
  also refreshes the demo excerpt in ``pages/guide.md`` (between its ``demo-excerpt`` markers), so the guide never
  shows a stale table.
- the guide's table of tied logits (between its ``ties-table`` markers): ``benchmarks/bench_ties.py --markdown``.
- ``figures/roc_curve.png``: ``VarlenROC().plot()`` on rank 0 after a sync over 3 CPU ranks with uneven shards
  (rank 0 has no data).
- ``figures/uncertainty_width.png``: the width of DeLong's 95% interval (``functional.auroc_interval``) against N,
  1e2 to 1e6, for one fixed synthetic model (AUROC about 0.84).
- ``figures/compute_vs_batch.png``: ``compute()`` after N scores fed in batches of B, against B, as a ratio to the
  same data in one piece and to torchmetrics' class, from the rows ``benchmarks/bench_batches.py --json`` wrote
  (``pages/data/bench_batches.json``, the run the performance page's table shows).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pages")
FIGURES = os.path.join(PAGES, "figures")
EXCERPT = re.compile(r"(<!-- demo-excerpt:start -->\n)(.*?)(<!-- demo-excerpt:end -->)", re.DOTALL)


def demo_excerpt(output: str) -> str:
    """The guide's excerpt of the demo's table: its header and, for every world size, the rows with batch size 8
    whose ``drop_last`` equals ``shuffle`` (one plain and one shuffled-and-truncated configuration per W).
    """
    lines = output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("W "))
    rows = []
    for line in lines[head + 2 :]:
        fields = line.split()
        if len(fields) < 4 or not fields[0].isdigit():
            break
        if fields[1] == "8" and fields[2] == fields[3]:
            rows.append(line)
    return "\n".join(["```text", lines[head], *rows, "```", ""])


def refresh_guide(output: str, marker: str = "demo-excerpt") -> None:
    """Replace the text between the guide's ``marker`` comments with ``output`` (for the demo: its excerpt)."""
    path = os.path.join(PAGES, "guide.md")
    pattern = (
        EXCERPT
        if marker == "demo-excerpt"
        else re.compile(rf"(<!-- {marker}:start -->\n)(.*?)(<!-- {marker}:end -->)", re.DOTALL)
    )
    with open(path) as fh:
        text = fh.read()
    if not pattern.search(text):
        msg = f"{path}: no <!-- {marker}:start --> ... <!-- {marker}:end --> markers"
        raise SystemExit(msg)
    body = demo_excerpt(output) if marker == "demo-excerpt" else output
    with open(path, "w") as fh:
        fh.write(pattern.sub(lambda m: m.group(1) + body + m.group(3), text))


BATCH_ROWS = os.path.join(PAGES, "data", "bench_batches.json")


def _roc_rank(rank: int, world: int, store: str, path: str) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    from torchmetrics_varlen import VarlenROC

    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    gen = torch.Generator().manual_seed(0)
    target = torch.randint(0, 2, (300,), generator=gen)
    preds = torch.rand(300, generator=gen) * 0.7 + 0.3 * target
    start, stop = [(0, 0), (0, 110), (110, 300)][rank]
    metric = VarlenROC(sync_timeout=30)
    if stop > start:
        metric.update(preds[start:stop], target[start:stop])
    curve = metric.compute()  # every rank
    if rank == 0:
        fig, _ = metric.plot(curve)
        fig.set_size_inches(5, 4.2)
        fig.savefig(path, dpi=110)
    dist.destroy_process_group()


def _uncertainty_width(path: str) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from torchmetrics_varlen.functional import auroc_interval

    sizes = [int(10**e) for e in (2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6)]
    widths = []
    for n in sizes:
        gen = torch.Generator().manual_seed(n)
        target = torch.randint(0, 2, (n,), generator=gen)
        preds = torch.sigmoid(torch.randn(n, generator=gen, dtype=torch.float64) + 1.4 * target)  # binormal, d' = 1.4
        iv = auroc_interval(preds, target)
        widths.append(float(iv.upper - iv.lower))
    fig, ax = plt.subplots(figsize=(5, 4.2))
    ax.loglog(sizes, widths, "o-", label="DeLong 95% interval")
    ax.loglog(sizes, [widths[0] * (sizes[0] / n) ** 0.5 for n in sizes], "--", color="grey", label="1 / sqrt(N)")
    ax.set_xlabel("samples N (half positive)")
    ax.set_ylabel("interval width (upper - lower)")
    ax.set_title("AUROC interval width, binormal model (AUROC 0.84)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _compute_vs_batch(rows_path: str, path: str) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    with open(rows_path) as fh:
        rows = json.load(fh)
    fig, (one, tm) = plt.subplots(1, 2, figsize=(10, 4.2), sharex=True)
    names = list(dict.fromkeys(r["class"] for r in rows))
    for i, name in enumerate(names):
        mine = sorted((r for r in rows if r["class"] == name), key=lambda r: r["batch"])
        sizes = [r["batch"] for r in mine]
        style = {"color": plt.get_cmap("tab20")(i % 20), "marker": "osd^v<>"[i % 7], "label": name}
        one.plot(sizes, [r["ours_compute_s_True"] / r["one_piece_compute_s"] for r in mine], **style)
        if all("tm_compute_s_True" in r for r in mine):
            tm.plot(sizes, [r["ours_compute_s_True"] / r["tm_compute_s_True"] for r in mine], **style)
    for ax, bound, what in ((one, 1.3, "the same data in one piece"), (tm, 0.35, "torchmetrics' class")):
        ax.axhline(bound, color="grey", linestyle="--", label=f"target {bound:g}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size B (samples per update())")
        ax.set_ylabel(f"compute() time / {what}")
    one.set_title(f"compute() after B-sized batches, N = {rows[0]['n']:,}")
    tm.set_title("against torchmetrics, same batches")
    one.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    """Write every figure."""
    os.makedirs(FIGURES, exist_ok=True)
    demo = [
        sys.executable,
        "-m",
        "torchmetrics_varlen",
        "demo",
        "--plot",
        os.path.join(FIGURES, "auroc_vs_world_size.png"),
    ]
    refresh_guide(subprocess.run(demo, check=True, capture_output=True, text=True).stdout)
    ties = [sys.executable, os.path.join(os.path.dirname(PAGES), "..", "benchmarks", "bench_ties.py"), "--markdown"]
    refresh_guide(subprocess.run(ties, check=True, capture_output=True, text=True).stdout, marker="ties-table")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(
            _roc_rank, args=(3, os.path.join(tmp, "store"), os.path.join(FIGURES, "roc_curve.png")), nprocs=3, join=True
        )
    _uncertainty_width(os.path.join(FIGURES, "uncertainty_width.png"))
    _compute_vs_batch(BATCH_ROWS, os.path.join(FIGURES, "compute_vs_batch.png"))
    print(f"figures written to {FIGURES}")


if __name__ == "__main__":
    main()
