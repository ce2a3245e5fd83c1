"""group-by-length on large clusters priced per megabatch, held to closed forms and to the per-device path."""

import functools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from simbench.costmodels.transformer import TransformerCostModel
from simbench.histogram import LengthHistogram, load_histogram
from simbench.sim import megabatches
from simbench.sim.megabatches import stratified_tops, top_order_statistics
from simbench.sim.engines.vectorized import aggregate_by_cluster_size
from simbench.sim.plans import SimulationSettings, parse_plan
from simbench.sim.simulate import simulate

# Measured against padding to max length, as the figures and closed forms here are.
simulate = functools.partial(simulate, baseline="none")

COST_MODEL = TransformerCostModel("bert-large", "a100")
SQUAD = load_histogram("squad_1_1_384")
AGGREGATE_FIELDS = ("slowest_device_seconds", "mean_device_seconds", "compute_seconds", "padding_seconds",
                    "overhead_seconds", "real_tokens", "sequences")


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=2, max_size=8).filter(lambda counts: sum(counts) > 0),
       st.integers(1, 60), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_top_order_statistics_follow_the_binomial_closed_form(counts, draws, count, seed):
    """The k-th largest of m draws is at most l exactly when fewer than k of the m exceed l: a binomial
    tail in the share above l. The stratified, weighted draws estimate that probability for every k and l."""
    count = min(count, draws)
    histogram = LengthHistogram.from_counts(counts)
    rng = np.random.default_rng(seed)
    above_top, log_weights = stratified_tops(1e-4, 4000, rng)
    tops = top_order_statistics(histogram, draws, count, above_top, rng)
    weights = np.exp(log_weights)
    assert np.isclose(weights.sum(), 1.0)
    assert np.all(np.diff(tops, axis=1) <= 0) and np.all(histogram.counts[tops - 1] > 0)
    share_above = 1 - np.cumsum(histogram.counts) / histogram.sequences
    for k in range(count):
        for index, length in enumerate(histogram.lengths):
            expected = stats.binom.cdf(k, draws, share_above[index])
            estimated = weights @ (tops[:, k] <= length)
            assert abs(estimated - expected) <= 0.03, (k, length)


def test_the_stratified_tail_resolves_shares_a_million_devices_reach():
    """The chance that none of m x q draws reaches the longest length, for q whole megabatches of a
    2^20-device step: the pool's weights give it to a few per cent where plain draws would see nothing."""
    counts = np.zeros(1000, dtype=np.int64)
    counts[:999], counts[999] = 10**7, 3
    histogram = LengthHistogram.from_counts(counts)
    rng = np.random.default_rng(0)
    above_top, log_weights = stratified_tops(1e-7, 2048, rng)
    draws = 500
    tops = top_order_statistics(histogram, draws, 1, above_top, rng)[:, 0]
    share = 3 / histogram.sequences
    estimated = np.exp(log_weights) @ (tops == 1000)
    assert estimated == pytest.approx(-np.expm1(draws * np.log1p(-share)), rel=0.05)


def _source(devices_seed=0, steps=12):
    plan = parse_plan("group-by-length")
    settings = SimulationSettings(SQUAD, COST_MODEL, 8, steps, devices_seed, "auto")
    return plan.source(plan, None, settings, purpose=4)


@pytest.mark.parametrize("devices", [1, 7, 32])
def test_below_a_megabatch_of_devices_every_batch_is_the_per_device_paths(devices):
    """Fewer devices than batches per megabatch: no step holds a whole megabatch, every megabatch is drawn
    whole, from the same stream, so the per-megabatch path gives the per-device path's steps exactly."""
    per_device = aggregate_by_cluster_size(_source().chunk(12, [devices])[devices], [devices])[devices]
    per_megabatch = _source().distinct_batches([devices])[devices]
    for name in AGGREGATE_FIELDS:
        assert np.allclose(getattr(per_megabatch, name), getattr(per_device, name), rtol=1e-12), name


@pytest.mark.parametrize("shared", ["drawn", "from the pool"])
@pytest.mark.parametrize("devices", [128, 700])
def test_megabatches_give_the_per_device_throughput_within_sampling_error(devices, shared, monkeypatch):
    """Five seeds of each path: tokens per second and mean step within 4 standard errors (plus 0.1 %),
    with the megabatches that steps share drawn afresh or (long batches, many steps) taken from the pool."""
    if shared == "from the pool":
        monkeypatch.setattr(megabatches, "SHARED_SEQUENCES_MAX", 0)
    figures = {engine: np.array([simulate(SQUAD, ["group-by-length"], [devices], COST_MODEL, batch_size=8,
                                          steps=40, seed=seed, engine=engine).summary
                                 .set_index("strategy").loc["group-by-length", ["tokens_per_s", "step_seconds_mean"]]
                                 .to_numpy(dtype=float) for seed in range(5)])
               for engine in ("vectorized", "order-statistics")}
    per_device, per_megabatch = figures["vectorized"], figures["order-statistics"]
    error = np.sqrt(per_device.var(axis=0, ddof=1) / 5 + per_megabatch.var(axis=0, ddof=1) / 5)
    assert np.all(np.abs(per_device.mean(axis=0) - per_megabatch.mean(axis=0))
                  <= 4 * error + 1e-3 * per_device.mean(axis=0))


def test_a_cluster_size_alone_draws_what_it_draws_among_others():
    alone = simulate(SQUAD, ["group-by-length"], [300], COST_MODEL, batch_size=8, steps=10, seed=3).traces
    among = simulate(SQUAD, ["group-by-length"], [100, 300, 2**20], COST_MODEL, batch_size=8, steps=10, seed=3).traces
    pick = "strategy == 'group-by-length' and devices == 300"
    assert alone.query(pick).reset_index(drop=True).equals(among.query(pick).reset_index(drop=True))


def test_a_million_devices_hold_every_sequence_of_their_batches():
    source = _source(steps=20)
    aggregates = source.distinct_batches([2**20])[2**20]
    assert np.all(aggregates.sequences == 2**20 * source.batch_sequences)
    assert np.all(aggregates.slowest_device_seconds >= aggregates.mean_device_seconds)
    # Mean tokens per sequence within 1 % of the dataset's: the sums are the megabatches' and exact in mean.
    mean_length = SQUAD.real_tokens / SQUAD.sequences
    assert aggregates.real_tokens.sum() / aggregates.sequences.sum() == pytest.approx(mean_length, rel=0.01)


def test_the_work_estimate_counts_the_sequences_of_a_length_grouped_batch():
    """A device draws as many sequences as fill batch_size x max_length slots at the mean length, not
    batch_size rows: the up-front estimate counts them (padding, the reference, draws batch_size rows)."""
    from simbench.errors import InputError
    from simbench.strategies.group_by_length import sequences_per_batch

    steps, devices = 5, 64
    rows = steps * devices * (sequences_per_batch(SQUAD, 8, SQUAD.max_length) + 8)
    with pytest.raises(InputError, match=re.escape(f"about {rows:.2g} sequences or packs")):
        simulate(SQUAD, ["group-by-length"], [devices], COST_MODEL, batch_size=8, steps=steps, seed=0,
                 max_rows=rows - 1)
    simulate(SQUAD, ["group-by-length"], [devices], COST_MODEL, batch_size=8, steps=steps, seed=0, max_rows=rows)
