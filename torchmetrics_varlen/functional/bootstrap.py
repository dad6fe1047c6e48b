"""The Poisson bootstrap's core: counter-based multiplicities and the weighted AUROC / AP of every resample.

Sample ``i`` (key ``k_i``: its id or its global sampler position) appears ``m_ib`` times in resample ``b``, where
``m_ib`` is Poisson(1) drawn from ``(seed, b, k_i)`` alone by a splitmix64 hash, so the resamples are a function of
the samples, never of the ranks that held them. The statistic of each resample is the weighted AUROC / AP with the
multiplicities as weights, over the one sort of the scores: memory O(N) per block of resamples, time O(N log N + B N).

The hash runs in NumPy ``uint64`` (wrapping arithmetic and logical shifts are native there), a block of resamples at
a time; the multiplicities and their sums are integers, so every value below is independent of how it is blocked.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

_MASK = (1 << 64) - 1
# splitmix64's finaliser constants.
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_GOLDEN = 0x9E3779B97F4A7C15


def _mix_int(x: int) -> int:
    """splitmix64's finaliser of one Python integer (taken modulo 2**64), returned as an unsigned 64-bit int."""
    x &= _MASK
    x ^= x >> 30
    x = (x * _M1) & _MASK
    x ^= x >> 27
    x = (x * _M2) & _MASK
    return x ^ (x >> 31)


def _mix_inplace(x: np.ndarray, tmp: np.ndarray) -> None:
    """splitmix64's finaliser of a ``uint64`` array, in place (``tmp``: scratch of the same shape)."""
    m1, m2 = np.uint64(_M1), np.uint64(_M2)
    np.right_shift(x, np.uint64(30), out=tmp)
    np.bitwise_xor(x, tmp, out=x)
    np.multiply(x, m1, out=x)
    np.right_shift(x, np.uint64(27), out=tmp)
    np.bitwise_xor(x, tmp, out=x)
    np.multiply(x, m2, out=x)
    np.right_shift(x, np.uint64(31), out=tmp)
    np.bitwise_xor(x, tmp, out=x)


def _poisson1_thresholds() -> np.ndarray:
    """``uint64`` thresholds ``t_k`` such that a hash ``x`` gives multiplicity ``#{k : x >= t_k}``.

    The uniform of a hash is ``(x >> 11) * 2**-53``; it is at least ``P(K <= k)`` (a Poisson(1) ``K``, ``k = 0 ..
    20``; beyond: below float64's resolution) exactly when ``x >> 11 >= ceil(P(K <= k) * 2**53)``, i.e. when
    ``x >= ceil(P(K <= k) * 2**53) << 11``: the inverse CDF without floats.
    """
    term, total, out = math.exp(-1.0), 0.0, []
    for k in range(21):
        total += term
        out.append(math.ceil(total * 2.0**53) << 11)  # total * 2**53 is exact (a power of two)
        term /= k + 1
    # A P(K <= k) rounded to 1.0 gives 2**64, which no hash reaches (the uniform is below 1): left out.
    return np.array([t for t in out if t <= _MASK], dtype=np.uint64)


_THRESHOLDS = _poisson1_thresholds()
_EXACT_AREA = 1 << 53  # twice the AUROC's area below this: exact in float64 whatever the order of the sum
_COMPARED = 4  # P(K >= 5) ~ 0.4%: the samples counted by the search


def _salt(seed: int, resample: int) -> int:
    return _mix_int(_mix_int(seed) + resample * _GOLDEN)


def _keys_u64(keys: Tensor) -> np.ndarray:
    return keys.detach().to(device="cpu", dtype=torch.int64).contiguous().numpy().view(np.uint64)


def _multiplicities(keys_golden: np.ndarray, seed: int, first: int, count: int) -> np.ndarray:
    """``[count, N]`` ``int8`` multiplicities of resamples ``first .. first + count - 1``.

    ``keys_golden`` is ``keys * golden`` (``uint64``, wrapping), shared by all the resamples.
    """
    salts = np.array([_salt(seed, b) for b in range(first, first + count)], dtype=np.uint64)[:, None]
    x = np.add(keys_golden[None, :], salts)
    tmp = np.empty_like(x)
    _mix_inplace(x, tmp)
    np.bitwise_xor(x, salts, out=x)
    _mix_inplace(x, tmp)
    del tmp
    # #{k : x >= t_k}: the first thresholds by comparisons (int8 counts), the rare rest by a search.
    counts = np.zeros(x.shape, dtype=np.int8)
    for threshold in _THRESHOLDS[:_COMPARED]:
        np.add(counts, x >= threshold, out=counts)
    flat, rare = x.reshape(-1), np.flatnonzero(x >= _THRESHOLDS[_COMPARED])
    counts.reshape(-1)[rare] = np.searchsorted(_THRESHOLDS, flat[rare], side="right")
    return counts


def poisson_multiplicities(keys: Tensor, seed: int, resample: int) -> Tensor:
    """Each sample's multiplicity (float64, Poisson(1)) in resample ``resample``, from ``(seed, resample, key)``
    alone: a splitmix64 hash turned into a uniform in [0, 1) (53 bits), then the inverse Poisson(1) CDF.

    ``keys``: integer tensor of any shape; the result has its shape and device.
    """
    flat = _keys_u64(keys.reshape(-1))
    golden = np.multiply(flat, np.uint64(_GOLDEN))
    counts = _multiplicities(golden, seed, resample, 1)[0]
    return torch.from_numpy(counts).to(device=keys.device, dtype=torch.float64).reshape(keys.shape)


def _resampled(
    scores: Tensor, positives: Tensor, keys: Tensor, statistic: str, seed: int, num_bootstraps: int
) -> Tensor:
    """The statistic of every resample (float64, NaN where undefined), as weighted sums over one sort.

    The multiplicities are integers, so every sum of weights below is exact (whatever the order of the tied
    samples): the values depend only on the set of (score, label, key), never on W or batch order.
    """
    sorted_scores, order = torch.sort(scores)
    pos = positives[order].to(torch.bool)
    keys_golden = np.multiply(_keys_u64(keys[order]), np.uint64(_GOLDEN))
    del order
    n = sorted_scores.numel()
    ends = torch.nonzero(sorted_scores[1:] != sorted_scores[:-1]).flatten()
    ends = torch.cat([ends, ends.new_tensor([n - 1])])
    del sorted_scores
    device = scores.device
    pos_np = pos.cpu().numpy()
    # Per distinct score: sum the multiplicities over its tied samples (reduceat) before the cumulative sums.
    starts_np = np.concatenate([[0], ends[:-1].cpu().numpy() + 1]) if ends.numel() < n else None
    out = torch.empty(num_bootstraps, dtype=torch.float64, device=device)
    chunk = max(1, min(num_bootstraps, (1 << 22) // max(n, 1)))  # depends on N and B only: the same at every W
    for first in range(0, num_bootstraps, chunk):
        count = min(chunk, num_bootstraps - first)
        w = _multiplicities(keys_golden, seed, first, count)
        w_pos = np.where(pos_np, w, 0)
        if starts_np is not None:
            w = np.add.reduceat(w, starts_np, axis=1, dtype=np.int64)
            w_pos = np.add.reduceat(w_pos, starts_np, axis=1, dtype=np.int64)
        out[first : first + count] = _block_statistic(w_pos, w, statistic, device)
    return out


def _block_statistic(pos_g: np.ndarray, all_g: np.ndarray, statistic: str, device: torch.device) -> Tensor:
    """The weighted AUROC / AP of each row from the ``int64`` weights of the positives / all samples per distinct
    score (``[count, G]``, ascending scores).

    Bit for bit :func:`_statistic` of the cumulative sums: every sum of weights is an exact integer, so it is taken
    in ``int64``; only the float64 operations whose rounding matters (the AUROC's final division; the AP's terms,
    their sum in torch and the division) are done as there, on the same operands and shapes.
    """
    w_pos, w_all = pos_g.sum(1, dtype=np.int64), all_g.sum(1, dtype=np.int64)

    def f64(a: np.ndarray) -> Tensor:
        return torch.from_numpy(a).to(device=device, dtype=torch.float64)

    w_pos_f, w_all_f = f64(w_pos), f64(w_all)
    if statistic == "auroc":
        w_neg = w_all - w_pos
        if 2 * int(np.max(w_pos * w_neg, initial=0)) >= _EXACT_AREA:
            # Twice the area might not be exact in float64, so its rounding depends on the order: as before.
            pos_le, all_le = (f64(np.cumsum(g, axis=1, dtype=np.int64)) for g in (pos_g, all_g))
            return _statistic(pos_le, all_le, "auroc")
        # Twice the area: sum over g of pos_g * (2 * negatives below g + negatives at g), exact in int64 (and in
        # float64 in any order: every partial sum is an integer at most 2 * w_pos * w_neg < 2**53).
        neg_g = np.subtract(all_g, pos_g, dtype=np.int64)
        twice = np.cumsum(neg_g, axis=1)
        np.multiply(twice, 2, out=twice)
        np.subtract(twice, neg_g, out=twice)
        np.multiply(twice, pos_g, out=twice, casting="unsafe")
        twice_area = f64(twice.sum(1))
        w_neg_f = w_all_f - w_pos_f
        value = twice_area / (2 * w_pos_f * w_neg_f)
        return torch.where((w_pos_f > 0) & (w_neg_f > 0), value, torch.full_like(value, math.nan))
    # Positives and all samples with a score at least g's (exact integers), then the terms as before.
    tps = np.cumsum(pos_g, axis=1, dtype=np.int64)
    np.subtract(w_pos[:, None], tps, out=tps)
    np.add(tps, pos_g, out=tps)
    all_ge = np.cumsum(all_g, axis=1, dtype=np.int64)
    np.subtract(w_all[:, None], all_ge, out=all_ge)
    np.add(all_ge, all_g, out=all_ge)
    all_ge[all_ge <= 0] = 1
    terms = pos_g.astype(np.float64)
    np.multiply(terms, tps, out=terms, casting="unsafe")
    np.divide(terms, all_ge, out=terms, casting="unsafe")
    ap_sum = torch.from_numpy(terms).to(device=device).sum(1)
    return torch.where(w_pos_f > 0, ap_sum / w_pos_f, torch.full_like(ap_sum, math.nan))


def _statistic(pos_le: Tensor, all_le: Tensor, statistic: str) -> Tensor:
    """The weighted AUROC / AP of each row, from the weights of the positives / all samples with a score at most
    each distinct score (``[count, G]`` float64, exact integers).
    """
    count = pos_le.shape[0]
    pos_g = torch.diff(pos_le, dim=1, prepend=pos_le.new_zeros(count, 1))
    all_g = torch.diff(all_le, dim=1, prepend=all_le.new_zeros(count, 1))
    w_pos, w_all = pos_le[:, -1], all_le[:, -1]
    if statistic == "auroc":
        neg_g = all_g - pos_g
        neg_below = (all_le - all_g) - (pos_le - pos_g)
        twice_area = (pos_g * (2 * neg_below + neg_g)).sum(1)
        w_neg = w_all - w_pos
        value = twice_area / (2 * w_pos * w_neg)
        return torch.where((w_pos > 0) & (w_neg > 0), value, torch.full_like(value, math.nan))
    tps = w_pos.unsqueeze(1) - (pos_le - pos_g)
    all_ge = w_all.unsqueeze(1) - (all_le - all_g)
    ap_sum = (pos_g * tps / torch.where(all_ge > 0, all_ge, torch.ones_like(all_ge))).sum(1)
    return torch.where(w_pos > 0, ap_sum / w_pos, torch.full_like(ap_sum, math.nan))
