"""Sample weights: scikit-learn's ``sample_weight`` semantics for AUROC, average precision and the curves.

A weight scales a sample's contribution to every count: the counts per distinct score become float64 sums of
weights (:class:`~torchmetrics_varlen.functional._sort.Counts` with float64 ``pos_le`` / ``all_le``), and the
statistics are the unweighted formulas on those sums. As scikit-learn's ``_binary_clf_curve``, samples of weight 0
are dropped first: they add no threshold to a curve. Multiclass / multilabel: a sample's weight applies to each
of its classes / labels, and ``average="weighted"`` weighs a class by its weighted positives (scikit-learn's rule).

Entry points for the metric classes (all pure tensor math, no validation beyond :func:`check_sample_weight`):

- :func:`check_sample_weight` / :func:`weighted_rows`: validate a batch's weights and put them in the stored row
  order of :func:`~torchmetrics_varlen.functional._validation.format_inputs`;
- :func:`weighted_counts`: the exact weighted counts of one binary problem (one sort);
- :func:`~torchmetrics_varlen.functional._hist.histogram` with ``weight=`` and
  :func:`~torchmetrics_varlen.functional._count.binned_confmat` with ``weight=``: the 16-bit and binned states
  (float64, summed across ranks like the integer ones);
- :class:`WeightedRankSums`, :func:`weighted_rank_sums`, :func:`combine_weighted`: the additive core of a range of
  scores for the sharded compute, as :class:`~torchmetrics_varlen.functional._ranking.RankSums`;
- :func:`weighted_problems` and :func:`reduce_weighted`: every problem of a weighted state, and the reduced value
  (the statistic's own functions: its ``from_sums`` takes weighted sums as it takes
  :class:`~torchmetrics_varlen.functional._ranking.RankSums`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from torchmetrics_varlen.functional._count import Binned, CountMode, binned_confmat, threshold_tensor
from torchmetrics_varlen.functional._hist import counts_from_histogram, histogram
from torchmetrics_varlen.functional._ranking import (
    RankStatistic,
    auroc_from_sums,
    descending,
    mcclish_partial_auc,
    reduce_problems,
    reduce_sums,
    roc_from_counts,
)
from torchmetrics_varlen.functional._sort import Counts, running_sum
from torchmetrics_varlen.functional._validation import RankingArgs, Split, format_inputs

WeightedProblem = Counts | Binned  # float64 counts of one binary problem, or its float64 binned confusion matrices


def sample_shape(preds: Tensor, target: Tensor, task: str) -> tuple[int, ...]:
    """The shape of one weight per sample: ``target``'s, without the label dimension for multilabel."""
    if task == "multilabel":
        return tuple(target.shape[:1] + target.shape[2:])
    return tuple(target.shape) if task == "multiclass" else tuple(preds.shape)


def check_sample_weight(sample_weight: object, preds: Tensor, target: Tensor, task: str) -> Tensor:
    """Validate ``sample_weight`` for a batch and return it as float64, one value per flattened sample position.

    Accepted shapes: the sample shape (``preds`` for binary, ``target`` for multiclass, ``target`` without its label
    dimension for multilabel), or ``(N,)`` when the sample shape has extra dimensions (the weight of sample ``n``
    applies to all its positions). Weights must be finite and non-negative; zeros are allowed.

    Raises:
        TypeError: ``sample_weight`` is not a tensor.
        ValueError: A wrong shape or dtype, a negative, NaN or infinite weight.
    """
    if not isinstance(sample_weight, Tensor):
        msg = f"Expected `sample_weight` to be a tensor, but got {type(sample_weight).__name__}."
        raise TypeError(msg)
    if sample_weight.is_complex() or sample_weight.dtype == torch.bool:
        msg = (
            f"Expected `sample_weight` to be a real (integer or floating point) tensor, but got {sample_weight.dtype}."
        )
        raise ValueError(msg)
    shape = sample_shape(preds, target, task)
    weight = sample_weight
    if tuple(weight.shape) != shape:
        if len(shape) > 1 and weight.ndim == 1 and weight.shape[0] == shape[0]:
            weight = weight.reshape(-1, *([1] * (len(shape) - 1))).expand(shape)
        else:
            per_sample = f" or ({shape[0]},)" if len(shape) > 1 else ""
            got = tuple(sample_weight.shape)
            msg = f"Expected `sample_weight` of shape {shape}{per_sample} (one weight per sample), but got {got}."
            raise ValueError(msg)
    weight = weight.to(device=preds.device, dtype=torch.float64).reshape(-1)
    if weight.numel() and not bool(torch.isfinite(weight).all()):
        msg = "Expected `sample_weight` to be finite, but found NaN or infinite weight(s)."
        raise ValueError(msg)
    if weight.numel() and bool((weight < 0).any()):
        found = weight[weight < 0][:5].tolist()
        msg = f"Expected non-negative `sample_weight`, but found negative weight(s) {found}."
        raise ValueError(msg)
    return weight


def weighted_rows(
    preds: Tensor, target: Tensor, weight: Tensor, task: str, ignore_index: int | None, normalization: str | None
) -> tuple[Tensor, Tensor, Tensor]:
    """A batch in its stored form (:func:`~torchmetrics_varlen.functional._validation.format_inputs`) with its weights
    (from :func:`check_sample_weight`) in the same row order: ``(scores, labels, weights)``.
    """
    scores, labels, kept = format_inputs(preds, target, task, ignore_index, normalization)  # type: ignore[arg-type]
    return scores, labels, weight if kept is None else weight[kept]


def _split(split: Split, scores: Tensor, labels: Tensor, weight: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """``(scores, positives, weights)`` of every binary problem of weighted stored rows (as ``Split.apply``)."""
    if split.task == "binary":
        return [(scores, labels.to(torch.bool), weight)]
    width = scores.shape[1]
    if split.task == "multiclass":
        if not split.per_class:
            onehot = torch.nn.functional.one_hot(labels, width) == 1
            return [(scores.reshape(-1), onehot.reshape(-1), weight.repeat_interleave(width))]
        return [(scores[:, k], labels == k, weight) for k in range(width)]
    if not split.per_class:
        valid = labels >= 0
        return [(scores[valid], labels[valid] == 1, weight.unsqueeze(1).expand_as(labels)[valid])]
    out = []
    for k in range(width):
        valid = labels[:, k] >= 0
        out.append((scores[:, k][valid], labels[:, k][valid] == 1, weight[valid]))
    return out


def weighted_counts(scores: Tensor, positives: Tensor, weight: Tensor, with_scores: bool = True) -> Counts:
    """Exact weighted counts of one binary problem: float64 sums of the weights of the positives / of the negatives /
    of all samples with a score ``<=`` each distinct score (samples of weight 0 dropped first), and the distinct
    scores. Each is a running sum of its own (:func:`~torchmetrics_varlen.functional._sort.running_sum`): the
    negatives' weight is never taken as a difference of the other two.
    """
    scores, positives, weight = scores.reshape(-1), positives.reshape(-1).to(torch.bool), weight.reshape(-1)
    nonzero = weight != 0
    if not bool(nonzero.all()):
        scores, positives, weight = scores[nonzero], positives[nonzero], weight[nonzero]
    weight = weight.to(torch.float64)
    if scores.numel() == 0:
        empty = torch.zeros(0, dtype=torch.float64, device=scores.device)
        return Counts(empty, empty.clone(), scores.new_zeros(0) if with_scores else None, empty.clone())
    sorted_scores, order = torch.sort(scores)
    w = weight[order]
    pos = positives[order]
    del order
    zero = torch.zeros_like(w)
    pos_w, neg_w = torch.where(pos, w, zero), torch.where(pos, zero, w)
    del pos, zero
    n = sorted_scores.numel()
    ends = torch.nonzero(sorted_scores[1:] != sorted_scores[:-1]).flatten()
    ends = torch.cat([ends, ends.new_tensor([n - 1])])
    return Counts(
        running_sum(pos_w)[ends],
        running_sum(w)[ends],
        sorted_scores[ends] if with_scores else None,
        running_sum(neg_w)[ends],
    )


def weighted_problems(
    mode: CountMode, scores: Tensor, labels: Tensor, weight: Tensor, split: Split, thresholds: Tensor | None
) -> list[WeightedProblem]:
    """Every binary problem of one weighted batch of stored rows, counted in ``mode`` (float64 counts)."""
    problems: list[WeightedProblem] = []
    for s, p, w in _split(split, scores, labels, weight):
        if mode.kind == "exact":
            problems.append(weighted_counts(s, p, w))
        elif mode.kind == "histogram":
            assert mode.dtype is not None
            problems.append(counts_from_histogram(histogram(s, p, mode.dtype, weight=w), mode.dtype, True))
        else:
            assert thresholds is not None
            problems.append(Binned(binned_confmat(s, p, thresholds.to(s.device), weight=w), thresholds.to(s.device)))
    return problems


class WeightedRankSums(NamedTuple):
    """:class:`~torchmetrics_varlen.functional._ranking.RankSums` with sample weights (all float64 sums), its fields in
    the same order: the ``from_sums`` of a statistic takes either.

    Attributes:
        w_pos: Weight of the positives (``P``).
        w_all: Weight of all samples.
        twice_area: ``2 * P * N * AUROC`` (``N``: weight of the negatives).
        ap_sum: ``P * AP``.
    """

    w_pos: float
    w_all: float
    twice_area: float
    ap_sum: float


def weighted_rank_sums(
    counts: Counts, *, pos_before: float = 0.0, all_before: float = 0.0, totals: tuple[float, float] | None = None
) -> WeightedRankSums:
    """:class:`WeightedRankSums` of weighted counts (:func:`weighted_counts`, or a 16-bit weighted histogram's).

    ``*_before`` (weights of the positives / samples below the range) and ``totals`` (the global ``(P, all)``) place
    the counts within a larger data set when they hold one range of its scores (sharded compute); ``w_pos`` and
    ``w_all`` of the result are the range's own.
    """
    if counts.pos_le.numel() == 0:
        return WeightedRankSums(0.0, 0.0, 0.0, 0.0)
    pos_le, all_le = counts.pos_le.to(torch.float64), counts.all_le.to(torch.float64)
    w_pos_local, w_all_local = float(pos_le[-1]), float(all_le[-1])
    w_pos, w_all = totals if totals is not None else (w_pos_local, w_all_local)
    pos_g = torch.diff(pos_le, prepend=pos_le.new_zeros(1))
    all_g = torch.diff(all_le, prepend=all_le.new_zeros(1))
    neg_g = all_g - pos_g
    neg_below = (all_le - all_g) - (pos_le - pos_g) + (all_before - pos_before)
    twice_area = float(torch.dot(pos_g, 2 * neg_below + neg_g))
    tps = (w_pos - pos_before) - (pos_le - pos_g)  # positives at or above each score
    all_ge = (w_all - all_before) - (all_le - all_g)
    ap_sum = float(torch.dot(pos_g, tps / torch.where(all_ge > 0, all_ge, torch.ones_like(all_ge))))
    return WeightedRankSums(w_pos_local, w_all_local, twice_area, ap_sum)


def combine_weighted(parts: list[WeightedRankSums]) -> WeightedRankSums:
    """The sums of consecutive ranges, added in their order (the same bits on every rank)."""
    total = WeightedRankSums(0.0, 0.0, 0.0, 0.0)
    for p in parts:
        total = WeightedRankSums(
            total.w_pos + p.w_pos, total.w_all + p.w_all, total.twice_area + p.twice_area, total.ap_sum + p.ap_sum
        )
    return total


def weighted_partial_auroc(counts: Counts, max_fpr: float) -> Tensor:
    """McClish-standardised weighted partial AUC up to ``max_fpr`` (scikit-learn's ``max_fpr``); one class only
    gives 0 with torchmetrics' warnings.
    """
    sizes = weighted_rank_sums(counts)
    if sizes.w_pos <= 0 or sizes.w_all - sizes.w_pos <= 0:
        return auroc_from_sums(sizes, counts.pos_le.device)
    fps, tps, _ = descending(counts)
    return mcclish_partial_auc(*roc_from_counts(fps, tps, warn=False), max_fpr)


def weighted_batch_problems(
    preds: Tensor, target: Tensor, sample_weight: object, args: RankingArgs
) -> list[WeightedProblem]:
    """The weighted functional path in one call: check the weights, format the (validated) batch, count every
    problem in the mode of ``args.thresholds``.
    """
    weight = check_sample_weight(sample_weight, preds, target, args.task)
    scores, labels, w = weighted_rows(preds, target, weight, args.task, args.ignore_index, args.normalization)
    mode, thresholds = CountMode.of(args.thresholds), threshold_tensor(args.thresholds, preds.device)
    return weighted_problems(mode, scores, labels, w, Split(args.task, args.average), thresholds)


def reduce_weighted(problems: list[WeightedProblem], split: Split, statistic: RankStatistic) -> Tensor:
    """The weighted ``statistic`` (``AUROC``, ``AVERAGE_PRECISION``) of every problem, reduced by ``average``
    (float32), as :func:`~torchmetrics_varlen.functional._ranking.reduce_problems` does without weights.

    One problem: its value (0 and a warning when undefined). One per class: NaN where undefined (no positive weight,
    or for AUROC no negative weight), left out of the averages; ``"weighted"`` weighs by the positives' weight.
    """
    if isinstance(problems[0], Binned):
        return reduce_problems([p for p in problems if isinstance(p, Binned)], split, statistic)
    sums = [weighted_rank_sums(p) for p in problems if not isinstance(p, Binned)]
    return reduce_sums(sums, split, statistic, problems[0].pos_le.device)
