"""The two engines agree: SimPy processes and barriers against the vectorized step recurrence."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.sim.stragglers.gumbel import (PAPER_DEVICES, PAPER_LOCATION, PAPER_SCALE, expected_min_speedup,
                                       single_device_from_cluster)
from simbench.sim.engines.event import run_simpy
from simbench.costmodels.linear import LinearCostModel
from simbench.sim.engines.vectorized import aggregate_by_cluster_size, step_timeline
from simbench.sim.plans import Exchange
from simbench.sim.pricing import DeviceCosts
from simbench.sim.vts import price_vts, stage_seconds


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.sampled_from(list(Exchange)), st.floats(0.0, 0.5),
       st.integers(0, 2**32 - 1))
def test_simpy_engine_matches_the_vectorized_recurrence(devices, steps, exchange, allreduce_seconds, seed):
    rng = np.random.default_rng(seed)
    device_seconds = rng.uniform(0.5, 2.0, size=(steps, devices))
    prepare_seconds = rng.uniform(0.0, 3.0, size=steps)  # sometimes longer than a step: not always hidden
    simulated = run_simpy(device_seconds, allreduce_seconds, prepare_seconds, exchange)
    computed = step_timeline(device_seconds.max(axis=1), device_seconds.mean(axis=1), allreduce_seconds,
                             prepare_seconds, exchange)
    assert simulated.engine == "simpy" and computed.engine == "vectorized"
    for name in ("start_seconds", "end_seconds", "slowest_device_seconds", "mean_device_seconds"):
        assert np.allclose(getattr(simulated, name), getattr(computed, name)), name


def test_step_waits_for_the_slowest_device_then_all_reduces():
    timeline = run_simpy(np.array([[1.0, 2.0], [3.0, 1.0]]), allreduce_seconds=0.5)
    assert timeline.end_seconds.tolist() == [2.5, 6.0]
    assert timeline.step_seconds.tolist() == [2.5, 3.5]
    assert timeline.mean_device_seconds.tolist() == [1.5, 2.0]


def test_blocking_exchange_is_on_the_critical_path_and_overlap_hides_it():
    device_seconds = np.full((4, 2), 1.0)
    prepare_seconds = np.full(4, 0.25)
    blocking = run_simpy(device_seconds, 0.0, prepare_seconds, Exchange.BLOCKING)
    overlapped = run_simpy(device_seconds, 0.0, prepare_seconds, Exchange.OVERLAPPED)
    assert np.allclose(blocking.step_seconds, 1.25)
    assert np.allclose(overlapped.data_wait_seconds, [0.25, 0, 0, 0])  # only the first batch is exposed
    slow_host = run_simpy(device_seconds, 0.0, np.full(4, 1.5), Exchange.OVERLAPPED)
    assert np.allclose(slow_host.step_seconds[1:], 1.5)  # the host becomes the bottleneck


def test_simpy_vts_devices_match_the_recurrence_makespans():
    lengths = np.random.default_rng(4).integers(1, 512, size=(3, 2, 6))
    cost_model = LinearCostModel(vts_fixed_seconds=1e-4)
    costs = price_vts(cost_model, lengths, stages=3)
    timeline = run_simpy(costs.total_seconds, 0.0, stage_seconds=stage_seconds(cost_model, lengths, 3))
    assert np.allclose(timeline.slowest_device_seconds, costs.total_seconds.max(axis=1))
    assert np.allclose(timeline.mean_device_seconds, costs.total_seconds.mean(axis=1))


def test_cluster_aggregates_are_running_maxima_and_means_over_the_first_devices():
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(0, 1, size=(5, 8)) for _ in range(6)]
    costs = DeviceCosts(*arrays)
    aggregates = aggregate_by_cluster_size(costs, [1, 3, 8])
    for size, aggregate in aggregates.items():
        first = costs.first_devices(size)
        assert np.allclose(aggregate.slowest_device_seconds, first.total_seconds.max(axis=1))
        assert np.allclose(aggregate.mean_device_seconds, first.total_seconds.mean(axis=1))
        assert np.allclose(aggregate.compute_seconds, first.compute_seconds.mean(axis=1))
        assert np.allclose(aggregate.real_tokens, first.real_tokens.sum(axis=1))


@pytest.mark.parametrize("exchange", list(Exchange))
def test_step_times_never_shrink_when_devices_get_slower(exchange):
    """Monotonicity of the recurrence: a slower device can only delay every later step."""
    rng = np.random.default_rng(1)
    slowest = rng.uniform(1, 2, size=20)
    prepare = rng.uniform(0, 2, size=20)
    base = step_timeline(slowest, slowest, 0.1, prepare, exchange)
    slower = step_timeline(slowest + rng.uniform(0, 0.5, size=20), slowest, 0.1, prepare, exchange)
    assert np.all(slower.end_seconds >= base.end_seconds - 1e-12)


def test_gumbel_stragglers_reproduce_the_papers_cluster_speedups_in_both_engines():
    """Per-device speed-ups from the single-device Gumbel behind the paper's 8-GPU fit; a step runs at
    its slowest device, so the cluster's speed-up is the minimum of n draws (~2.12, 1.90, 1.51, 1.28)."""
    single = single_device_from_cluster(PAPER_LOCATION, PAPER_SCALE, PAPER_DEVICES)
    steps, largest = 2000, 2048
    speedups = np.random.default_rng(8).gumbel(single.location, single.scale, size=(steps, largest))
    padded_step_seconds = 1.0
    device_seconds = padded_step_seconds / speedups
    zeros = np.zeros_like(device_seconds)
    costs = DeviceCosts(device_seconds, zeros, zeros, zeros, zeros, zeros)
    for devices, aggregate in aggregate_by_cluster_size(costs, [1, 2, 32, 2048]).items():
        timeline = step_timeline(aggregate.slowest_device_seconds, aggregate.mean_device_seconds, 0.0, None,
                                 Exchange.NONE)
        step_speedups = padded_step_seconds / timeline.step_seconds
        expected = expected_min_speedup(single.location, single.scale, devices)
        assert abs(step_speedups.mean() - expected) < 4 * step_speedups.std() / np.sqrt(steps), devices
    simulated = run_simpy(device_seconds[:300, :32], 0.0)
    computed = step_timeline(device_seconds[:300, :32].max(axis=1), device_seconds[:300, :32].mean(axis=1), 0.0,
                             None, Exchange.NONE)
    assert np.allclose(simulated.end_seconds, computed.end_seconds)


def test_exchange_all_gather_uses_the_cost_models_own_hop_latency_even_when_zero():
    from simbench.costmodels import TransformerCostModel, load_hardware
    from simbench.costmodels.base import as_cost_model
    from simbench.sim.exchange import DEFAULT_ALLGATHER_LATENCY_SECONDS, ExchangeCosts

    class Silent:  # a plug-in that says nothing of its latency
        def step_costs(self, batches, mode): ...

        def allreduce_seconds(self, devices): ...

    assert ExchangeCosts.from_cost_model(LinearCostModel(allreduce_latency_seconds=2e-6)).allgather_seconds(5) == 8e-6
    assert ExchangeCosts.from_cost_model(LinearCostModel()).allgather_seconds(8) == 0.0
    ideal = TransformerCostModel("bert-large", load_hardware("a100", {"allreduce_latency_seconds": 0.0}))
    assert ExchangeCosts.from_cost_model(ideal).allgather_seconds(8) == 0.0
    assert ExchangeCosts.from_cost_model(TransformerCostModel("bert-large", "a100")).allgather_seconds(2) == 10e-6
    assert ExchangeCosts.from_cost_model(as_cost_model(Silent())).allgather_latency_seconds == \
        DEFAULT_ALLGATHER_LATENCY_SECONDS
