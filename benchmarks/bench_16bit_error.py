"""How far the 16-bit modes are from the exact float32 AUROC / AP when the scores are float32.

``thresholds=torch.bfloat16`` / ``torch.float16`` is exact for scores that *are* 16-bit; float32 scores are rounded
first, which merges nearby scores into ties. This prints the absolute error on a few score distributions, each
ranked as given (``normalization=None``: the logits row rounds the logits, not their sigmoid).

    python benchmarks/bench_16bit_error.py
"""

from __future__ import annotations

import torch

from torchmetrics_varlen.functional import auroc, average_precision


def main() -> None:
    """Print |16-bit - exact| for AUROC and AP."""
    n = 1_000_000
    gen = torch.Generator().manual_seed(0)
    print(f"{'scores':34} {'dtype':9} {'|dAUROC|':>10} {'|dAP|':>10}")
    for name, make in [
        ("sigmoid(N(0, 2)) probabilities", lambda: torch.sigmoid(torch.randn(n, generator=gen) * 2)),
        ("uniform(0, 1)", lambda: torch.rand(n, generator=gen)),
        ("logits N(0, 3)", lambda: torch.randn(n, generator=gen) * 3),
        ("probabilities near 1 (0.99 + U/100)", lambda: 0.99 + torch.rand(n, generator=gen) / 100),
    ]:
        scores = make()
        target = (torch.rand(n, generator=gen) < (scores - scores.min()) / (scores.max() - scores.min())).long()
        raw = {"normalization": None}
        exact = (float(auroc(scores, target, **raw)), float(average_precision(scores, target, **raw)))
        for dtype in (torch.bfloat16, torch.float16):
            approx = (
                float(auroc(scores, target, thresholds=dtype, **raw)),
                float(average_precision(scores, target, thresholds=dtype, **raw)),
            )
            print(
                f"{name:34} {str(dtype).split('.')[1]:9}"
                f" {abs(approx[0] - exact[0]):10.2e} {abs(approx[1] - exact[1]):10.2e}"
            )


if __name__ == "__main__":
    main()
