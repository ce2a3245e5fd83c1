"""Tests for assigning a dataset's sequences to the packs of a histogram packing."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.errors import InputError
from simbench.histogram import LengthHistogram, load_histogram
from simbench.strategies import get_strategy
from simbench.strategies.assign import AssignedPacks, assign_packs, assign_sequences, iter_assigned_packs
from simbench.strategies.packing import Packing


def shuffled_dataset(histogram, seed):
    lengths = histogram.expand()
    np.random.default_rng(seed).shuffle(lengths)
    return lengths


def check_assignment(packing, lengths, assignment):
    """Every sequence placed once, and the packs are exactly the packing's rows and repeats."""
    assert assignment.shape == (packing.packs_total, packing.depth_used)
    if packing.packs_total == 0:
        return
    placed = assignment[assignment >= 0]
    np.testing.assert_array_equal(np.sort(placed), np.arange(lengths.size))
    pack_lengths = np.where(assignment >= 0, lengths[np.maximum(assignment, 0)], 0)
    # Filled slots come first in each row, longest first, like the packing's rows.
    np.testing.assert_array_equal(pack_lengths, -np.sort(-pack_lengths, axis=1))
    rows, repeats = np.unique(pack_lengths, axis=0, return_counts=True)
    expected = Packing.from_rows("expected", packing.max_length, None, packing.rows, packing.repeats)
    np.testing.assert_array_equal(rows, expected.rows)
    np.testing.assert_array_equal(repeats, expected.repeats)


@pytest.mark.parametrize("max_depth", [None, 3])
def test_squad_assignment_places_every_sequence_once_in_packs_matching_the_rows(max_depth):
    histogram = load_histogram("squad_1_1_384")
    packing = get_strategy("optimal")(histogram, 384, max_depth)
    lengths = shuffled_dataset(histogram, seed=5)
    check_assignment(packing, lengths, assign_sequences(packing, lengths, np.random.default_rng(0)))


small_cases = st.tuples(
    st.lists(st.integers(0, 6), min_size=1, max_size=12),
    st.one_of(st.none(), st.integers(1, 4)),
    st.sampled_from(["optimal", "none"]),
    st.integers(0, 2**32 - 1),
)


@settings(max_examples=60, deadline=None)
@given(small_cases)
def test_any_small_histogram_and_strategy_gives_a_consistent_assignment(case):
    counts, max_depth, strategy, seed = case
    histogram = LengthHistogram.from_counts(counts)
    packing = get_strategy(strategy)(histogram, histogram.max_length, max_depth)
    lengths = shuffled_dataset(histogram, seed)
    check_assignment(packing, lengths, assign_sequences(packing, lengths, np.random.default_rng(seed)))


def joined(chunks):
    """Chunks of the ragged layout as one list of packs."""
    return [chunk.sequence_indices[start:end].tolist() for chunk in chunks
            for start, end in zip(chunk.pack_offsets[:-1], chunk.pack_offsets[1:])]


@settings(max_examples=40, deadline=None)
@given(small_cases, st.integers(1, 6))
def test_chunks_of_any_size_give_a_consistent_assignment_and_the_dense_layout_is_the_same(case, slots_per_chunk):
    counts, max_depth, strategy, seed = case
    histogram = LengthHistogram.from_counts(counts)
    packing = get_strategy(strategy)(histogram, histogram.max_length, max_depth)
    lengths = shuffled_dataset(histogram, seed)
    packs = joined(iter_assigned_packs(packing, lengths, np.random.default_rng(seed), slots_per_chunk))
    dense = np.full((packing.packs_total, packing.depth_used), -1)
    for row, pack in zip(dense, packs):
        row[:len(pack)] = pack
    check_assignment(packing, lengths, dense)
    # The whole-array forms are the same draws as the chunks of the default size.
    ragged = assign_packs(packing, lengths, np.random.default_rng(seed))
    assert joined([ragged]) == joined(iter_assigned_packs(packing, lengths, np.random.default_rng(seed)))
    np.testing.assert_array_equal(assign_sequences(packing, lengths, np.random.default_rng(seed)),
                                  _dense(ragged, packing.depth_used))


def _dense(assigned: AssignedPacks, depth):
    dense = np.full((assigned.packs, depth), -1)
    for row, pack in zip(dense, joined([assigned])):
        row[:len(pack)] = pack
    return dense


@pytest.mark.parametrize("strategy", ["none", "spfhp", "ffd"])
def test_lengths_beyond_16_bits_are_assigned(strategy):
    # Lengths up to 131,072 (LLM context): both radix passes of the sort by length matter.
    rng = np.random.default_rng(2)
    lengths = np.concatenate([rng.integers(1, 131_073, 300), rng.integers(65_530, 65_542, 50), [131_072, 1]])
    histogram = LengthHistogram.from_lengths(lengths, max_length=131_072)
    packing = get_strategy(strategy)(histogram, 131_072, None)
    check_assignment(packing, lengths, assign_sequences(packing, lengths, np.random.default_rng(0)))


def test_a_mostly_empty_dense_layout_is_refused_and_the_ragged_one_works():
    # 60,001 packs of up to 5,000 slots: 300M dense cells for 65,000 sequences.
    rows = np.zeros((2, 5_000), dtype=np.int64)
    rows[0] = 1
    rows[1, 0] = 5_000
    packing = Packing.from_rows("deep", 5_000, None, rows, [1, 60_000])
    lengths = np.repeat([1, 5_000], [5_000, 60_000])
    with pytest.raises(InputError, match="ragged layout"):
        assign_sequences(packing, lengths, np.random.default_rng(0))
    ragged = assign_packs(packing, lengths, np.random.default_rng(0))
    assert sorted(ragged.depths.tolist()) == [1] * 60_000 + [5_000]
    np.testing.assert_array_equal(np.sort(ragged.sequence_indices), np.arange(lengths.size))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=40), st.integers(1, 7), st.integers(0, 2**32 - 1))
def test_the_chunked_counting_sort_places_every_element_after_the_shorter_and_earlier_ones(keys, chunk_size, seed):
    from simbench.strategies.assign import _stable_layout

    keys = np.array(keys)
    weights = np.random.default_rng(seed).integers(1, 4, keys.size)
    counts = np.bincount(keys, weights=weights, minlength=10)[1:].astype(np.int64)
    starts = np.empty(keys.size, dtype=np.int64)
    for first, order, places in _stable_layout(keys, lambda start, stop: weights[start:stop], counts, 9, chunk_size):
        starts[first + order] = places
    expected = [weights[(keys < key)].sum() + weights[:index][keys[:index] == key].sum()
                for index, key in enumerate(keys)]
    np.testing.assert_array_equal(starts, expected)


def test_same_seed_same_assignment_other_seed_another():
    histogram = load_histogram("squad_1_1_384")
    packing = get_strategy("optimal")(histogram, 384, 3)
    lengths = shuffled_dataset(histogram, seed=1)
    first = assign_sequences(packing, lengths, np.random.default_rng(7))
    np.testing.assert_array_equal(first, assign_sequences(packing, lengths, np.random.default_rng(7)))
    other = assign_sequences(packing, lengths, np.random.default_rng(8))
    assert not np.array_equal(first, other)
    # Most packs change, not just a few: the shuffles reach the whole dataset.
    assert np.mean(np.any(first != other, axis=1)) > 0.9


def test_assignment_is_uniform_over_partners_and_pack_order():
    # Two packs (2, 1): each length-2 sequence pairs with either length-1 sequence half the time.
    # Two kinds of pack, (3) and (2, 1): either comes first half the time.
    pairs = Packing.from_rows("pairs", 3, None, [[2, 1]], [2])
    pair_lengths = np.array([2, 1, 2, 1])
    kinds = Packing.from_rows("kinds", 3, None, [[3, 0], [2, 1]], [1, 1])
    kind_lengths = np.array([1, 3, 2])
    draws = 4000
    together = 0
    three_first = 0
    for seed in range(draws):
        rng = np.random.default_rng(seed)
        packs = assign_sequences(pairs, pair_lengths, rng)
        together += 0 in packs[np.any(packs == 1, axis=1)]
        three_first += assign_sequences(kinds, kind_lengths, rng)[0, 0] == 1
    # Binomial(4000, 0.5) has a standard deviation of ~32: 5 sigma is 160.
    assert abs(together - draws / 2) < 160
    assert abs(three_first - draws / 2) < 160


def test_pack_order_is_uniform_across_chunks():
    # One slot per chunk: each chunk draws its packs from those left. Three kinds of pack, (3),
    # (2, 1) and (1, 1, 1) twice: each order of the kinds has its probability of a random shuffle.
    kinds = Packing.from_rows("kinds", 3, None, [[3, 0, 0], [2, 1, 0], [1, 1, 1]], [1, 1, 2])
    lengths = np.array([1, 3, 2, 1, 1, 1, 1, 1, 1])
    draws = 3000
    orders = {}
    for seed in range(draws):
        packs = joined(iter_assigned_packs(kinds, lengths, np.random.default_rng(seed), slots_per_chunk=1))
        order = tuple(len(pack) for pack in packs)
        orders[order] = orders.get(order, 0) + 1
    # 4!/2! = 12 orders, each 1/12: Binomial(3000, 1/12) has a standard deviation of ~15.
    assert len(orders) == 12
    assert all(abs(count - draws / 12) < 5 * 15.1 for count in orders.values())


def test_mismatched_dataset_is_an_input_error():
    packing = Packing.from_rows("demo", 8, None, [[5, 3], [8, 0]], [2, 1])
    with pytest.raises(InputError, match="the dataset has 1 sequences of length 3, the packing places 2"):
        assign_sequences(packing, np.array([5, 3, 5, 8, 4]), np.random.default_rng(0))
    with pytest.raises(InputError, match="lie outside 1..8"):
        assign_sequences(packing, np.array([5, 3, 5, 3, 9]), np.random.default_rng(0))
    with pytest.raises(InputError, match="1-D"):
        assign_sequences(packing, np.array([[5, 3], [5, 3]]), np.random.default_rng(0))
    with pytest.raises(InputError, match="whole numbers"):
        assign_sequences(packing, np.array([5.0, 3, 5, 3, 8]), np.random.default_rng(0))


@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_assign_command_writes_the_assignment(tmp_path, suffix):
    import pandas as pd
    from typer.testing import CliRunner

    from simbench.cli import app

    histogram = load_histogram("squad_1_1_384")
    lengths = shuffled_dataset(histogram, seed=3)
    np.save(tmp_path / "lengths.npy", lengths)
    output = tmp_path / f"packs{suffix}"
    result = CliRunner().invoke(app, ["assign", "squad_1_1_384", "--lengths", str(tmp_path / "lengths.npy"),
                                      "--strategy", "optimal", "--max-depth", "3", "--seed", "4", "-o", str(output)])
    assert result.exit_code == 0, result.output
    packing = get_strategy("optimal")(histogram, 384, 3)
    expected = assign_sequences(packing, lengths, np.random.default_rng(4))
    if suffix == ".npy":
        np.testing.assert_array_equal(np.load(output), expected)
    else:
        written = pd.read_parquet(output)["sequence_indices"]
        assert len(written) == packing.packs_total
        for row, indices in zip(expected[:100], written[:100]):
            np.testing.assert_array_equal(indices, row[row >= 0])
    # Written atomically: no temporary file is left beside the output.
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["lengths.npy", output.name])


def test_assign_command_rejects_a_dataset_that_is_not_the_histogram(tmp_path):
    from typer.testing import CliRunner

    from simbench.cli import app

    np.save(tmp_path / "lengths.npy", load_histogram("squad_1_1_384").expand()[1:])
    result = CliRunner().invoke(app, ["assign", "squad_1_1_384", "--lengths", str(tmp_path / "lengths.npy"),
                                      "--strategy", "optimal", "-o", str(tmp_path / "packs.npy")])
    assert isinstance(result.exception, InputError)
    assert "do not match the packing's histogram" in str(result.exception)
    assert not (tmp_path / "packs.npy").exists()


def test_assign_command_reports_an_unwritable_output_as_an_input_error(tmp_path):
    from typer.testing import CliRunner

    from simbench.cli import app

    histogram = LengthHistogram.from_counts([2, 0, 1])
    histogram.to_csv(tmp_path / "h.csv")
    np.save(tmp_path / "lengths.npy", histogram.expand())
    (tmp_path / "packs.npy").mkdir()
    result = CliRunner().invoke(app, ["assign", str(tmp_path / "h.csv"), "--lengths", str(tmp_path / "lengths.npy"),
                                      "--strategy", "spfhp", "-o", str(tmp_path / "packs.npy")])
    assert isinstance(result.exception, InputError)
    assert f"{tmp_path / 'packs.npy'}: -o is a folder; give a file name" in str(result.exception)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["h.csv", "lengths.npy", "packs.npy"]
