"""The invariants every registered strategy must keep, on random histograms (plug-ins included).

Every sequence placed exactly once, no pack over max_length or max_depth, metrics consistent.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simbench.histogram import LengthHistogram
from simbench.strategies import PackOptions, available_strategies

try:
    from simbench.strategies.optimal import lp_lower_bound
except ImportError:  # the LP bound is optional for the battery
    lp_lower_bound = None

STRATEGY_NAMES = sorted(available_strategies())


@st.composite
def packing_problems(draw):
    """A histogram over 1..max_length (often sparse), a max length and an optional depth."""
    max_length = draw(st.integers(8, 128))
    present = draw(st.lists(st.integers(1, max_length), min_size=0, max_size=max_length, unique=True))
    counts = np.zeros(max_length, dtype=np.int64)
    for length in present:
        counts[length - 1] = draw(st.integers(0, 50))
    max_depth = draw(st.one_of(st.none(), st.integers(1, 6)))
    seed = draw(st.integers(0, 2**32 - 1))
    batch_size = draw(st.integers(1, 64))
    return LengthHistogram.from_counts(counts), max_length, max_depth, PackOptions(seed=seed, batch_size=batch_size)


def check_packing(packing, histogram, max_length, max_depth):
    rows, repeats, slots = packing.rows, packing.repeats, packing.slot_lengths
    assert rows.ndim == 2 and rows.shape[0] == repeats.size == slots.size
    assert np.all(repeats > 0)
    assert np.all(np.diff(rows, axis=1) <= 0), "rows hold lengths in descending order"
    assert np.unique(np.column_stack([rows, slots]), axis=0).shape[0] == rows.shape[0], "rows are distinct"
    # Every sequence placed exactly once.
    assert np.array_equal(packing.placed_histogram().counts, histogram.counts)
    # No pack over its slot length, no slot over max_length, no pack deeper than max_depth.
    assert np.all(rows.sum(axis=1) <= slots)
    assert np.all(slots <= max_length)
    if max_depth is not None:
        assert np.all(np.count_nonzero(rows, axis=1) <= max_depth)
    # Metrics agree with the packs.
    metrics = packing.metrics()
    tokens = int(repeats @ slots)
    real = int(repeats @ rows.sum(axis=1))
    assert real == histogram.real_tokens
    assert metrics["sequences"] == histogram.sequences
    assert metrics["packs"] == int(repeats.sum())
    assert metrics["tokens"] == tokens
    assert metrics["padding_tokens"] == tokens - real
    assert metrics["efficiency"] == pytest.approx(real / tokens if tokens else 1.0)
    assert metrics["packing_factor"] == pytest.approx(histogram.sequences / repeats.sum() if repeats.sum() else 0.0)
    assert metrics["strategies_used"] == rows.shape[0]
    assert metrics["depth_used"] == (int(np.count_nonzero(rows, axis=1).max()) if rows.size else 0)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=packing_problems())
def test_strategy_keeps_invariants(name, problem):
    histogram, max_length, max_depth, options = problem
    strategy = available_strategies()[name]
    packing = strategy(histogram, max_length, max_depth, options)
    check_packing(packing, histogram, max_length, max_depth)
    fixed_shape = bool(np.all(packing.slot_lengths == max_length))
    if lp_lower_bound is not None and fixed_shape and histogram.sequences:
        assert packing.packs_total >= lp_lower_bound(histogram, max_length, max_depth).lower_bound_packs


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_strategy_is_a_pure_function_of_its_arguments(name):
    histogram = LengthHistogram.from_counts(np.arange(40) % 7)
    options = PackOptions(seed=3, batch_size=5)
    strategy = available_strategies()[name]
    first, second = strategy(histogram, 40, 3, options), strategy(histogram, 40, 3, options)
    assert np.array_equal(first.rows, second.rows)
    assert np.array_equal(first.repeats, second.repeats)
    assert np.array_equal(first.slot_lengths, second.slot_lengths)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_strategy_handles_an_empty_histogram(name):
    packing = available_strategies()[name](LengthHistogram.from_counts([0] * 16), 16, None, PackOptions())
    assert packing.packs_total == 0 and packing.sequences == 0


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_strategy_places_sequences_of_exactly_max_length_alone(name):
    histogram = LengthHistogram.from_counts([0, 0, 0, 5])
    packing = available_strategies()[name](histogram, 4, None, PackOptions())
    assert packing.packs_total == 5 and packing.efficiency == 1.0


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
    histogram, max_length, max_depth, options = problem
    packing = available_strategies()[name](histogram, max_length, max_depth, options)
    expected = one_by_one_decreasing(histogram.counts, max_length, max_depth, best_fit=name == "bfd")
    assert expanded_packs(packing) == expected


@settings(max_examples=40, deadline=None)
@given(problem=packing_problems())
def test_greedy_matches_next_fit_over_the_same_shuffle(problem):
    from simbench.strategies.greedy import shuffled_lengths

    histogram, max_length, max_depth, options = problem
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


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_empty_lengths_beyond_max_length_change_nothing(name):
    counts = np.arange(30) % 4
    strategy = available_strategies()[name]
    exact = strategy(LengthHistogram.from_counts(counts), 30, 3, PackOptions(seed=2, batch_size=4))
    padded = strategy(LengthHistogram.from_counts(np.r_[counts, np.zeros(20, dtype=int)]), 30, 3,
                      PackOptions(seed=2, batch_size=4))
    assert np.array_equal(exact.rows, padded.rows) and np.array_equal(exact.repeats, padded.repeats)


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


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_a_depth_beyond_max_length_acts_as_max_length(name):
    # No pack can hold more sequences than tokens; nnlshp used to enumerate (and allocate) every level.
    histogram = LengthHistogram.from_counts([3, 2, 1, 1, 0, 0, 0, 1])
    strategy = available_strategies()[name]
    huge = strategy(histogram, 8, 10**9, PackOptions())
    assert huge.packs_total == strategy(histogram, 8, 8, PackOptions()).packs_total
    assert huge.rows.shape[1] <= 8
