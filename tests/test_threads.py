"""The CPU passes on worker threads: the same sorted keys and the same bits for any number of threads and parts."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from _float32 import f32
from sklearn.metrics import average_precision_score, roc_auc_score

from torchmetrics_varlen.functional import _ranking, _sort, auroc, average_precision


@pytest.fixture
def threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _scores(kind: str, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.rand(n, generator=gen) < 0.35
    if kind == "rand":  # float32 from 2**24 values: many 1 + 1 ties
        preds = torch.rand(n, generator=gen)
    elif kind == "coarse":  # long runs of both classes
        preds = torch.randint(0, 40, (n,), generator=gen) / 40
    elif kind == "one":  # a single score: nothing to split
        preds = torch.full((n,), 0.25)
    elif kind == "half_run":  # the upper half's middle in a long run of one score: that part is sorted whole
        preds = torch.rand(n, generator=gen) / 2
        upper = torch.rand(n, generator=gen) < 0.5
        preds[upper] = torch.where(torch.rand(int(upper.sum()), generator=gen) < 0.7, 0.75, 0.5 + preds[upper])
    else:  # logits: wide (int64) keys
        preds = torch.randn(n, generator=gen) * 3
    return preds, target


def _reference_sums(col: _sort.SortedKeys) -> tuple[int, float]:
    """The chunk-by-chunk torch passes (the path every device takes): twice the area and ``P * AP``."""
    area, ap = 0, 0.0
    n_pos, n_all = _sort.size(col)
    for p, a, chunk in _sort.chunks(col):
        assert isinstance(chunk, torch.Tensor)
        area += _ranking._twice_area_of_keys(chunk, p, a)
        ap += _ranking._ap_sum_of_counts(_sort.local_counts(chunk), p, a, n_pos, n_all)
    return area, ap


@pytest.mark.parametrize("kind", ["rand", "coarse", "one", "half_run", "logits"])
@pytest.mark.parametrize("num_threads", [1, 2, 3, 8])
def test_parts_sort_and_sum_to_the_same_bits(
    kind: str, num_threads: int, threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sort, "PART_MIN", 700)  # parts of a few thousand keys
    monkeypatch.setattr(_ranking, "AREA_BLOCK", 97)  # runs of ties straddle blocks and parts
    monkeypatch.setattr(_ranking, "RUN_BATCH", 5)  # longer runs measured a few at a time
    monkeypatch.setattr(_sort, "CHUNK", 300)  # AP: many chunks per block, and chunks longer than a block
    monkeypatch.setattr(_ranking, "AP_BLOCK", 1000)
    torch.set_num_threads(num_threads)
    preds, target = _scores(kind, 20_011, seed=num_threads)
    compact = kind != "logits"
    keys = _sort.encode(preds, target, compact)
    expected = np.sort(keys.numpy())
    col = _sort.SortedKeys(_sort.sort_keys_(keys), torch.float32, int(target.sum()), compact)
    assert np.array_equal(col.keys.numpy(), expected)
    sums = _ranking.rank_sums(col)
    assert (sums.twice_area, sums.ap_sum) == _reference_sums(col)  # integers, and the same float64 order


def test_a_part_whose_middle_sits_in_a_long_run_is_not_split() -> None:
    """NumPy's partition slows down 20x around a key that holds half of them; such parts are sorted whole."""
    rng = np.random.default_rng(0)
    distinct = rng.permutation(100_000).astype(np.int32)
    assert not _sort._middle_run_is_long(distinct)
    assert not _sort._middle_run_is_long(np.where(rng.random(100_000) < 0.01, 50_000, distinct).astype(np.int32))
    assert _sort._middle_run_is_long(np.where(rng.random(100_000) < 0.1, 50_000, distinct).astype(np.int32))
    assert _sort._middle_run_is_long(np.full(5, 7, dtype=np.int32))
    # two tied blocks around a thin band of distinct keys: the middle is not in a run, but runs hold most keys
    middle = rng.random(100_000) < 0.005
    band = np.where(rng.random(100_000) < 0.5, 0, 200_000).astype(np.int32)
    band[middle] = 100_000 + np.arange(int(middle.sum()), dtype=np.int32)
    assert _sort._middle_run_is_long(band)


@pytest.mark.parametrize("seed", range(30))
def test_run_sizes_count_equal_neighbours_up_to_the_ends(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = np.sort(rng.integers(0, int(rng.integers(1, 12)), int(rng.integers(1, 40)))).astype(np.int32)
    at = np.sort(rng.choice(k.shape[0], int(rng.integers(1, k.shape[0] + 1)), replace=False)).astype(np.int64)
    up = [int(np.count_nonzero(k[i:] == k[i])) for i in at]  # sorted: the equal values after i are its run
    down = [int(np.count_nonzero(k[: i + 1] == k[i])) for i in at]
    assert _ranking._run_sizes(k, at, 1).tolist() == up
    assert _ranking._run_sizes(k, at, -1).tolist() == down


@pytest.mark.parametrize("m", [1, 1023, 1024, 1025, 5000, 1 << 17])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("fill", ["ones", "random"])
def test_position_sums_are_exact_for_full_rows(m: int, dtype: type, fill: str) -> None:
    """Rows of all positives are the largest row sums (just below 2**31 in int32): still exact."""
    labels = np.ones(m, dtype=dtype) if fill == "ones" else np.random.default_rng(m).integers(0, 2, m).astype(dtype)
    positions = np.arange(_ranking.ROW, dtype=np.int32) + (1 << _ranking.ROW_SHIFT)
    row_starts = np.arange(0, m, _ranking.ROW, dtype=np.int64)
    count, total = _ranking._position_sums(labels, positions, row_starts, np.arange(m, dtype=dtype))
    assert count == int(labels.sum())
    assert total == int(np.flatnonzero(labels).sum())


@pytest.mark.parametrize("kind", ["rand", "coarse"])
def test_ap_does_not_depend_on_the_number_of_threads(kind: str, threads: None) -> None:
    """The float64 sum of AP has one order whatever ``torch.set_num_threads`` says (``torch.dot`` on MKL changes
    its order with the thread count for vectors of 65,536 and more: chunks this size), on every path.
    """
    preds, target = _scores(kind, 300_000, seed=11)
    sums = set()
    for num_threads in (1, 2, 3, 8):
        torch.set_num_threads(num_threads)
        keys = _sort.sorted_keys(preds, target)
        counts = _sort.ascending_counts(preds.double(), target)  # float64 scores: the counts path
        sums |= {_ranking.rank_sums(keys).ap_sum, _ranking.rank_sums(counts).ap_sum}
        sums.add(_reference_sums(keys)[1])
    assert len(sums) == 1


@pytest.mark.parametrize("parts", [2, 4, 8])
def test_split_points_never_split_a_score(parts: int) -> None:
    preds, target = _scores("coarse", 5000, seed=parts)
    keys = _sort.sort_keys_(_sort.encode(preds, target))
    cuts = _sort.split_points(keys, parts)
    assert cuts[0] == 0
    assert cuts[-1] == keys.numel()
    assert cuts == sorted(cuts)
    for cut in cuts[1:-1]:
        if 0 < cut < keys.numel():
            assert int(keys[cut - 1]) >> 1 != int(keys[cut]) >> 1


@pytest.mark.parametrize("num_threads", [1, 4])
def test_threaded_values_match_sklearn(num_threads: int, threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sort, "PART_MIN", 1000)
    torch.set_num_threads(num_threads)
    preds, target = _scores("rand", 50_000, seed=3)
    preds = (torch.round(preds * 300) / 300).float()
    assert float(auroc(preds, target)) == pytest.approx(f32(roc_auc_score(target, preds.double())), abs=1e-7)
    assert float(average_precision(preds, target)) == pytest.approx(
        f32(average_precision_score(target, preds.double())), abs=1e-7
    )


def test_run_all_keeps_the_order_and_raises_a_workers_error() -> None:
    assert _sort.run_all(lambda x: x * x, range(6)) == [0, 1, 4, 9, 16, 25]

    def fail(x: int) -> int:
        if x == 2:
            msg = "part 2"
            raise ValueError(msg)
        return x

    with pytest.raises(ValueError, match="part 2"):
        _sort.run_all(fail, range(4))


def _child_auroc(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    torch.set_num_threads(2)
    preds, target = _scores("rand", 4000, seed=5)
    queue.put(float(auroc(preds, target)))


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform")
def test_a_forked_child_makes_its_own_pool(threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent's pool threads do not exist in a forked child (a DataLoader worker, a fork-started rank): the child
    must not wait on them.
    """
    monkeypatch.setattr(_sort, "PART_MIN", 500)
    torch.set_num_threads(2)
    # the parent's pool now has idle threads (which a copied pool would count on in the child)
    assert _sort.run_all(lambda x: time.sleep(0.05) or x + 1, range(8)) == list(range(1, 9))
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_auroc, args=(queue,))
    child.start()
    child.join(timeout=30)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive, "the forked child hung on its parent's pool"
    preds, target = _scores("rand", 4000, seed=5)
    assert queue.get(timeout=5) == float(auroc(preds, target))
