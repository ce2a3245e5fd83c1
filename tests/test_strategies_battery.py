"""The invariants every registered strategy must keep, on random histograms (plug-ins included).

Every sequence placed exactly once, no pack over max_length or max_depth, metrics consistent, no fewer
packs than the LP bound: simbench.testing's battery, one test per strategy and check; then the
vectorized packers against their one-at-a-time definitions.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.histogram import LengthHistogram
from simbench.strategies import PackOptions, available_strategies
from simbench.testing import STRATEGY_CHECKS, packing_problems

STRATEGY_NAMES = sorted(available_strategies())


@pytest.mark.parametrize("check", STRATEGY_CHECKS, ids=lambda check: check.__name__.removeprefix("check_"))
@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_strategy_passes_the_battery(name, check):
    check(available_strategies()[name])


# The vectorized packers against their one-sequence-at-a-time definitions.

def one_by_one_decreasing(counts, max_length, max_depth, best_fit):
    packs = []  # [free space, lengths]
    for length in range(len(counts), 0, -1):
        for _ in range(counts[length - 1]):
            fitting = [index for index, (space, members) in enumerate(packs)
                       if space >= length and (max_depth is None or len(members) < max_depth)]
            if not fitting:
                packs.append([max_length - length, [length]])
                continue
            index = min(fitting, key=lambda i: (packs[i][0], i)) if best_fit else fitting[0]
            packs[index][0] -= length
            packs[index][1].append(length)
    return sorted(tuple(sorted(members, reverse=True)) for _, members in packs)


def one_by_one_next_fit(lengths, max_length, max_depth):
    packs, current = [], []
    for length in lengths:
        if current and (sum(current) + length > max_length or (max_depth and len(current) == max_depth)):
            packs.append(current)
            current = []
        current.append(int(length))
    return sorted(tuple(sorted(pack, reverse=True)) for pack in packs + ([current] if current else []))


def expanded_packs(packing):
    packs = []
    for row, repeat in zip(packing.rows, packing.repeats):
        packs.extend([tuple(int(length) for length in row if length)] * int(repeat))
    return sorted(packs)


@pytest.mark.parametrize("name", ["ffd", "bfd"])
@settings(max_examples=40, deadline=None)
@given(problem=packing_problems())
def test_decreasing_fit_matches_one_by_one_placement(name, problem):
    histogram, max_length, max_depth, options = problem.histogram, problem.max_length, problem.max_depth, problem.options
    packing = available_strategies()[name](histogram, max_length, max_depth, options)
    expected = one_by_one_decreasing(histogram.counts, max_length, max_depth, best_fit=name == "bfd")
    assert expanded_packs(packing) == expected


@settings(max_examples=40, deadline=None)
@given(problem=packing_problems())
def test_greedy_matches_next_fit_over_the_same_shuffle(problem):
    from simbench.strategies.greedy import shuffled_lengths

    histogram, max_length, max_depth, options = problem.histogram, problem.max_length, problem.max_depth, problem.options
    packing = available_strategies()["greedy"](histogram, max_length, max_depth, options)
    lengths = shuffled_lengths(histogram, np.random.default_rng(options.seed))
    assert expanded_packs(packing) == one_by_one_next_fit(lengths, max_length, max_depth)


def test_greedy_next_fit_crosses_many_blocks():
    """Long datasets exercise the repair of lockstep chains across block boundaries."""
    from simbench.strategies.greedy import shuffled_lengths

    histogram = LengthHistogram.from_counts(np.r_[np.full(60, 40), np.zeros(40, dtype=int)])
    for max_depth in (None, 2, 5):
        packing = available_strategies()["greedy"](histogram, 100, max_depth, PackOptions(seed=11))
        lengths = shuffled_lengths(histogram, np.random.default_rng(11))
        assert expanded_packs(packing) == one_by_one_next_fit(lengths, 100, max_depth)


# nnlshp's building blocks against brute force and SciPy.

@pytest.mark.parametrize("max_length, depth", [(1, 1), (9, 2), (12, 3), (16, 5), (30, 4)])
def test_exact_fill_strategies_are_every_partition_in_lexicographic_order(max_length, depth):
    from itertools import combinations_with_replacement

    from simbench.strategies.nnlshp import count_exact_fill_strategies, exact_fill_strategies

    expected = sorted(parts for size in range(1, depth + 1)
                      for parts in combinations_with_replacement(range(1, max_length + 1), size)
                      if sum(parts) == max_length)
    listed = [tuple(int(part) for part in row if part) for row in exact_fill_strategies(max_length, depth)]
    assert listed == expected
    assert count_exact_fill_strategies(max_length, depth) == len(expected)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(2, 12), columns=st.integers(1, 40))
def test_nonnegative_least_squares_matches_scipy(seed, rows, columns):
    from scipy import optimize, sparse

    from simbench.strategies.nnlshp import nonnegative_least_squares

    rng = np.random.default_rng(seed)
    matrix = rng.integers(0, 3, size=(rows, columns)) * rng.uniform(0.1, 1.0, size=(rows, 1))
    target = rng.uniform(-5, 50, size=rows)
    solution = nonnegative_least_squares(sparse.csc_matrix(matrix), target)
    assert np.all(solution >= 0)
    _, residual = optimize.nnls(matrix, target)
    assert np.linalg.norm(matrix @ solution - target) == pytest.approx(residual, rel=1e-7, abs=1e-7)


def test_removing_a_column_updates_the_cholesky_factor():
    from simbench.strategies.nnlshp import drop_from_factor

    columns = np.random.default_rng(0).normal(size=(20, 8))
    factor = np.zeros((10, 10))
    factor[:8, :8] = np.linalg.cholesky(columns.T @ columns)
    drop_from_factor(factor, 8, 3)
    kept = np.delete(columns, 3, axis=1)
    assert np.allclose(factor[:7, :7] @ factor[:7, :7].T, kept.T @ kept)
    assert np.allclose(np.triu(factor[:7, :7], 1), 0) and np.allclose(factor[7:], 0)


@pytest.mark.parametrize("length, count, max_depth", [(170, 3000, None), (3, 4000, 2), (100, 2500, None)])
def test_greedy_on_periodic_data_where_chains_never_meet(length, count, max_depth):
    """Sequences all alike: chains started at block starts run parallel to the true one forever."""
    from simbench.strategies.greedy import shuffled_lengths

    counts = np.zeros(512, dtype=np.int64)
    counts[length - 1] = count
    histogram = LengthHistogram.from_counts(counts)
    packing = available_strategies()["greedy"](histogram, 512, max_depth, PackOptions(seed=0))
    lengths = shuffled_lengths(histogram, np.random.default_rng(0))
    assert expanded_packs(packing) == one_by_one_next_fit(lengths, 512, max_depth)


def test_greedy_exact_route_alone_matches_next_fit(monkeypatch):
    from simbench.strategies import greedy

    monkeypatch.setattr(greedy, "MAX_REPAIR_ROUNDS", 0)
    histogram = LengthHistogram.from_counts(np.r_[np.full(60, 30), np.zeros(40, dtype=int)])
    packing = available_strategies()["greedy"](histogram, 100, None, PackOptions(seed=5))
    lengths = greedy.shuffled_lengths(histogram, np.random.default_rng(5))
    assert expanded_packs(packing) == one_by_one_next_fit(lengths, 100, None)


