"""Distinct values, counts and merged rows by sorting (simbench.distinct) beside np.unique, and the
group-by-length packer that counts 100M pair keys with them.

Target: faster than np.unique at every size (numpy 2.4 hashes plain values and sorts a copy for counts).
The short mode runs 1M values; SIMBENCH_BENCH_FULL=1 runs 10M and 100M values (rows: 10M; Packing.from_rows
merges at most a few hundred thousand) and group-by-length on 100M chat-like sequences at 8,192.
"""

import os
import time

import numpy as np
import pytest

from simbench.distinct import distinct_counts, merged_rows, sorted_distinct

FULL = os.environ.get("SIMBENCH_BENCH_FULL") == "1"
SIZES = [10_000_000, 100_000_000] if FULL else [1_000_000]


def chat_lengths(size: int) -> np.ndarray:
    """The chat-like mix of test_bench_assign.py: log-normal around 600 tokens, cut at 8,192."""
    return np.clip(np.random.default_rng(0).lognormal(np.log(600), 1.0, size), 1, 8_192).astype(np.int32)


def pair_keys(size: int) -> np.ndarray:
    """Keys like group-by-length's at 8,192: (length, padded length) pairs in 32 bits."""
    lengths = chat_lengths(size)
    padded = np.maximum.accumulate(lengths.reshape(-1, 100), axis=1).ravel()
    return lengths * 8_193 + padded


def seconds_of(function, *args) -> float:
    """The median seconds of 3 calls: np.unique's figure beside the benchmark's own median."""
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        function(*args)
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds))


@pytest.mark.parametrize("size", SIZES)
def test_distinct_counts_in_place(benchmark, size):
    keys = pair_keys(size)
    expected = np.unique(keys, return_counts=True)
    unique_seconds = seconds_of(np.unique, keys, False, False, True)  # it sorts a copy
    result = benchmark.pedantic(distinct_counts, setup=lambda: ((keys.copy(),), {"in_place": True}), rounds=3)
    assert all(np.array_equal(ours, theirs) for ours, theirs in zip(result, expected))
    benchmark.extra_info.update(values=size, np_unique_seconds=unique_seconds)


@pytest.mark.parametrize("size", SIZES)
def test_sorted_distinct(benchmark, size):
    # Up to a million distinct keys, as the transformer cost model's (batch, length group) keys.
    values = np.random.default_rng(1).integers(0, 10**6, size)
    result = benchmark.pedantic(sorted_distinct, args=(values,), rounds=3)
    assert np.array_equal(result, np.arange(10**6)[np.bincount(values, minlength=10**6) > 0])
    # np.unique's hashing at 100M would take minutes: timed up to 10M.
    benchmark.extra_info.update(values=size, np_unique_seconds=seconds_of(np.unique, values) if size <= 10**7 else None)


@pytest.mark.parametrize("size", SIZES[:1])
def test_merged_rows(benchmark, size):
    rng = np.random.default_rng(2)
    rows = np.column_stack([rng.integers(1, 131_073, size), rng.integers(1, 131_073, size)])
    rows[size // 2:] = rows[:size - size // 2]  # half the rows repeat another
    weights = rng.integers(1, 100, size)
    start = time.perf_counter()
    expected, inverse = np.unique(rows, axis=0, return_inverse=True)
    unique_seconds = time.perf_counter() - start  # one call: 17 s at 10M
    distinct, sums = benchmark.pedantic(merged_rows, args=(rows, weights), rounds=3)
    assert np.array_equal(distinct, expected)
    assert np.array_equal(sums, np.bincount(inverse.ravel(), weights=weights).astype(np.int64))
    benchmark.extra_info.update(rows=size, np_unique_seconds=unique_seconds)


@pytest.mark.skipif(not FULL, reason="100M sequences run with SIMBENCH_BENCH_FULL=1")
def test_group_by_length_on_100m_sequences(benchmark):
    from simbench.histogram import LengthHistogram
    from simbench.strategies import PackOptions, get_strategy

    histogram = LengthHistogram.from_lengths(chat_lengths(100_000_000), 8_192)
    packing = benchmark.pedantic(get_strategy("group-by-length"), args=(histogram, 8_192, None, PackOptions(seed=0)),
                                 rounds=1, iterations=1)
    assert packing.sequences == histogram.sequences and packing.real_tokens == histogram.real_tokens
    benchmark.extra_info.update(sequences=histogram.sequences, distinct_pairs=packing.strategies_used)
