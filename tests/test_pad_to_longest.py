"""`pad-to-longest` (Hugging Face's default batching) and the `baseline` every speed-up is over."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simbench
from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.linear import LinearCostModel
from simbench.errors import InputError
from simbench.histogram import LengthHistogram, load_histogram
from simbench.scenario import Scenario
from simbench.sim.plans import DEFAULT_BASELINE, parse_plan
from simbench.sim.simulate import simulate
from simbench.strategies import PackOptions, get_strategy

SQUAD = load_histogram("squad_1_1_384")
LINEAR = LinearCostModel(seconds_per_token=1e-6)


class RecordingCostModel(LinearCostModel):
    """The linear model, keeping every batch set it prices."""

    def __init__(self):
        super().__init__(seconds_per_token=1e-6)
        object.__setattr__(self, "priced", [])

    def step_costs(self, batches, mode):
        self.priced.append((batches, mode))
        return super().step_costs(batches, mode)


def test_each_batch_is_padded_to_its_own_longest_sequence():
    recorder = RecordingCostModel()
    simulate(SQUAD, [], [1, 4], recorder, batch_size=8, steps=30, seed=3, baseline="pad-to-longest")
    sorted_sets = [batches for batches, mode in recorder.priced if mode is ExecutionMode.SORTED]
    assert sorted_sets
    for batches in sorted_sets:
        longest = np.zeros(batches.batches, dtype=np.int64)
        np.maximum.at(longest, batches.sequence_batch, batches.sequence_lengths)
        assert (batches.row_slots == longest[batches.row_batch]).all()
        assert np.bincount(batches.row_batch, minlength=batches.batches).tolist() == [8] * batches.batches


def _expected_longest(histogram: LengthHistogram, batch_size: int) -> float:
    """E[longest of batch_size i.i.d. draws] = sum over l of l (F(l)^B - F(l - 1)^B)."""
    cdf = np.concatenate([[0.0], np.cumsum(histogram.counts) / histogram.sequences])
    return float(histogram.lengths @ np.diff(cdf**batch_size))


def test_a_device_step_costs_the_expected_longest_sequence_of_its_draws_closed_form():
    """With seconds = a x token slots, a device's step costs a x batch_size x its batch's longest sequence."""
    batch_size, steps = 8, 3000
    result = simulate(SQUAD, [], [1], LINEAR, batch_size=batch_size, steps=steps, seed=0, baseline="pad-to-longest")
    trace = result.traces[result.traces["strategy"] == "pad-to-longest"]
    expected = LINEAR.seconds_per_token * batch_size * _expected_longest(SQUAD, batch_size)
    assert trace["slowest_device_seconds"].mean() == pytest.approx(expected, rel=0.01)


@settings(max_examples=30, deadline=None)
@given(counts=st.lists(st.integers(0, 30), min_size=2, max_size=40).filter(lambda counts: sum(counts) > 0),
       batch_size=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_padding_is_between_sorts_and_none(counts, batch_size, seed):
    """Over whole batches, a shuffled epoch's padding never exceeds padding to max length, nor falls below
    sorted batching's (the k-th longest batch of any order holds a sequence at least as long as the
    sorted order's k-th batch's longest)."""
    counts = np.array(counts)
    counts[int(np.argmax(counts))] += -counts.sum() % batch_size  # whole batches only
    histogram = LengthHistogram(counts, name="random")
    options = PackOptions(seed=seed, batch_size=batch_size)
    padding = {name: get_strategy(name)(histogram, histogram.max_length, None, options).padding_tokens
               for name in ("none", "sort", "pad-to-longest")}
    assert padding["sort"] <= padding["pad-to-longest"] <= padding["none"]


def test_simulated_padding_lies_between_sorts_and_none_in_expectation():
    summary = simulate(SQUAD, ["sort", "pad-to-longest"], [1, 8], LINEAR, batch_size=16, steps=400, seed=1,
                       baseline="none").summary
    padding = summary.set_index(["strategy", "devices"])["padding_seconds"]
    real = summary.set_index(["strategy", "devices"])["compute_seconds"]
    share = padding / (padding + real)
    for devices in (1, 8):
        assert share["sort", devices] < share["pad-to-longest", devices] < share["none", devices]


def test_the_same_seed_gives_the_same_batches_and_another_seed_others():
    arguments = dict(batch_size=4, steps=10, baseline="pad-to-longest")
    first = simulate(SQUAD, [], [1, 3], LINEAR, seed=5, **arguments).traces
    again = simulate(SQUAD, [], [1, 3], LINEAR, seed=5, **arguments).traces
    other = simulate(SQUAD, [], [1, 3], LINEAR, seed=6, **arguments).traces
    pd.testing.assert_frame_equal(first, again)
    ours = first["strategy"] == "pad-to-longest"
    assert not first[ours]["real_tokens"].equals(other[other["strategy"] == "pad-to-longest"]["real_tokens"])


def test_it_draws_the_sequences_unpad_draws_so_the_two_compare_paired():
    traces = simulate(SQUAD, ["unpad"], [1, 2], LINEAR, batch_size=4, steps=10, seed=2).traces
    tokens = traces.pivot_table(index=["devices", "step"], columns="strategy", values="real_tokens")
    assert (tokens["pad-to-longest"] == tokens["unpad"]).all()


def test_large_clusters_draw_the_slowest_device_directly_and_only_grow_slower():
    summary = simulate(SQUAD, [], [1, 64, 4096], LINEAR, batch_size=4, steps=50, seed=0).summary
    rows = summary[summary["strategy"] == "pad-to-longest"].set_index("devices")
    assert rows.loc[4096, "engine"] == "order-statistics"
    assert rows.loc[1, "step_seconds_mean"] <= rows.loc[64, "step_seconds_mean"] <= rows.loc[4096, "step_seconds_mean"]


def test_speedups_are_over_the_baseline_at_the_same_device_count():
    for baseline in ("none", "pad-to-longest", "sort"):
        summary = simulate(SQUAD, ["unpad", "sort"], [1, 4], LINEAR, batch_size=4, steps=10, seed=0,
                           baseline=baseline).summary
        assert {"none", "unpad", "sort", baseline} == set(summary["strategy"])
        assert (summary["reference"] == baseline).all()
        rate = summary.set_index(["strategy", "devices"])["tokens_per_s"]
        for row in summary.itertuples():
            assert row.speedup == pytest.approx(rate[row.strategy, row.devices] / rate[baseline, row.devices])
        assert (summary.loc[summary["strategy"] == baseline, "speedup"] == 1.0).all()


def test_the_default_baseline_is_the_schemas_and_every_entry_point_takes_it():
    assert Scenario.model_fields["baseline"].default == DEFAULT_BASELINE == "pad-to-longest"
    scenario = Scenario(name="demo", dataset={"histogram": "squad_1_1_384"}, strategies=["unpad"], devices=[1],
                        steps=3)
    assert scenario.baseline.plan() == parse_plan(DEFAULT_BASELINE)
    api = simbench.simulate("squad_1_1_384", ["unpad"], [1], steps=3).summary
    assert set(api["reference"]) == {DEFAULT_BASELINE}
    tables = simbench.run_scenario(scenario, baseline="none")
    assert set(tables.scaling["reference"]) == {"none"}
    assert "pad-to-longest" not in set(tables.scaling["strategy"])


def test_a_labelled_baseline_names_the_reference_column_by_its_label():
    scenario = Scenario(name="demo", dataset={"histogram": "squad_1_1_384"}, strategies=["unpad"], devices=[1, 2],
                        steps=3, baseline={"name": "pad-to-longest", "label": "hf-default"})
    scaling = simbench.run_scenario(scenario).scaling
    assert set(scaling["reference"]) == {"hf-default"}
    assert (scaling.loc[scaling["strategy"] == "hf-default", "speedup"] == 1.0).all()
    # The ideal speed-up stays over padding to max length whatever the baseline.
    assert scaling["ideal_speedup"].notna().all()


@pytest.mark.parametrize("baseline, fragment", [
    ("no-such-plan", "unknown strategy"),
    ({"name": "sort", "label": "unpad"}, "belongs to another strategy"),
    ({"name": "sort", "label": "none"}, "belongs to another strategy"),
])
def test_a_bad_baseline_is_an_input_error(baseline, fragment):
    from pydantic import ValidationError

    with pytest.raises((InputError, ValidationError), match=fragment):
        Scenario(name="demo", dataset={"histogram": "squad_1_1_384"}, strategies=["unpad"], baseline=baseline)


def test_a_baseline_in_a_4d_layout_runs_as_the_other_padded_plans_do():
    scenario = Scenario(name="demo", dataset={"histogram": {"synthetic": "lognormal", "sequences": 2000,
                                                            "median_length": 300, "sigma": 0.8},
                                              "max_length": 2048},
                        model="llama-3.1-8b", hardware="h100-sxm", parallel={"tp": 2, "pp": 2, "microbatches": 2},
                        strategies=["ffd", "group-by-length"], devices=[4, 8], batch_size=1, steps=4,
                        outputs={"lp_bounds": False})
    tables = simbench.run_scenario(scenario)
    rows = tables.scaling.set_index(["strategy", "devices"])
    assert (rows.loc["pad-to-longest", "speedup"] == 1.0).all()
    assert set(tables.scaling["reference"]) == {"pad-to-longest"}
    assert "pad-to-longest" in set(tables.parallel["strategy"])


def test_a_sweep_sweeps_the_baseline_like_any_key(tmp_path):
    from simbench import sweep as sweeps

    path = tmp_path / "baselines.yaml"
    path.write_text("name: baselines\nbase:\n  dataset: {histogram: squad_1_1_384}\n  strategies: [unpad]\n"
                    "  devices: [1, 2]\n  steps: 3\n  batch_size: 4\n  outputs: {plots: [], lp_bounds: false}\n"
                    "axes:\n  baseline: [none, pad-to-longest, sort]\n")
    sweep = sweeps.load_sweep(path)
    assert [cell.scenario.baseline.plan().name for cell in sweep.cells] == ["none", "pad-to-longest", "sort"]
    sweeps.run_sweep(sweep, tmp_path / "out", workers=0)
    results = sweeps.read_results(tmp_path / "out")
    for baseline, rows in results.groupby("baseline"):
        assert set(rows["reference"]) == {baseline}
        assert (rows.loc[rows["strategy"] == baseline, "speedup"] == 1.0).all()
