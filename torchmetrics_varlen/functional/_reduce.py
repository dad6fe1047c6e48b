"""Reduce: a scalar statistic (AUROC, average precision) of every binary problem, averaged over classes.

The last step of the functional path: validate (``_checks``), format (``_tasks``), order and count (``_count``),
reduce (here, with the exact sums of ``_ranking``). The sharded compute reduces its distributed sums here too.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch
from torch import Tensor

from torchmetrics_varlen.functional._count import Binned, Problem, problem_device
from torchmetrics_varlen.functional._ranking import RankSums, as_output, rank_sums
from torchmetrics_varlen.functional._tasks import Average, Split


class SumsNeeded(NamedTuple):
    """The parts of :class:`RankSums` a statistic is computed from (the others are not computed)."""

    area: bool
    ap: bool


class RankStatistic(NamedTuple):
    """A scalar statistic of binary problems (AUROC, average precision) in every mode.

    Attributes:
        name: For messages (``"AUROC"``).
        needs: The rank sums it is computed from (exact and 16-bit modes, sharded compute).
        from_sums: Its exact float64 value from the sums; ``warn`` gives torchmetrics' one-class warnings.
        from_binned: Its float64 value from one binned problem ``(confmat (T, 2, 2), thresholds)``.
        defined: Whether it is defined for ``(positives, negatives)``; undefined classes leave the averages.
    """

    name: str
    needs: SumsNeeded
    from_sums: Callable[[RankSums, torch.device, bool], Tensor]
    from_binned: Callable[[Tensor, Tensor], Tensor]
    defined: Callable[[int, int], bool]


def average_over_classes(values: Tensor, support: Tensor, average: Average, what: str) -> Tensor:
    """Average per-class values; classes whose value is undefined (NaN) are left out, with a warning."""
    if average in (None, "none"):
        return values
    defined = ~torch.isnan(values)
    if not bool(defined.all()):
        missing = torch.nonzero(~defined).flatten().tolist()
        warnings.warn(
            f"{what} is undefined for column(s) {missing} (no positive or no negative samples); they are left out of"
            f" the {average} average.",
            UserWarning,
            stacklevel=4,
        )
    if not bool(defined.any()):
        return torch.tensor(float("nan"), dtype=torch.float64, device=values.device)
    if average == "weighted":
        weights = support[defined].double()
        return (values[defined] * weights).sum() / weights.sum()
    return values[defined].mean()


def _reduce(
    values: list[Callable[[bool], Tensor]],
    sizes: list[tuple[int, int]],
    split: Split,
    statistic: RankStatistic,
    device: torch.device,
) -> Tensor:
    """One problem: its value (with its warnings); one per class: NaN where undefined, reduced by ``average``."""
    if not split.per_class:
        return as_output(values[0](True))
    pairs = zip(values, sizes, strict=True)
    per_class = [float(v(False)) if statistic.defined(p, a - p) else float("nan") for v, (p, a) in pairs]
    support = torch.tensor([p for p, _ in sizes], device=device)
    per = torch.tensor(per_class, dtype=torch.float64, device=device)
    return as_output(average_over_classes(per, support, split.average, statistic.name))


def reduce_sums(sums: list[RankSums], split: Split, statistic: RankStatistic, device: torch.device) -> Tensor:
    """The statistic of every problem from its :class:`RankSums`, reduced by ``split.average`` (float32)."""
    values: list[Callable[[bool], Tensor]] = [partial(statistic.from_sums, s, device) for s in sums]
    return _reduce(values, [(s.n_pos, s.n_all) for s in sums], split, statistic, device)


def _binned_value(statistic: RankStatistic, problem: Binned, _warn: bool) -> Tensor:
    return statistic.from_binned(problem.confmat, problem.thresholds)


def reduce_problems(problems: list[Problem], split: Split, statistic: RankStatistic) -> Tensor:
    """The statistic of every counted problem (exact, 16-bit or binned), reduced by ``split.average`` (float32), on
    the problems' device.
    """
    device = problem_device(problems[0])
    binned = [p for p in problems if isinstance(p, Binned)]
    if not binned:
        exact = [p for p in problems if not isinstance(p, Binned)]
        sums = [rank_sums(p, area=statistic.needs.area, ap=statistic.needs.ap) for p in exact]
        return reduce_sums(sums, split, statistic, device)
    values: list[Callable[[bool], Tensor]] = [partial(_binned_value, statistic, b) for b in binned]
    sizes = [(int(b.confmat[0, 1].sum()), int(b.confmat[0].sum())) for b in binned]
    return _reduce(values, sizes, split, statistic, device)
