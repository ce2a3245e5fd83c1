"""The order-statistics engine against exact order statistics, the per-device engine and the Gumbel closed form."""

import functools
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats

from simbench.sim.stragglers.gumbel import PAPER_DEVICES, PAPER_LOCATION, PAPER_SCALE, expected_min_speedup, \
    single_device_from_cluster
from simbench.costmodels.hardware import load_hardware
from simbench.costmodels.linear import LinearCostModel
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError
from simbench.histogram import load_histogram
from simbench.scenario import SyntheticHistogram
from simbench.sim.batching import PackSampler
from simbench.sim.engines.order_statistics import BELOW_TOP_MASS, PLAIN_DRAWS, SCORE_LEVELS, SCORE_TOLERANCE, ItemSource, _Scores, \
    build_pool, slowest_of
from simbench.sim.pricing import DeviceCosts
from simbench.sim.simulate import simulate

# Measured against padding to max length, as the figures and closed forms here are.
simulate = functools.partial(simulate, baseline="none")

SQUAD = load_histogram("squad_1_1_384")
SECONDS_PER_TOKEN = 1e-6


def _max_of_n_moments(pmf: np.ndarray, devices: int) -> tuple[float, float]:
    """Mean and standard deviation of the largest of `devices` i.i.d. draws of a pmf on 0, 1, 2, ..."""
    survival = 1 - np.minimum(np.cumsum(pmf), 1) ** devices
    mean = survival.sum()
    second_moment = ((2 * np.arange(pmf.size) + 1) * survival).sum()
    return mean, np.sqrt(max(second_moment - mean**2, 0.0))


def test_slowest_of_up_to_2_20_devices_is_the_exact_order_statistic():
    """Un-padded device time = a x (sum of B lengths): the largest of n follows from the B-fold convolution,
    exactly, at any n; the tail that n = 2**20 reaches (levels near 1e-8) comes from the tilted draws."""
    batch_size, steps = 4, 2000
    pmf = np.array([1.0])
    for _ in range(batch_size):
        pmf = np.convolve(pmf, np.concatenate([[0.0], SQUAD.counts / SQUAD.sequences]))
    devices = [1, 64, 4096, 2**20]
    result = simulate(SQUAD, ["unpad"], devices, LinearCostModel(seconds_per_token=SECONDS_PER_TOKEN),
                      batch_size=batch_size, steps=steps, seed=4, engine="order-statistics")
    trace = result.traces[result.traces["strategy"] == "unpad"]
    mean_length = (SQUAD.lengths @ SQUAD.counts) / SQUAD.sequences
    batch_spread = np.sqrt(batch_size * ((SQUAD.lengths - mean_length) ** 2 @ SQUAD.counts) / SQUAD.sequences)
    for size, group in trace.groupby("devices"):
        mean, spread = _max_of_n_moments(pmf, size)
        slowest_tokens = group["slowest_device_seconds"] / SECONDS_PER_TOKEN
        assert abs(slowest_tokens.mean() - mean) < 4 * spread / np.sqrt(steps), size
        assert (slowest_tokens.std() - spread) / spread == pytest.approx(0, abs=0.1), size
        # The other devices: their tokens average the length distribution's mean, within the error of the
        # steps' draws and of the pool they are drawn from.
        per_device_tokens = group["real_tokens"].mean() / size
        error = batch_spread * np.sqrt(1 / PLAIN_DRAWS + 1 / (steps * size))
        assert abs(per_device_tokens - batch_size * mean_length) < 4 * error, size
    assert set(result.summary["engine"]) == {"order-statistics"}


@pytest.mark.parametrize("plan", ["unpad", "packed-varlen:lpfhp:max", "vts", "spfhp:2"])
def test_order_statistics_give_the_per_device_engines_speedup_within_sampling_error(plan):
    """The same plan on 1 to 4,096 devices: every device simulated, or only the slowest drawn.

    Sampling error: each engine's per-step spread over the steps, plus the pool's own error on the other
    n - 1 devices' tokens (one device's spread over the plain draws, times n - 1)."""
    devices, steps = [1, 2, 16, 256, 4096], 150
    arguments = dict(batch_size=4, steps=steps, seed=7)
    cost_model = TransformerCostModel("bert-large", "a100")
    per_device = simulate(SQUAD, [plan], devices, cost_model, engine="vectorized", **arguments)
    drawn = simulate(SQUAD, [plan], devices, cost_model, engine="order-statistics", packings=per_device.packings,
                     **arguments)
    traces = [result.traces[result.traces["strategy"] == plan] for result in (per_device, drawn)]
    summaries = [result.summary[result.summary["strategy"] == plan].set_index("devices") for result in (per_device,
                                                                                                          drawn)]
    assert set(summaries[1]["engine"]) == {"order-statistics"}
    one_device_spread = traces[0][traces[0]["devices"] == 1]["real_tokens"].std()
    pool_error = {"slowest_device_seconds": 0.0,
                  "real_tokens": (np.array(devices) - 1) * one_device_spread / np.sqrt(PLAIN_DRAWS)}
    for column, pool in pool_error.items():
        both = [trace.groupby("devices")[column] for trace in traces]
        means = [group.mean() for group in both]
        errors = np.sqrt(sum(group.var() for group in both) / steps + pool**2)
        # Fixed-shape packs take the same time on every device: nothing to tell apart but rounding.
        assert ((means[0] - means[1]).abs() <= 4 * errors + 1e-12 * means[0]).all(), (column, means)
    # The speed-up of thousands of devices averages enough batches to compare directly.
    assert np.allclose(summaries[0].loc[[256, 4096], "speedup"], summaries[1].loc[[256, 4096], "speedup"], rtol=0.005)


def test_slowest_of_gumbel_devices_is_the_gumbel_closed_form_at_large_n():
    """Per-device speed-ups Gumbel(1.941, 0.318), the single GPU behind the packing paper's 8-GPU fit (on a
    grid of 10,001 speed-ups, one per batch: F is known exactly): the mean speed-up of the slowest of n is
    the closed form (1.275 at 2048), out to 2**20 devices."""
    single = single_device_from_cluster(PAPER_LOCATION, PAPER_SCALE, PAPER_DEVICES)
    speedups = np.linspace(single.location - 6 * single.scale, single.location + 30 * single.scale, 10_001)
    weights = stats.gumbel_r.pdf(speedups, single.location, single.scale)
    step_seconds = 1.0 / speedups

    def price(items: np.ndarray) -> DeviceCosts:
        seconds = step_seconds[items].sum(axis=1)[None, :]
        zeros = np.zeros_like(seconds)
        return DeviceCosts(seconds, zeros, zeros, zeros, zeros, zeros)

    source = ItemSource(weights, step_seconds[:, None], 1, price)
    devices, steps = [1, 32, 2048, 2**16, 2**20], 4000
    pool = build_pool(source, np.random.default_rng(0), devices[-1])
    for size, aggregates in slowest_of(pool, devices, steps, np.random.default_rng(1)).items():
        step_speedups = 1.0 / aggregates.slowest_device_seconds
        expected = expected_min_speedup(single.location, single.scale, size)
        assert abs(step_speedups.mean() - expected) < 4 * step_speedups.std() / np.sqrt(steps), size


def test_a_larger_cluster_never_has_a_faster_slowest_device():
    result = simulate(SQUAD, ["unpad"], [128, 1024, 2**20], LinearCostModel(), batch_size=2, steps=50, seed=1,
                      engine="order-statistics")
    slowest = result.traces.query("strategy == 'unpad'").pivot(index="step", columns="devices",
                                                               values="slowest_device_seconds")
    assert (np.diff(slowest.to_numpy(), axis=1) >= 0).all()


def test_device_counts_up_to_2_20_run_and_beyond_are_refused():
    summary = simulate(SQUAD, ["unpad", "packed-varlen"], [2**20], LinearCostModel(), batch_size=32, steps=5,
                       seed=0).summary
    assert summary["devices"].tolist() == [2**20] * 3
    with pytest.raises(InputError, match="devices must be whole numbers in 1..1,048,576, found 1048577"):
        simulate(SQUAD, ["unpad"], [2**20 + 1], LinearCostModel(), batch_size=1, steps=1, seed=0)


@dataclass(frozen=True)
class _NoisyLinear(LinearCostModel):
    """The linear cost model with per-device step noise (costmodels.noise)."""

    unpadded_noise_cv: float = 0.2


def test_slowest_of_noisy_devices_is_the_exact_order_statistic_up_to_2_20():
    """Device time = a x (sum of B lengths) x a mean-one lognormal factor: F is a mixture of lognormals
    over the B-fold convolution, so the mean of the largest of n is an integral; the noise is tilted into
    the far tail with the batches, so 2**20 devices see noise that 36,864 plain draws would never reach."""
    batch_size, steps, cost_model = 2, 2000, _NoisyLinear(seconds_per_token=SECONDS_PER_TOKEN)
    pmf = np.array([1.0])
    for _ in range(batch_size):
        pmf = np.convolve(pmf, np.concatenate([[0.0], SQUAD.counts / SQUAD.sequences]))
    tokens = np.flatnonzero(pmf)
    sigma = np.sqrt(np.log1p(0.2**2))
    grid = np.linspace(1, 3 * tokens.max(), 4_000)  # in tokens
    cdf = stats.norm.cdf((np.log(grid[:, None] / tokens[None, :]) + sigma**2 / 2) / sigma) @ pmf[tokens]
    devices = [1, 64, 4096, 2**20]
    result = simulate(SQUAD, ["unpad"], devices, cost_model, batch_size=batch_size, steps=steps, seed=2,
                      engine="order-statistics")
    trace = result.traces[result.traces["strategy"] == "unpad"]
    for size, group in trace.groupby("devices"):
        survival = 1 - cdf**size
        mean = grid[0] + np.trapezoid(survival, grid)
        spread = np.sqrt(grid[0] ** 2 + 2 * np.trapezoid(grid * survival, grid) - mean**2)
        slowest_tokens = group["slowest_device_seconds"] / SECONDS_PER_TOKEN
        assert abs(slowest_tokens.mean() - mean) < 4 * spread / np.sqrt(steps), size


def test_noisy_devices_agree_with_every_device_simulated():
    arguments = dict(batch_size=4, steps=150, seed=5)
    cost_model = _NoisyLinear(seconds_per_token=SECONDS_PER_TOKEN)
    every = simulate(SQUAD, ["unpad"], [4096], cost_model, engine="vectorized", **arguments).traces
    drawn = simulate(SQUAD, ["unpad"], [4096], cost_model, engine="order-statistics", **arguments).traces
    slowest = [trace.loc[trace["strategy"] == "unpad", "slowest_device_seconds"] for trace in (every, drawn)]
    error = np.sqrt((slowest[0].var() + slowest[1].var()) / arguments["steps"])
    assert abs(slowest[0].mean() - slowest[1].mean()) < 4 * error


# Chat lengths at 8k context (the llama8b-sft-8k scenario's mixture): its fixed-shape packs are nearly all
# full, so thousands of distinct packs crowd the top of the score that the tail's tilts are solved on.
CHAT_8K = SyntheticHistogram(synthetic="lognormal", sequences=500_000, mixture=[
    {"share": 0.55, "median_length": 400, "sigma": 0.8}, {"share": 0.35, "median_length": 1800, "sigma": 0.7},
    {"share": 0.10, "median_length": 5000, "sigma": 0.6}])


@pytest.mark.parametrize("per_depth_fraction, plans, step_costs", [
    # Without a per-depth overhead a fixed-shape batch costs one of two times: with a pack of several
    # sequences (its masks) or without.
    (0.0, ["greedy:max", "spfhp:3", "lpfhp:3", "bfd:max", "ffd:max", "spfhp:2", "lpfhp:2"], 2),
    # With a small one, packs of at most 3 sequences cost one of three (their batch's deepest pack: 1, 2, 3).
    (0.002, ["spfhp:3", "lpfhp:3"], 3)])
def test_fixed_shape_packs_with_few_step_costs_keep_their_mean_tokens_per_device(per_depth_fraction, plans,
                                                                                  step_costs):
    """Devices draw independently, so a device's mean tokens are its packing's mean at any cluster size.

    With few step costs, a tail quantile of the score lands a hair below the highest batch's score; its
    tilt once ran to 1e40 and beyond, the importance weights lost every digit and the tokens per device
    came out 9-17 % high (or a few % low) from 128 devices on."""
    histogram = CHAT_8K.build(8192)
    hardware = load_hardware("h100-sxm", {"pack_overhead_per_depth_fraction": per_depth_fraction})
    cost_model = TransformerCostModel("llama-3.1-8b", hardware)
    devices, steps, batch_size, packings = [128, 1024, 2**20], 200, 2, None
    for seed in range(6):
        result = simulate(histogram, plans, devices, cost_model, batch_size=batch_size, steps=steps, seed=seed,
                          engine="order-statistics", packings=packings)
        packings = result.packings
        for plan in plans:
            single_device_seconds = result.latency_samples[plan]
            distinct = np.unique(np.round(single_device_seconds / single_device_seconds.max(), 9))
            assert distinct.size == step_costs, (plan, distinct)
            tokens, probability = _pack_tokens_and_probabilities(packings[plan])
            exact_mean = batch_size * (probability @ tokens)
            batch_spread = np.sqrt(batch_size * (probability @ (tokens - probability @ tokens) ** 2))
            trace = result.traces[result.traces["strategy"] == plan]
            for size, group in trace.groupby("devices"):
                per_device_tokens = group["real_tokens"].mean() / size
                # The pool's error on a device's mean (its plain draws), and the steps' own.
                error = batch_spread * np.sqrt(1 / PLAIN_DRAWS + 1 / (steps * size))
                assert abs(per_device_tokens - exact_mean) < 4 * error, (plan, seed, size,
                                                                         per_device_tokens / exact_mean)


def _pack_tokens_and_probabilities(packing) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct pack's real tokens, and the chance that a drawn row is that pack."""
    tokens = np.add.reduceat(packing.pack_lengths, packing.pack_starts[:-1]).astype(np.float64)
    tokens[packing.depths == 0] = 0.0  # reduceat reads the next pack's first length for an empty one
    return tokens, packing.repeats / packing.repeats.sum()


def test_a_tilt_is_finite_and_goes_no_deeper_than_the_top_score_needs():
    """Targets from the body of a device's score up to and beyond its highest batch's: the tilt grows
    with the target, stays finite, and stops where all but BELOW_TOP_MASS of each item's tilted mass sits
    at the top score (closely spaced scores just below it, and more items than SCORE_LEVELS, as packs have)."""
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.random(2 * SCORE_LEVELS), 1 - 1e-5 * np.arange(1, 40), [1.0]])
    weights = rng.random(values.size) + 0.1

    def price(items: np.ndarray) -> DeviceCosts:
        # Two step costs: a batch with an item above 0.9 takes 1 % longer.
        seconds = 1.0 + 0.01 * (values[items] > 0.9).any(axis=1)[None, :]
        zeros = np.zeros_like(seconds)
        return DeviceCosts(seconds, zeros, zeros, zeros, zeros, zeros)

    source = ItemSource(weights, values[:, None], 2, price)
    items = rng.integers(0, values.size, (PLAIN_DRAWS, 2))
    scores = _Scores.fit(source, items, np.zeros(PLAIN_DRAWS), price(items).total_seconds.ravel())
    highest = scores.highest
    targets = [*np.linspace(0.5, 0.99, 4) * highest, *(highest - np.array([1e-3, 1e-5, 1e-7, 1e-9, 1e-12])),
               highest, highest + 1.0]
    tilts = np.array([scores.tilt_for_mean(target) for target in targets])
    assert np.all(np.isfinite(tilts)) and np.all(tilts >= 0)
    assert np.all(np.diff(tilts) >= -1e-9 * tilts[1:]), tilts
    deepest = tilts[-1]
    assert tilts[-2] == pytest.approx(deepest)
    # Deep enough: the tilted mass below the top score level is a trace.
    probability = weights / weights.sum()
    at_top = scores.item >= scores.item.max() - SCORE_TOLERANCE
    log_tilted = np.log(probability) + deepest * (scores.item - scores.item.max())
    below_share = np.exp(log_tilted[~at_top]).sum() / np.exp(log_tilted).sum()
    assert below_share <= BELOW_TOP_MASS
    # No deeper than it takes for the nearest score below the top, were all the mass below there.
    gap = scores.item.max() - scores.item[~at_top].max()
    odds_below = probability[~at_top].sum() / probability[at_top].sum()
    assert deepest * gap <= np.log(odds_below / BELOW_TOP_MASS) * (1 + 1e-9)
    # The tilts' log-normalizers stay finite and of the order of the log-probabilities they add up.
    assert all(np.isfinite(scores.log_normalizer(theta)) for theta in tilts)
    assert abs(scores.log_normalizer(deepest)) < 10 * np.log(1 / probability.min())
