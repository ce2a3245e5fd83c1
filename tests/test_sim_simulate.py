"""`simulate` end to end: closed forms of the linear cost model, fidelity targets, result contract, errors."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError
from simbench.histogram import LengthHistogram, load_histogram
from simbench.costmodels.linear import LinearCostModel
from simbench.sim.plans import ExecutionPlan, PlanKind
from simbench.sim.results import BREAKDOWN_COLUMNS
from simbench.sim.simulate import simulate

SQUAD = load_histogram("squad_1_1_384")
SECONDS_PER_TOKEN = 1e-6
OVERHEAD_SECONDS = 2e-3
LINEAR = LinearCostModel(seconds_per_token=SECONDS_PER_TOKEN, step_overhead_seconds=OVERHEAD_SECONDS,
                         allreduce_latency_seconds=1e-5)


def _max_of_n_moments(pmf: np.ndarray, devices: int) -> tuple[float, float]:
    """Mean and standard deviation of the largest of `devices` i.i.d. draws of a pmf on 0, 1, 2, ..."""
    survival = 1 - np.cumsum(pmf) ** devices  # P(max > k)
    values = np.arange(pmf.size)
    mean = survival.sum()
    second_moment = ((2 * values + 1) * survival).sum()
    return mean, np.sqrt(max(second_moment - mean**2, 0.0))


def test_unpadded_step_is_the_expected_maximum_of_per_device_token_sums():
    """Order statistics: device time = a x (sum of B lengths) + c, i.i.d. over devices; the step's
    device part is the largest of N, whose distribution follows from the B-fold convolution."""
    batch_size, steps = 4, 1500
    pmf_length = np.concatenate([[0.0], SQUAD.counts / SQUAD.sequences])
    pmf_sum = np.array([1.0])
    for _ in range(batch_size):
        pmf_sum = np.convolve(pmf_sum, pmf_length)
    result = simulate(SQUAD, ["unpad"], [1, 8, 64], LINEAR, batch_size=batch_size, steps=steps, seed=5)
    trace = result.traces[result.traces["strategy"] == "unpad"]
    for devices, group in trace.groupby("devices"):
        mean_tokens, std_tokens = _max_of_n_moments(pmf_sum, devices)
        expected = SECONDS_PER_TOKEN * mean_tokens + OVERHEAD_SECONDS
        tolerance = 4 * SECONDS_PER_TOKEN * std_tokens / np.sqrt(steps)
        assert abs(group["slowest_device_seconds"].mean() - expected) < tolerance, devices
        allreduce = LINEAR.allreduce_seconds(devices)
        assert np.allclose(group["step_seconds"], group["slowest_device_seconds"] + allreduce)


def test_padding_step_time_is_the_closed_form():
    result = simulate(SQUAD, [], [1, 32], LINEAR, batch_size=8, steps=20, seed=0, baseline="none")
    for devices, group in result.traces.groupby("devices"):
        expected = 8 * SQUAD.max_length * SECONDS_PER_TOKEN + OVERHEAD_SECONDS + LINEAR.allreduce_seconds(devices)
        assert np.allclose(group["step_seconds"], expected)


def test_packing_speedup_does_not_depend_on_the_device_count():
    """Packs have fixed shapes: every device takes the same time, nobody waits, the speed-up is flat."""
    # 38,400 packs on one device keep the Monte Carlo noise of the token count near 0.2 %.
    result = simulate(SQUAD, ["spfhp:3"], [1, 8, 64], LinearCostModel(step_overhead_seconds=1e-3),
                      batch_size=64, steps=600, seed=0, baseline="none")
    packed = result.summary[result.summary["strategy"] == "spfhp:3"]
    assert packed["speedup"].max() / packed["speedup"].min() - 1 < 0.005
    assert (packed["waiting_seconds"] < 1e-12).all()
    packing = result.packings["spfhp:3"]
    expected = (packing.real_tokens / packing.packs_total) / (SQUAD.real_tokens / SQUAD.sequences)
    assert packed["speedup"].to_numpy() == pytest.approx(expected, rel=0.005)


def test_unpadding_loses_with_scale_and_padding_exchange_recovers_most_of_it():
    # Steps of ~30 ms: the exchange's all-gather and sort (well under 1 ms) are worth paying for.
    cost_model = LinearCostModel(seconds_per_token=1e-5, step_overhead_seconds=2e-3, allreduce_latency_seconds=1e-5)
    result = simulate(SQUAD, ["unpad", "unpad-exchange", "unpad-exchange-overlap"], [1, 2, 8, 64, 512], cost_model,
                      batch_size=16, steps=100, seed=1, baseline="none")
    speedup = result.summary.pivot(index="devices", columns="strategy", values="speedup")
    step = result.summary.pivot(index="devices", columns="strategy", values="step_seconds_mean")
    # Common random numbers: a larger cluster adds devices, so its slowest device is never faster.
    assert np.all(np.diff(step["unpad"].to_numpy()) > 0)
    assert np.all(np.diff(speedup["unpad"].to_numpy()) < 0.002)
    lost = speedup.loc[1, "unpad"] - speedup.loc[64, "unpad"]
    assert speedup.loc[64, "unpad-exchange"] - speedup.loc[64, "unpad"] > 0.5 * lost
    assert (speedup["unpad-exchange-overlap"] >= speedup["unpad-exchange"] - 1e-9).all()
    assert speedup.loc[1, "unpad-exchange"] == pytest.approx(speedup.loc[1, "unpad"])


def test_unpadding_beats_packing_on_one_device_and_loses_from_two_on():
    """Packing paper, section 4.4, with bert-large on the a100-ideal preset and Wikipedia lengths: un-padding
    gains more than packing on one device (no pack overhead) but waits for the slowest device from two on.
    Measured with seed 0: 1.927 vs 1.904 on one device, 1.800 vs 1.906 on two, 1.642 vs 1.912 on eight."""
    cost_model = TransformerCostModel("bert-large", "a100-ideal")
    result = simulate(load_histogram("wikipedia_512"), ["lpfhp:max", "unpad"], [1, 2, 8], cost_model,
                      batch_size=32, steps=1000, seed=0)
    speedup = result.summary.pivot(index="devices", columns="strategy", values="speedup")
    assert speedup.loc[1, "unpad"] > speedup.loc[1, "lpfhp:max"]
    assert (speedup.loc[[2, 8], "unpad"] < speedup.loc[[2, 8], "lpfhp:max"]).all()


def test_breakdown_adds_up_to_the_step_time_for_every_plan():
    plans = ["spfhp:2", "unpad", "unpad-exchange", "unpad-exchange-overlap", "vts", "vts-bucketed:window=2"]
    result = simulate(SQUAD, plans, [1, 4, 32], LINEAR, batch_size=8, steps=12, seed=2, baseline="none")
    summary = result.summary
    assert np.allclose(summary[list(BREAKDOWN_COLUMNS)].sum(axis=1), summary["step_seconds_mean"])
    assert (summary[list(BREAKDOWN_COLUMNS)] > -1e-12).all().all()
    assert set(summary["strategy"]) == {"none", "spfhp:2", *plans[1:]}
    assert (summary.loc[summary["strategy"].str.startswith("vts"), "reference"] == "vts-padded").all()


def test_simpy_and_vectorized_engines_give_the_same_summary():
    plans = ["spfhp:2", "unpad", "unpad-exchange", "unpad-exchange-overlap", "vts-bucketed:window=2"]
    arguments = dict(batch_size=6, steps=10, seed=3)
    simpy = simulate(SQUAD, plans, [1, 3, 5], LINEAR, engine="simpy", **arguments).summary
    vectorized = simulate(SQUAD, plans, [1, 3, 5], LINEAR, engine="vectorized", **arguments).summary
    assert (simpy["engine"] == "simpy").all() and (vectorized["engine"] == "vectorized").all()
    numeric = simpy.select_dtypes("number").columns
    assert np.allclose(simpy[numeric].to_numpy(dtype=float), vectorized[numeric].to_numpy(dtype=float),
                       equal_nan=True)


def test_auto_engine_uses_simpy_for_small_runs_and_draws_the_slowest_of_large_independent_clusters():
    summary = simulate(SQUAD, ["unpad", "unpad-exchange"], [1, 2048], LINEAR, batch_size=2, steps=5, seed=0).summary
    engines = summary.set_index(["strategy", "devices"])["engine"].to_dict()
    assert engines == {("none", 1): "simpy", ("none", 2048): "order-statistics", ("unpad", 1): "simpy",
                       ("pad-to-longest", 1): "simpy", ("pad-to-longest", 2048): "order-statistics",
                       ("unpad", 2048): "order-statistics", ("unpad-exchange", 1): "simpy",
                       ("unpad-exchange", 2048): "vectorized"}


def test_same_seed_same_results_and_other_seed_other_draws():
    arguments = dict(batch_size=4, steps=8)
    first = simulate(SQUAD, ["unpad", "spfhp:2"], [1, 4], LINEAR, seed=11, **arguments)
    again = simulate(SQUAD, ["unpad", "spfhp:2"], [1, 4], LINEAR, seed=11, **arguments)
    other = simulate(SQUAD, ["unpad", "spfhp:2"], [1, 4], LINEAR, seed=12, **arguments)
    pd.testing.assert_frame_equal(first.traces, again.traces)
    assert not first.traces["real_tokens"].equals(other.traces["real_tokens"])


def test_result_contract_for_the_report():
    calls = []
    result = simulate(SQUAD, ["spfhp:2", "vts"], [1, 2], LINEAR, batch_size=4, steps=6, seed=0, progress=calls.append)
    assert sum(calls) == 4 * 2  # (none, pad-to-longest, spfhp:2, vts) x 2 device counts
    assert {"strategy", "devices", "speedup", "tokens_per_s", "sequences_per_s", "step_seconds_mean",
            "engine", *BREAKDOWN_COLUMNS} <= set(result.summary.columns)
    assert {"step", "step_seconds", "slowest_device_seconds", "mean_device_seconds", "allreduce_seconds",
            "real_tokens", "sequences"} <= set(result.traces.columns)
    assert len(result.traces) == 4 * 2 * 6
    assert set(result.packings) == {"none", "pad-to-longest", "spfhp:2"}  # the baseline packs its random batches
    assert result.latency_samples["none"].size >= 6 and (result.latency_samples["vts"] > 0).all()
    assert set(result.vts_timeline) == {"vts"}
    packed = result.traces[result.traces["strategy"] == "spfhp:2"]
    assert (packed["sequences"] >= 4 * packed["devices"]).all()  # each pack holds at least one sequence


def test_given_packings_are_reused_not_recomputed():
    first = simulate(SQUAD, ["spfhp:2"], [1], LINEAR, batch_size=4, steps=3, seed=0)
    again = simulate(SQUAD, ["spfhp:2"], [1], LINEAR, batch_size=4, steps=3, seed=0, packings=first.packings)
    assert again.packings["spfhp:2"] is first.packings["spfhp:2"]


def test_empty_histogram_is_an_input_error():
    with pytest.raises(InputError, match="no sequences"):
        simulate(LengthHistogram(np.zeros(8, dtype=np.int64), name="empty"), ["unpad"], [1], LINEAR,
                 batch_size=2, steps=2, seed=0)


@pytest.mark.parametrize("arguments, fragment", [
    (dict(batch_size=0), "batch_size must be a whole number >= 1, found 0"),
    (dict(steps=0), "steps"),
    (dict(devices=[]), "devices must be whole numbers in 1..1,048,576, found none"),
    (dict(devices=[0, 2]), "devices must be whole numbers in 1..1,048,576, found 0"),
    (dict(engine="fast"), "engine"),
])
def test_bad_arguments_raise_input_errors(arguments, fragment):
    call = dict(devices=[1], batch_size=4, steps=3, seed=0) | arguments
    devices = call.pop("devices")
    with pytest.raises(InputError, match=fragment):
        simulate(SQUAD, ["unpad"], devices, LINEAR, **call)


def test_sorted_batches_cost_the_slowest_devices_longest_sequence_closed_form():
    """Sorted batching (the `sort` plan's execution): the sorted dataset is cut into batches, each padded
    to its longest; a step's devices take consecutive batches. With a linear cost a device's time is
    proportional to its batch's longest length, and the step waits for the device holding the longest:
    speed-up = max_length / E[longest over the step's consecutive batches]."""
    batch_size, steps = 16, 400
    sorted_padding = ExecutionPlan("sorted", PlanKind.PACKING, ExecutionMode.SORTED, packer="none", max_depth=1)
    result = simulate(SQUAD, [sorted_padding], [1, 8], LinearCostModel(seconds_per_token=1e-6),
                      batch_size=batch_size, steps=steps, seed=4, baseline="none")
    descending = SQUAD.expand()[::-1]
    whole_batches = descending.size // batch_size
    longest = descending[:whole_batches * batch_size].reshape(whole_batches, batch_size).max(axis=1)
    speedup = result.summary.set_index(["strategy", "devices"])["speedup"]
    for devices in (1, 8):
        windows = (np.arange(whole_batches)[:, None] + np.arange(devices)) % whole_batches
        expected_longest = longest[windows].max(axis=1).mean()
        # Real tokens per step are estimated from the draws too: allow 2 % for both sampling errors.
        assert speedup["sorted", devices] == pytest.approx(SQUAD.max_length / expected_longest, rel=0.02), devices


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(["spfhp:2", "unpad", "unpad-exchange", "unpad-exchange-overlap", "vts",
                                 "vts-bucketed:window=2", "packed-varlen:spfhp"]), min_size=1, max_size=3),
       st.lists(st.integers(1, 9), min_size=1, max_size=3), st.integers(1, 5), st.integers(1, 6),
       st.integers(0, 2**16))
def test_invariants_hold_for_any_small_run(plans, devices, batch_size, steps, seed):
    arguments = dict(batch_size=batch_size, steps=steps, seed=seed)
    result = simulate(SQUAD, plans, devices, LINEAR, engine="simpy", **arguments)
    summary, traces = result.summary, result.traces
    assert np.allclose(summary[list(BREAKDOWN_COLUMNS)].sum(axis=1), summary["step_seconds_mean"])
    assert (summary["speedup"] > 0).all() and (summary["tokens_per_s"] > 0).all()
    assert len(traces) == len(summary) * steps
    # Each device trains on batch_size rows per step, and a row holds at least one sequence.
    assert (traces["sequences"] >= batch_size * traces["devices"]).all()
    assert (traces["step_seconds"] >= traces["slowest_device_seconds"] - 1e-12).all()
    assert (traces["slowest_device_seconds"] >= traces["mean_device_seconds"] - 1e-12).all()
    vectorized = simulate(SQUAD, plans, devices, LINEAR, engine="vectorized", **arguments).summary
    assert np.allclose(summary["step_seconds_mean"], vectorized["step_seconds_mean"])
