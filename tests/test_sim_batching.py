"""Per-device batches: exact sampling, BatchSet invariants, sorted batches, padding exchange, bucketing."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.histogram import LengthHistogram
from simbench.sim.batching import (InverseCdf, OutlierDelaySampler, PackSampler, SequenceSampler, SortedBatchSampler,
                                   draw_in_proportion, unpadded_batches)
from simbench.sim.exchange import deal_sorted
from simbench.sim.vts import bucket_by_length
from simbench.strategies.packing import Packing

PACKING = Packing.from_rows("demo", 16, 3, [[10, 6, 0], [8, 4, 4], [16, 0, 0], [3, 0, 0]], repeats=[5, 2, 1, 40])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=60).filter(lambda weights: sum(weights) > 0),
       st.integers(0, 2**32 - 1))
def test_inverse_cdf_equals_searchsorted_on_the_same_uniforms(weights, seed):
    picks = InverseCdf(np.array(weights)).sample(np.random.default_rng(seed), 500)
    uniform = np.random.default_rng(seed).random(500)
    cdf = np.cumsum(weights) / np.sum(weights)
    expected = np.minimum(np.searchsorted(cdf, uniform, side="right"), len(weights) - 1)
    assert np.array_equal(picks, expected)
    assert np.all(np.array(weights)[picks] > 0)
    assert np.array_equal(draw_in_proportion(np.array(weights), np.random.default_rng(seed), (500,)), picks)
    # Fewer draws than weights: the same picks without the table.
    assert np.array_equal(draw_in_proportion(np.array(weights), np.random.default_rng(seed), (1,)), picks[:1])


def test_packs_are_drawn_in_proportion_to_their_repeats():
    batches = PackSampler(PACKING).batches(np.random.default_rng(0), 200, 10, 32)
    first_length_of_row = np.zeros(batches.row_slots.size, dtype=np.int64)
    np.maximum.at(first_length_of_row, batches.sequence_row, batches.sequence_lengths)
    for row, repeats in zip(PACKING.rows, PACKING.repeats):
        share = np.mean(first_length_of_row == row[0])  # first lengths identify the rows here
        assert abs(share - repeats / PACKING.packs_total) < 0.01


def test_pack_batches_keep_every_pack_whole_and_the_batch_set_contract():
    batches = PackSampler(PACKING).batches(np.random.default_rng(1), 10, 5, 8)
    assert batches.batches == 50 and batches.row_slots.size == 400
    assert np.all(np.diff(batches.row_batch) >= 0) and np.all(np.diff(batches.sequence_row) >= 0)
    tokens_per_row = np.bincount(batches.sequence_row, weights=batches.sequence_lengths, minlength=400)
    assert np.all(tokens_per_row <= batches.row_slots)
    rows_as_sets = {tuple(sorted(row[row > 0])) for row in PACKING.rows}
    for row in range(400):
        assert tuple(sorted(batches.sequence_lengths[batches.sequence_row == row])) in rows_as_sets


def test_drawing_in_chunks_gives_the_same_batches_as_drawing_at_once():
    whole = PackSampler(PACKING).batches(np.random.default_rng(7), 20, 2, 4)
    rng = np.random.default_rng(7)
    parts = [PackSampler(PACKING).batches(rng, 5, 2, 4) for _ in range(4)]
    assert np.array_equal(whole.sequence_lengths, np.concatenate([part.sequence_lengths for part in parts]))
    histogram = LengthHistogram.from_lengths([1, 2, 2, 5, 9, 9, 9], max_length=9)
    sampler, rng = SequenceSampler(histogram), np.random.default_rng(3)
    chunked = np.concatenate([sampler.lengths_of(rng, (5, 3, 4)) for _ in range(2)])
    assert np.array_equal(sampler.lengths_of(np.random.default_rng(3), (10, 3, 4)), chunked)


def test_sorted_batches_are_runs_of_the_sorted_dataset_padded_to_their_longest():
    lengths = np.arange(1, 101)
    packing = Packing.from_rows("sort", 100, 1, lengths, np.ones(100, dtype=np.int64))
    steps, devices = 30, 3
    batches = SortedBatchSampler(packing).batches(np.random.default_rng(2), steps, devices, 10)
    per_batch = batches.sequence_lengths.reshape(steps, devices, 10)
    assert np.all(np.diff(per_batch, axis=2) == -1)  # ten consecutive lengths of the sorted dataset
    assert np.all(per_batch[..., 0] % 10 == 0)  # aligned with the cuts of the sorted dataset, longest first
    # A step's devices take consecutive batches (wrapping around from the shortest to the longest).
    assert np.all((per_batch[:, :-1, 0] - per_batch[:, 1:, 0]) % 100 == 10)
    assert np.array_equal(batches.row_slots.reshape(steps, devices, 10),
                          np.repeat(per_batch.max(axis=2), 10).reshape(steps, devices, 10))


def test_unpadded_batches_have_no_padding():
    lengths = np.array([[[3, 4], [5, 6]]])
    batches = unpadded_batches(lengths)
    assert batches.batches == 2 and np.array_equal(batches.row_slots, batches.sequence_lengths)
    assert np.array_equal(batches.row_batch, [0, 0, 1, 1])


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_padding_exchange_deals_the_sorted_global_batch_round_robin(devices, batch_size, seed):
    lengths = np.random.default_rng(seed).integers(1, 512, size=(3, devices, batch_size))
    dealt = deal_sorted(lengths)
    for step in range(3):
        ordered = np.sort(lengths[step].ravel())
        assert np.array_equal(np.sort(dealt[step].ravel()), ordered)
        for rank in range(devices):
            assert np.array_equal(dealt[step, rank], ordered[rank::devices])
        # Round-robin over sorted items: any two ranks' token totals differ by at most the length range.
        totals = dealt[step].sum(axis=1)
        assert totals.max() - totals.min() <= ordered[-1] - ordered[0]


def test_bucketing_sorts_the_whole_global_batch_and_gives_every_device_the_same_band():
    lengths = np.random.default_rng(0).integers(1, 512, size=(10, 3, 8))
    bucketed = bucket_by_length(lengths, 4, np.random.default_rng(1))
    for first in (0, 4, 8):
        window = slice(first, first + 4)
        assert np.array_equal(np.sort(bucketed[window].ravel()), np.sort(lengths[window].ravel()))
        steps = bucketed[window].reshape(bucketed[window].shape[0], -1)
        # Global batches of a window cover disjoint, increasing length ranges.
        assert np.all(steps.max(axis=1)[:-1] <= steps.min(axis=1)[1:])
        # Within a step the devices' samples interleave: dealt round-robin from the sorted global batch.
        # Device d's k-th shortest sample is the global batch's (k x devices + d)-th.
        for step in bucketed[window]:
            ordered = np.sort(step, axis=1)  # (devices, batch)
            assert np.all(ordered.max(axis=0)[:-1] <= ordered.min(axis=0)[1:])


# ------------------------------------------------------------------------------------------ outlier delay

def test_outlier_delay_gives_each_step_outliers_everywhere_or_nowhere_in_proportion_to_the_packs():
    """PACKING's packs led by 10 and 16 tokens hold an outlier at threshold 9 (5 + 1 of 48 packs), those led by
    8 and 3 do not; every device of a step draws the step's kind, outlier steps one in 8 exactly (within one
    step of any run's length), evenly spread as a queue releases them."""
    sampler = OutlierDelaySampler(PACKING, threshold=9)
    steps, devices, batch_size = 20_000, 3, 2
    picks = sampler.picks(np.random.default_rng(0), steps, devices, batch_size).reshape(steps, -1)
    outlier = sampler.longest[picks] >= 9
    assert np.all(outlier.all(axis=1) | ~outlier.any(axis=1))
    for steps_so_far in (8, 100, 1001, steps):
        assert abs(outlier[:steps_so_far, 0].sum() - steps_so_far / 8) <= 1
    assert set(np.diff(np.flatnonzero(outlier[:, 0]))) == {8}
    # Within a kind, packs come in proportion to their repeats: 10-led 5 times as often as 16-led.
    led_by_ten = np.mean(sampler.longest[picks[outlier[:, 0]]] == 10)
    assert abs(led_by_ten - 5 / 6) < 0.01


def test_outlier_delay_draws_the_same_batches_in_chunks_of_steps():
    whole = OutlierDelaySampler(PACKING, threshold=9).picks(np.random.default_rng(5), 40, 4, 3)
    sampler, rng = OutlierDelaySampler(PACKING, threshold=9), np.random.default_rng(5)
    chunked = np.concatenate([sampler.picks(rng, 15, 4, 3), sampler.picks(rng, 25, 4, 3)])
    assert np.array_equal(whole, chunked)


def test_outlier_delay_with_one_kind_draws_like_plain_packs():
    """No pack reaches the threshold: one kind, packs in proportion to their repeats, as PackSampler draws them."""
    picks = OutlierDelaySampler(PACKING, threshold=100).picks(np.random.default_rng(1), 5_000, 2, 4)
    shares = np.bincount(picks, minlength=PACKING.strategies_used) / picks.size
    assert np.allclose(shares, PACKING.repeats / PACKING.packs_total, atol=0.01)


@pytest.mark.parametrize("seed", range(6))
def test_the_guide_table_is_the_search_it_replaces(seed):
    from simbench.sim.batching import _guide_table

    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 5000))
    weights = rng.integers(0, 4, size).astype(float) if seed % 2 else rng.random(size) ** 8
    weights[-1] += 1.0
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    cdf[-1] = np.inf
    cells = 8 * size
    assert np.array_equal(_guide_table(cdf, cells), np.searchsorted(cdf, np.arange(cells) / cells, side="right"))
