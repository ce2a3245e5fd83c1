"""Sorted batching and padding exchange priced by their distinct batches equal every device simulated."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.costmodels.base import ExecutionMode
from simbench.histogram import LengthHistogram, load_histogram
from simbench.sim.batching import SortedBatchSampler
from simbench.sim.exchange import deal_sorted
from simbench.costmodels.linear import LinearCostModel
from simbench.sim.engines.vectorized import aggregate_by_cluster_size
from simbench.sim.pricing import price_batches
from simbench.sim.simulate import simulate
from simbench.sim.windows import SortedWindows, dealt_batches
from simbench.strategies import get_strategy
from simbench.strategies.packing import PackOptions

# Measured against padding to max length, as the figures and closed forms here are.
simulate = functools.partial(simulate, baseline="none")

COST_MODEL = LinearCostModel(seconds_per_token=1e-5, step_overhead_seconds=1e-3)
FIELDS = ("slowest_device_seconds", "mean_device_seconds", "compute_seconds", "padding_seconds",
          "overhead_seconds", "real_tokens", "sequences")


@settings(max_examples=25, deadline=None)
@given(counts=st.lists(st.integers(0, 9), min_size=2, max_size=12), batch_size=st.integers(1, 5),
       seed=st.integers(0, 2**16))
def test_windows_of_sorted_batches_equal_every_device_simulated(counts, batch_size, seed):
    """Small datasets, so that windows wrap around the sorted dataset and even lap it several times."""
    if sum(counts) == 0:
        counts[0] = 1
    histogram = LengthHistogram(np.array([0, *counts]), name="tiny")
    sampler = SortedBatchSampler(get_strategy("sort")(histogram, histogram.max_length, None,
                                                      PackOptions(batch_size=batch_size)))
    windows = SortedWindows(sampler, COST_MODEL, batch_size)
    steps, largest = 6, 3 * windows.batches + 2
    per_device = price_batches(COST_MODEL, sampler.batches(np.random.default_rng(seed), steps, largest, batch_size),
                               ExecutionMode.SORTED, steps, largest)
    first = windows.first_batches(np.random.default_rng(seed), steps)
    sizes = sorted({1, 2, windows.batches, windows.batches + 1, largest})
    for size, expected in aggregate_by_cluster_size(per_device, sizes).items():
        found = windows.aggregates(first, size)
        for name in FIELDS:
            assert np.allclose(getattr(found, name), getattr(expected, name)), (size, name)


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=10), devices=st.integers(1, 50),
       batch_size=st.integers(1, 6))
def test_dealt_batches_with_their_device_counts_are_every_devices_batch(counts, devices, batch_size):
    counts = np.array(counts)
    total = devices * batch_size
    # Any split of the global batch over the lengths: scale the drawn counts to devices x batch_size items.
    counts = np.diff(np.round(np.concatenate([[0], np.cumsum(counts)]) * total / max(counts.sum(), 1))).astype(int)
    counts[-1] += total - counts.sum()
    lengths = np.arange(1, counts.size + 1) * 7
    ordered = np.repeat(lengths, counts)
    expected = deal_sorted(ordered.reshape(1, devices, batch_size))[0]
    batches, devices_each = dealt_batches(counts, lengths, devices, batch_size)
    assert devices_each.sum() == devices and (devices_each > 0).all()
    assert np.array_equal(np.repeat(batches, devices_each, axis=0), np.sort(expected, axis=1)[:, ::-1][:, ::-1])
    assert batches.shape[0] <= min(devices, counts.size + batch_size)


def test_coupled_plans_run_on_2_20_devices_and_agree_with_every_device_simulated():
    squad = load_histogram("squad_1_1_384")
    plans = ["sort", "unpad-exchange", "unpad-exchange-overlap"]
    arguments = dict(batch_size=2, steps=60, seed=3)
    every = simulate(squad, plans, [1, 512], COST_MODEL, engine="vectorized", **arguments).summary
    distinct = simulate(squad, plans, [1, 512, 2**20], COST_MODEL, **arguments).summary
    assert (distinct.query("devices == 512 and strategy in @plans")["engine"] == "vectorized").all()
    both = [summary.query("devices == 512").set_index("strategy")["step_seconds_mean"] for summary in (every, distinct)]
    # Exchange deals nearly equal batches at 512 devices; sorted windows vary more from step to step.
    assert both[1]["unpad-exchange"] == pytest.approx(both[0]["unpad-exchange"], rel=0.01)
    assert both[1]["sort"] == pytest.approx(both[0]["sort"], rel=0.15)
    huge = distinct.query("devices == 1048576").set_index("strategy")
    assert set(huge.index) == {"none", *plans} and (huge["speedup"] > 0).all()
    # The exchange sorts the global batch on the host (n log n): on a million devices that outweighs the step.
    assert huge.loc["unpad-exchange", "overhead_seconds"] > huge.loc["unpad-exchange", "compute_seconds"]


@pytest.mark.parametrize("batch_size", [1, 3])
def test_exchange_priced_in_parts_equals_every_step_priced_at_once(batch_size):
    """Parts as small as one step each, or a few steps, give the very same aggregates as one call."""
    from simbench.costmodels.transformer import TransformerCostModel
    from simbench.sim.windows import exchange_aggregates

    squad = load_histogram("squad_1_1_384")
    probabilities = squad.counts / squad.counts.sum()
    cost_model = TransformerCostModel("bert-large", "h100-sxm")

    def aggregates(sequences_per_part):
        return exchange_aggregates(probabilities, squad.lengths, 512, batch_size, 30, cost_model,
                                   np.random.default_rng(7), sequences_per_part=sequences_per_part)

    at_once = aggregates(10**9)
    for sequences_per_part in (1, 1000):
        in_parts = aggregates(sequences_per_part)
        for name in FIELDS:
            assert np.array_equal(getattr(in_parts, name), getattr(at_once, name)), (sequences_per_part, name)
    assert at_once.slowest_device_seconds.shape == (30,)
