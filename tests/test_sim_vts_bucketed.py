"""Bucketed VTS priced from each step's distinct batches, held to the per-device path where both run."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.costmodels.transformer import TransformerCostModel
from simbench.histogram import load_histogram
from simbench.sim import vts_bucketed
from simbench.sim.simulate import simulate
from simbench.sim.vts import bucket_by_length
from simbench.sim.vts_bucketed import bucketed_vts_aggregates, window_batches

COST_MODEL = TransformerCostModel("bert-large", "a100")
SQUAD = load_histogram("squad_1_1_384")


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_distinct_batches_are_what_bucketing_deals_every_device(devices, batch_size, window, seed):
    rng = np.random.default_rng(seed)
    lengths = np.arange(1, 13)
    drawn = rng.choice(lengths, size=(window, devices, batch_size), p=np.linspace(1, 3, 12) / 24)
    dealt = np.sort(bucket_by_length(drawn, window, rng), axis=2)  # each device's batch, its shuffle undone
    counts = np.bincount(drawn.ravel(), minlength=13)[1:]
    steps = list(window_batches(counts, lengths, devices, batch_size))
    assert len(steps) == window
    for step, (batches, devices_each) in enumerate(steps):
        assert devices_each.sum() == devices and np.all(devices_each > 0)
        assert np.array_equal(np.repeat(batches, devices_each, axis=0), dealt[step])


@pytest.mark.parametrize("devices", [128, 512])
def test_distinct_batches_give_the_per_device_speedup_within_sampling_error(devices):
    """Each cluster size alone (the per-device path prices a smaller cluster on a larger one's first devices)."""
    speedups = {engine: [simulate(SQUAD, ["vts-bucketed"], [devices], COST_MODEL, batch_size=8, steps=40, seed=seed,
                                  engine=engine).summary.set_index("strategy").loc["vts-bucketed", "speedup"]
                         for seed in range(4)]
                for engine in ("vectorized", "order-statistics")}
    per_device, distinct = (np.array(speedups[engine]) for engine in ("vectorized", "order-statistics"))
    error = np.sqrt(per_device.var(ddof=1) / per_device.size + distinct.var(ddof=1) / distinct.size)
    assert abs(per_device.mean() - distinct.mean()) <= 4 * error + 1e-3 * per_device.mean()


def test_every_device_is_priced_while_no_batch_is_shared_by_more_than_the_shuffles(monkeypatch):
    """With every device priced, the slowest is the largest of their makespans: more shuffles change nothing."""
    probabilities = SQUAD.counts / SQUAD.counts.sum()
    arguments = (probabilities, SQUAD.lengths, 64, 8, 4, 12, COST_MODEL, 0)
    few = bucketed_vts_aggregates(*arguments, np.random.default_rng(1))
    monkeypatch.setattr(vts_bucketed, "PERMUTATIONS_PER_BATCH", 64)
    every = bucketed_vts_aggregates(*arguments, np.random.default_rng(1))
    monkeypatch.setattr(vts_bucketed, "PERMUTATIONS_PER_BATCH", 10**6)
    beyond = bucketed_vts_aggregates(*arguments, np.random.default_rng(1))
    for name in ("slowest_device_seconds", "mean_device_seconds", "real_tokens", "sequences"):
        assert np.array_equal(getattr(every, name), getattr(beyond, name)), name
    assert np.array_equal(few.real_tokens, every.real_tokens) and np.all(few.sequences == 64 * 8)
    # Capped at 32 shuffles, the slowest of a batch's devices is drawn among them: never above every device's.
    assert np.all(few.slowest_device_seconds <= every.slowest_device_seconds * (1 + 1e-12))
    assert np.all(few.slowest_device_seconds >= few.mean_device_seconds)


def test_a_million_devices_are_priced_from_distinct_batches():
    result = simulate(SQUAD, ["vts-bucketed"], [2**20], COST_MODEL, batch_size=32, steps=8, seed=0)
    row = result.summary.set_index("strategy").loc["vts-bucketed"]
    assert 1.0 < row["speedup"] < 3.0 and row["steps"] == 8
    trace = result.traces.query("strategy == 'vts-bucketed'")
    assert np.all(trace["sequences"] == 2**20 * 32)
    assert np.all(trace["slowest_device_seconds"] >= trace["mean_device_seconds"])
    again = simulate(SQUAD, ["vts-bucketed"], [2**20], COST_MODEL, batch_size=32, steps=8, seed=0)
    assert again.summary.equals(result.summary)  # the same seed, the same figures


def test_each_cluster_size_buckets_its_own_global_batch():
    """8 devices simulated beside 512 train on their own draws bucketed, not on the first 8 devices of the
    512-device bucketing (which hold the shortest samples of every band): their tokens are the dataset's mean."""
    steps, devices, batch_size = 400, 8, 8
    result = simulate(SQUAD, ["vts-bucketed"], [devices, 512], COST_MODEL, batch_size=batch_size, steps=steps,
                      seed=0, engine="vectorized")
    tokens = result.traces.query(f"strategy == 'vts-bucketed' and devices == {devices}")["real_tokens"].to_numpy()
    lengths, counts = SQUAD.lengths, SQUAD.counts
    mean = np.average(lengths, weights=counts)
    spread = np.sqrt(np.average((lengths - mean) ** 2, weights=counts))
    per_step = devices * batch_size
    assert abs(tokens.mean() - per_step * mean) < 4 * spread * np.sqrt(per_step / steps)
