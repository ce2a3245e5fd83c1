"""The order-statistics engine against exact order statistics, the per-device engine and the Gumbel closed form."""

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from simbench.costmodels.gumbel import PAPER_DEVICES, PAPER_LOCATION, PAPER_SCALE, expected_min_speedup, \
    single_device_from_cluster
from simbench.costmodels.linear import LinearCostModel
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError
from simbench.histogram import load_histogram
from simbench.sim.orderstat import PLAIN_DRAWS, ItemSource, build_pool, slowest_of
from simbench.sim.pricing import DeviceCosts
from simbench.sim.simulate import simulate

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


@pytest.mark.parametrize("plan", ["unpad", "packed-varlen", "vts", "spfhp:2"])
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
    """The linear cost model with a hardware profile's per-device step noise (costmodels.noise)."""

    hardware: object = field(default_factory=lambda: SimpleNamespace(unpadded_noise_cv=0.2))


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
