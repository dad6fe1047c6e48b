"""DeLong's variance of the AUROC: a confidence interval, and the paired test of two models on the same samples.

DeLong, DeLong & Clarke-Pearson (1988). With ``m`` positives ``X_i`` and ``n`` negatives ``Y_j`` and
``psi(x, y) = 1`` if ``x > y``, ``1/2`` if ``x == y``, ``0`` otherwise, the structural components are
``V10_i = mean_j psi(X_i, Y_j)`` and ``V01_j = mean_i psi(X_i, Y_j)`` (both average to the AUROC ``A``), and

    var(A) = S10 / m + S01 / n,   S10 = sum_i (V10_i - A)^2 / (m - 1),   S01 = sum_j (V01_j - A)^2 / (n - 1).

``V10_i`` only depends on the score of positive ``i`` (the negatives below it, plus half the tied ones), so the
components come from the same one sort and the same integer counts per distinct score as
:func:`~torchmetrics_varlen.functional.auroc`: O(N log N), no ``m x n`` matrix. Each deviation ``V - A`` is an
exact integer divided by ``2mn``; only the sums of squares are float64.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import NamedTuple

import torch
from torch import Tensor

from torchmetrics_varlen.functional._count import Binned, Problem, batch_problems
from torchmetrics_varlen.functional._ranking import RankSums, rank_sums
from torchmetrics_varlen.functional._sort import Counts, materialize
from torchmetrics_varlen.functional._validation import Normalization, RankingArgs, Split, format_inputs
from torchmetrics_varlen.functional.auroc import _compute


class AUROCInterval(NamedTuple):
    """The AUROC with DeLong's standard error and normal confidence interval.

    Attributes:
        value: The AUROC, float32: bit for bit :func:`~torchmetrics_varlen.functional.auroc`'s value.
        lower: ``value - z * std`` (float64, not clipped to [0, 1]), ``z`` the normal quantile of ``(1 + level) / 2``.
        upper: ``value + z * std`` (float64, not clipped).
        std: DeLong's standard error (float64).

    Example:
        >>> from torch import tensor
        >>> value, lower, upper, std = auroc_interval(tensor([0.9, 0.5, 0.5, 0.1]), tensor([1, 1, 0, 0]), level=0.9)
        >>> round(float(upper - lower), 4)  # 2 * 1.6449 * sqrt(1/32)
        0.5815
    """

    value: Tensor
    lower: Tensor
    upper: Tensor
    std: Tensor


class AUROCComparison(NamedTuple):
    """DeLong's paired test of two models' AUROC on the same samples.

    Attributes:
        auroc_a: Model a's AUROC (float32, as :func:`~torchmetrics_varlen.functional.auroc`).
        auroc_b: Model b's AUROC (float32).
        difference: ``auroc_a - auroc_b``, exact in float64 (from the integer rank sums, before any rounding).
        lower: Lower end of the interval of the difference at ``level`` (float64, not clipped).
        upper: Upper end (float64, not clipped).
        z: ``difference / std`` of the difference (float64).
        p_value: Two-sided p-value of "no difference" (float64).

    Example:
        >>> from torch import tensor
        >>> result = auroc_compare(tensor([0.9, 0.5, 0.5, 0.1]), tensor([0.9, 0.6, 0.5, 0.1]), tensor([1, 1, 0, 0]))
        >>> result.auroc_a, result.auroc_b
        (tensor(0.8750), tensor(1.))
        >>> round(float(result.p_value), 4)  # erfc(1/2)
        0.4795
    """

    auroc_a: Tensor
    auroc_b: Tensor
    difference: Tensor
    lower: Tensor
    upper: Tensor
    z: Tensor
    p_value: Tensor


def _check_level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        msg = f"Expected `level` to be a number in (0, 1) (e.g. 0.95 for a 95% interval), but got {level!r}."
        raise ValueError(msg)
    return float(level)


def normal_quantile(level: float) -> float:
    """``z`` such that a standard normal lies in ``[-z, z]`` with probability ``level``."""
    return NormalDist().inv_cdf((1.0 + level) / 2.0)


def two_sided_p(z: float) -> float:
    """Two-sided p-value of a standard normal statistic (``nan`` stays ``nan``)."""
    return math.erfc(abs(z) / math.sqrt(2.0)) if not math.isnan(z) else math.nan


class _Ranked(NamedTuple):
    """One binary problem sorted as :func:`auroc` sorts it: its value, its rank sums and its counts."""

    value: Tensor
    sums: RankSums
    counts: Counts


def _ranked(preds: Tensor, target: Tensor, args: RankingArgs, with_scores: bool) -> _Ranked:
    """Sort and count once, exactly as :func:`~torchmetrics_varlen.functional.auroc` does (its value, bit for bit)."""
    problems: list[Problem] = batch_problems(preds, target, args, with_scores=with_scores)
    value = _compute(problems, Split("binary", args.average), None)
    problem = problems[0]
    assert not isinstance(problem, Binned)  # exact mode: sorted keys or counts
    sums = rank_sums(problem, area=True, ap=False)
    counts = materialize(problem, with_scores=with_scores)
    return _Ranked(value, sums, counts)


def _group_numerators(counts: Counts, twice_area: int) -> tuple[Tensor, Tensor, Tensor, Tensor, int, int]:
    """Per distinct score: ``(pos_g, neg_g, d10_g, d01_g, m, n)`` with ``V10 - A = d10 / (2mn)`` for a positive at
    that score and ``V01 - A = d01 / (2mn)`` for a negative (exact int64).
    """
    pos_le, all_le = counts.pos_le, counts.all_le
    m, total = int(pos_le[-1]), int(all_le[-1])
    n = total - m
    neg_le = all_le - pos_le
    pos_g = torch.diff(pos_le, prepend=pos_le.new_zeros(1))
    neg_g = torch.diff(neg_le, prepend=neg_le.new_zeros(1))
    # 2 n V10 = 2 (negatives below) + (negatives tied); 2 m V01 = 2 (positives above) + (positives tied).
    d10 = (2 * (neg_le - neg_g) + neg_g) * m - twice_area
    d01 = (2 * (m - pos_le) + pos_g) * n - twice_area
    return pos_g, neg_g, d10, d01, m, n


def _variance(pos_g: Tensor, neg_g: Tensor, d10: Tensor, d01: Tensor, m: int, n: int) -> float:
    """DeLong's variance from the per-score deviations (``nan`` with fewer than 2 positives or negatives)."""
    if m < 2 or n < 2:
        return math.nan
    scale = float(2 * m * n) ** 2
    s10 = float(torch.dot(pos_g.double(), d10.double().square())) / scale / (m - 1)
    s01 = float(torch.dot(neg_g.double(), d01.double().square())) / scale / (n - 1)
    return s10 / m + s01 / n


def auroc_interval(
    preds: Tensor,
    target: Tensor,
    level: float = 0.95,
    *,
    ignore_index: int | None = None,
    validate_args: bool = True,
    normalization: Normalization = "sigmoid",
) -> AUROCInterval:
    r"""Binary AUROC with DeLong's standard error and a normal confidence interval at ``level``.

    The AUROC is :func:`~torchmetrics_varlen.functional.auroc`'s value bit for bit (same inputs, normalisation of
    logits and sort). DeLong's variance ``S10 / m + S01 / n`` (see the module docstring; ties count one half) comes
    from the midranks of that one sort in O(N log N). The interval is ``value -/+ z * std`` with ``z`` the normal
    quantile of ``(1 + level) / 2``, computed in float64 and not clipped to [0, 1] (pROC's ``ci.auc`` clips its ends;
    here near 0 or 1 they may cross them: read it as a sign that the normal approximation is poor there).

    Degenerate input: with no positive or no negative sample, ``value`` is ``0.0`` with ``auroc``'s warning and
    ``std``, ``lower``, ``upper`` are NaN; with a single positive or a single negative the sample variance of the
    components is undefined and ``std`` is NaN too.

    Args:
        preds: Scores or logits, any shape (flattened).
        target: Labels in {0, 1}, the shape of ``preds``.
        level: Confidence level in (0, 1).
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs.
        normalization: As :func:`~torchmetrics_varlen.functional.auroc`'s.

    Returns:
        :class:`AUROCInterval` ``(value, lower, upper, std)``: ``value`` float32 (the AUROC), the others float64.

    Raises:
        ValueError: On an invalid ``level`` or invalid inputs (as ``auroc``).

    Example:
        Positives 0.9 and 0.5, negatives 0.5 and 0.1: ``V10 = (1, 3/4)``, ``V01 = (3/4, 1)``, ``A = 7/8``,
        ``S10 = S01 = 1/32``, ``var = 1/64 + 1/64``:

        >>> from torch import tensor
        >>> iv = auroc_interval(tensor([0.9, 0.5, 0.5, 0.1]), tensor([1, 1, 0, 0]))
        >>> iv.value, iv.std
        (tensor(0.8750), tensor(0.1768, dtype=torch.float64))
        >>> iv.lower, iv.upper
        (tensor(0.5285, dtype=torch.float64), tensor(1.2215, dtype=torch.float64))
    """
    args = RankingArgs("binary", None, None, "macro", None, ignore_index, normalization)
    if validate_args:
        args.validate(preds, target)
    z = normal_quantile(_check_level(level))
    ranked = _ranked(preds, target, args, with_scores=False)
    device = ranked.value.device
    if ranked.sums.n_pos == 0 or ranked.sums.n_pos == ranked.sums.n_all:
        var = math.nan
    else:
        var = _variance(*_group_numerators(ranked.counts, ranked.sums.twice_area))
    std = math.sqrt(var) if not math.isnan(var) else math.nan
    value = float(ranked.value)

    def f64(x: float) -> Tensor:
        return torch.tensor(x, dtype=torch.float64, device=device)

    return AUROCInterval(ranked.value, f64(value - z * std), f64(value + z * std), f64(std))


def _sample_numerators(
    preds: Tensor, target: Tensor, args: RankingArgs
) -> tuple[_Ranked, Tensor, Tensor] | tuple[_Ranked, None, None]:
    """A model's ranking and, per positive / per negative in sample order, its deviation numerators ``d10`` /
    ``d01`` (``V - A = d / (2mn)``, exact int64); ``None`` when a class is absent.
    """
    ranked = _ranked(preds, target, args, with_scores=False)
    if ranked.sums.n_pos == 0 or ranked.sums.n_pos == ranked.sums.n_all:
        return ranked, None, None
    _, _, d10, d01, _, _ = _group_numerators(ranked.counts, ranked.sums.twice_area)
    scores, labels, _ = format_inputs(preds, target, "binary", args.ignore_index, args.normalization)
    # The distinct score of every sample: a sort with its permutation (sequential, unlike a search per sample). Runs
    # of equal floats are the groups of the counts (-0.0 == +0.0, as the sort keys merge them).
    sorted_scores, order = torch.sort(scores)
    starts = torch.ones_like(sorted_scores, dtype=torch.bool)
    torch.ne(sorted_scores[1:], sorted_scores[:-1], out=starts[1:])
    del sorted_scores
    in_order = starts.to(torch.int64).cumsum_(0).sub_(1)
    group = torch.empty_like(in_order)
    group[order] = in_order
    del order, in_order
    return ranked, d10[group[labels]], d01[group[~labels]]


def auroc_compare(
    preds_a: Tensor,
    preds_b: Tensor,
    target: Tensor,
    level: float = 0.95,
    *,
    ignore_index: int | None = None,
    validate_args: bool = True,
    normalization: Normalization = "sigmoid",
) -> AUROCComparison:
    r"""DeLong's paired test of two models' binary AUROC on the same samples (pROC's ``roc.test(method="delong")``).

    ``preds_a[i]`` and ``preds_b[i]`` are two models' scores of sample ``i`` with label ``target[i]``. Each AUROC is
    :func:`~torchmetrics_varlen.functional.auroc`'s value bit for bit. With each model's structural components
    (see :func:`auroc_interval`), the variance of the difference is ``var_a + var_b - 2 cov_ab``, where
    ``cov_ab = S10_ab / m + S01_ab / n`` and ``S10_ab`` is the sample covariance of the two models' ``V10`` over the
    positives (``S01_ab`` over the negatives). Then ``z = difference / std``, the two-sided p-value
    ``2 * (1 - Phi(|z|))`` and the interval ``difference -/+ z_level * std`` (float64, not clipped to [-1, 1]).

    Degenerate cases, as pROC: a variance of 0 (e.g. a model compared with itself, or two perfect models) gives
    ``z = 0`` and ``p = 1`` when the difference is 0, ``z = +/-inf`` and ``p = 0`` otherwise; a variance that
    rounding makes slightly negative counts as 0. No positive or no negative sample: both AUROCs ``0.0`` with
    ``auroc``'s warnings and NaN for the rest; a single positive or negative: NaN for the rest too.

    Args:
        preds_a: Model a's scores or logits, any shape (flattened).
        preds_b: Model b's scores or logits, the shape of ``preds_a``.
        target: Labels in {0, 1}, the shape of ``preds_a``.
        level: Confidence level of the interval of the difference, in (0, 1).
        ignore_index: Target value whose positions are ignored.
        validate_args: Check arguments and inputs.
        normalization: As :func:`~torchmetrics_varlen.functional.auroc`'s (applied to each model's scores).

    Returns:
        :class:`AUROCComparison` ``(auroc_a, auroc_b, difference, lower, upper, z, p_value)``: the AUROCs float32,
        the others float64.

    Raises:
        ValueError: On an invalid ``level``, mismatched shapes or invalid inputs (as ``auroc``).

    Example:
        A model compared with itself: no difference, ``p = 1``.

        >>> from torch import tensor
        >>> preds, target = tensor([0.9, 0.5, 0.5, 0.1]), tensor([1, 1, 0, 0])
        >>> auroc_compare(preds, preds, target).p_value
        tensor(1., dtype=torch.float64)

        Model b ranks the tied pair correctly: ``d = V(b) - V(a)`` is ``(0, 1/4)`` on the positives and ``(1/4, 0)``
        on the negatives, so ``var = 2 * (1/32) / 2 = 1/32`` and ``z = -(1/8) / sqrt(1/32)``:

        >>> result = auroc_compare(preds, tensor([0.9, 0.6, 0.5, 0.1]), target)
        >>> result.difference, result.z
        (tensor(-0.1250, dtype=torch.float64), tensor(-0.7071, dtype=torch.float64))
    """
    args = RankingArgs("binary", None, None, "macro", None, ignore_index, normalization)
    if validate_args:
        if not isinstance(preds_a, Tensor) or not isinstance(preds_b, Tensor) or preds_a.shape != preds_b.shape:
            shapes = [tuple(p.shape) if isinstance(p, Tensor) else type(p).__name__ for p in (preds_a, preds_b)]
            msg = f"Expected `preds_a` and `preds_b` to be tensors of one shape, but got {shapes[0]} and {shapes[1]}."
            raise ValueError(msg)
        args.validate(preds_a, target)
        args.validate(preds_b, target)
    z_level = normal_quantile(_check_level(level))
    ranked_a, d10_a, d01_a = _sample_numerators(preds_a, target, args)
    ranked_b, d10_b, d01_b = _sample_numerators(preds_b, target, args)
    device = ranked_a.value.device
    m, n = ranked_a.sums.n_pos, ranked_a.sums.n_all - ranked_a.sums.n_pos
    nan = math.nan
    if d10_a is None or d10_b is None or d01_a is None or d01_b is None:
        diff = var = nan
    else:
        scale = 2.0 * m * n
        diff = (ranked_a.sums.twice_area - ranked_b.sums.twice_area) / scale
        if m < 2 or n < 2:
            var = nan
        else:
            # Deviations of the difference of the components: var(a - b) = var_a + var_b - 2 cov_ab in one sum.
            e10 = (d10_a - d10_b).double()
            e01 = (d01_a - d01_b).double()
            s10 = float(torch.dot(e10, e10)) / scale**2 / (m - 1)
            s01 = float(torch.dot(e01, e01)) / scale**2 / (n - 1)
            var = max(s10 / m + s01 / n, 0.0)
    std = math.sqrt(var) if not math.isnan(var) else nan
    if math.isnan(std):
        z = nan
    elif std == 0:
        z = 0.0 if diff == 0 else math.copysign(math.inf, diff)
    else:
        z = diff / std
    p = two_sided_p(z)

    def f64(x: float) -> Tensor:
        return torch.tensor(x, dtype=torch.float64, device=device)

    return AUROCComparison(
        ranked_a.value,
        ranked_b.value,
        f64(diff),
        f64(diff - z_level * std),
        f64(diff + z_level * std),
        f64(z),
        f64(p),
    )
