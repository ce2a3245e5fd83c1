"""`simbench measure`: batches per strategy drawn from a histogram, the measured-versus-predicted
arithmetic, and a quick end-to-end run on the CPU."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from simbench.calibrate.fit import predict_seconds, profile_from_parameters
from simbench.calibrate.layout import BatchLayout
from simbench.cli import app
from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.model import get_model
from simbench.errors import InputError
from simbench.histogram import LengthHistogram, load_histogram

pytest.importorskip("torch")
from simbench.calibrate import measure, measure_compare, measure_timing  # noqa: E402

PROFILE = profile_from_parameters(
    {"name": "test", "source": "synthetic", "unpad_group_boundaries": tuple(range(1, 513))},
    {"seconds_per_linear_gflop": 0.02, "seconds_per_attention_gflop": 0.05, "kernel_launch_seconds": 2e-4,
     "step_overhead_seconds": 0.01, "pack_overhead_fraction": 0.04, "pack_overhead_per_depth_fraction": 0.003,
     "unpad_group_half_saturation_tokens": 0.0})


def _settings(**changes):
    values = {"model": get_model("tiny"), "max_length": 128, "device": "cpu", "threads": 1, "steps": 4,
              "batch_size": 8}
    return measure.MeasureSettings(**{**values, **changes})


def test_rescaling_keeps_every_sequence_and_scales_lengths_proportionally():
    histogram = LengthHistogram.from_lengths([1, 4, 5, 256, 512, 512], max_length=512)
    scaled = measure.rescale_histogram(histogram, 128)
    assert scaled.max_length == 128 and scaled.sequences == histogram.sequences
    assert scaled.expand().tolist() == [1, 1, 2, 64, 128, 128]
    assert measure.rescale_histogram(scaled, 128) is scaled


def test_timings_that_would_run_for_hours_are_refused_before_any_work():
    assert _settings(steps=16, repeats=3).steps == 16
    for changes in ({"steps": 10**8}, {"repeats": 10**8}, {"batch_size": 10**8}, {"steps": 5000}):
        with pytest.raises(InputError, match="training FLOPs, more than the 1e\\+14") as error:
            _settings(**changes)
        assert error.value.parameter == "steps"
    # A GPU is allowed a thousand times the work.
    assert _settings(steps=5000, device="cuda").steps == 5000


def test_every_strategy_gets_steps_batches_of_batch_size_rows_from_the_histogram():
    histogram = measure.rescale_histogram(load_histogram("wikipedia_512"), 128)
    settings = _settings()
    layouts = measure.strategy_layouts(histogram, settings, np.random.default_rng(0))
    assert list(layouts) == list(measure.STRATEGIES)
    for name, batches in layouts.items():
        assert len(batches) == settings.steps
        assert all(len(layout.rows) == settings.batch_size for layout in batches), name
    assert all(set(layout.row_slots) == {128} and layout.max_depth == 1 for layout in layouts["padding"])
    assert all(set(layout.row_slots) == {int(layout.lengths.max())} for layout in layouts["sort"])
    assert all(layout.mode is ExecutionMode.SORTED for layout in layouts["sort"])
    assert all(layout.row_slots == tuple(layout.lengths) for layout in layouts["unpadding"])
    packed = layouts["lpfhp"]
    assert max(layout.max_depth for layout in packed) > 1
    # Packing fills rows: far fewer padding slots than padding to max length.
    packed_efficiency = sum(layout.real_tokens for layout in packed) / sum(layout.slots for layout in packed)
    padded_efficiency = sum(layout.real_tokens for layout in layouts["padding"]) / (4 * 8 * 128)
    assert packed_efficiency > 0.9 > padded_efficiency


def test_packed_batches_come_from_the_flat_packs_without_a_dense_table(monkeypatch):
    """Deep packs at long context may not fit in one table (refused above a limit; 0 here, so any use fails)."""
    from simbench.strategies import packing

    monkeypatch.setattr(packing, "DENSE_ROWS_LIMIT_BYTES", 0)
    histogram = measure.rescale_histogram(load_histogram("wikipedia_512"), 128)
    layouts = measure.strategy_layouts(histogram, _settings(), np.random.default_rng(0))["lpfhp"]
    rows = [row for layout in layouts for row in layout.rows]
    assert all(list(row) == sorted(row, reverse=True) and 0 < sum(row) <= 128 and min(row) > 0 for row in rows)
    assert max(len(row) for row in rows) > 1


def test_compare_reports_zero_error_when_the_cost_model_is_exact_and_scales_with_measured_time():
    histogram = measure.rescale_histogram(load_histogram("wikipedia_512"), 128)
    model = get_model("tiny")
    layouts = measure.strategy_layouts(histogram, _settings(), np.random.default_rng(0))
    exact = {name: predict_seconds(model, PROFILE, batches) for name, batches in layouts.items()}
    table = measure_compare.compare(measure_timing.MeasuredSteps(layouts, exact, {name: np.zeros(4) for name in layouts}),
                            model, PROFILE).set_index("strategy")
    np.testing.assert_allclose(table["error"], 0.0, atol=1e-12)
    np.testing.assert_allclose(table["measured_speedup"], table["predicted_speedup"])
    assert table.loc["lpfhp", "predicted_speedup"] > 1.3  # ~50 % padding in Wikipedia
    terms = table[["predicted_compute_seconds", "predicted_padding_seconds", "predicted_overhead_seconds"]]
    np.testing.assert_allclose(terms.sum(axis=1), table["predicted_step_seconds"])

    twice_as_slow = {**exact, "lpfhp": exact["lpfhp"] * 2}
    slower = measure_compare.compare(measure_timing.MeasuredSteps(layouts, twice_as_slow, {name: np.zeros(4) for name in layouts}),
                             model, PROFILE).set_index("strategy")
    assert slower.loc["lpfhp", "measured_speedup"] == pytest.approx(table.loc["lpfhp", "measured_speedup"] / 2)
    assert slower.loc["lpfhp", "error"] == pytest.approx(1.0)


def test_per_step_speedups_are_each_steps_throughput_over_paddings_overall():
    layouts = {"padding": [BatchLayout.padded(np.array([4, 4]), 8), BatchLayout.padded(np.array([8, 8]), 8)],
               "unpadding": [BatchLayout.unpadded([4, 4]), BatchLayout.unpadded([8, 8])]}
    seconds = {"padding": np.array([1.0, 1.0]), "unpadding": np.array([0.25, 1.0])}
    steps = measure_compare.per_step_speedups(measure_timing.MeasuredSteps(layouts, seconds, {name: np.zeros(2) for name in layouts}))
    # Padding runs 24 real tokens in 2 s: 12 tokens/s. Un-padding's steps run 8 / 0.25 and 16 / 1.
    np.testing.assert_allclose(steps["padding"], [8 / 12, 16 / 12])
    np.testing.assert_allclose(steps["unpadding"], [32 / 12, 16 / 12])


def test_compare_needs_the_padding_baseline():
    layout = BatchLayout.unpadded([3, 5])
    with pytest.raises(InputError, match="baseline"):
        measure_compare.compare(measure_timing.MeasuredSteps({"unpadding": [layout]}, {"unpadding": np.array([0.1])},
                                              {"unpadding": np.zeros(1)}), get_model("tiny"), PROFILE)


def test_a_strategy_the_profile_cannot_price_says_why_and_the_others_are_still_compared():
    histogram = measure.rescale_histogram(load_histogram("wikipedia_512"), 128)
    model = get_model("tiny")
    layouts = measure.strategy_layouts(histogram, _settings(), np.random.default_rng(0))
    seconds = {name: predict_seconds(model, PROFILE, batches) for name, batches in layouts.items()}
    steep = PROFILE.model_copy(update={"pack_overhead_per_depth_fraction": 0.5})  # share >= 1 at depth 2
    table = measure_compare.compare(measure_timing.MeasuredSteps(layouts, seconds, {name: np.zeros(4) for name in layouts}),
                            model, steep).set_index("strategy")
    assert "packing overhead reaches the whole step" in table.loc["lpfhp", "problem"]
    assert np.isnan(table.loc["lpfhp", "error"]) and table.loc["lpfhp", "measured_speedup"] > 1
    assert (table.drop(index="lpfhp")["problem"] == "").all()
    np.testing.assert_allclose(table.drop(index="lpfhp")["error"], 0.0, atol=1e-12)


def test_timing_noise_is_the_spread_of_round_by_round_speedups_and_judges_the_run():
    layouts = {"padding": [BatchLayout.padded(np.array([4, 4]), 8)], "unpadding": [BatchLayout.unpadded([4, 4])]}
    rounds = {"padding": np.array([[1.0, 1.0, 1.0]]), "unpadding": np.array([[0.4, 0.5, 0.6]])}
    measured = measure_timing.MeasuredSteps(layouts, {name: np.median(value, axis=1) for name, value in rounds.items()},
                                     {name: np.zeros(1) for name in layouts}, rounds)
    per_round = 1 / np.array([0.4, 0.5, 0.6])
    assert measure_compare.speedup_noise(measured, "unpadding") == pytest.approx(per_round.std(ddof=1) / per_round.mean())
    assert measure_compare.speedup_noise(measured, "padding") == 0.0
    table = measure_compare.compare(measured, get_model("tiny"), PROFILE)
    verdict = measure_compare.judge(table, error_target=0.10)
    assert not verdict.valid and "unpadding 20.4%" in verdict.message and "--repeats" in verdict.message
    assert measure_compare.judge(table, error_target=0.25).valid


def test_the_deepest_calibrated_pack_comes_from_the_profiles_record():
    record = {"timings": [{"kind": "packed", "rows": [[3, 4, 5], [9]]}, {"kind": "padded", "rows": [[1]] * 9}]}
    assert measure_compare.deepest_calibrated_pack(PROFILE.model_copy(update={"calibration": record})) == 3
    assert measure_compare.deepest_calibrated_pack(PROFILE) is None


def test_quick_measure_times_every_strategy_and_packing_beats_padding(tmp_path):
    output = tmp_path / "measured"
    result = CliRunner().invoke(app, [
        "measure", "wikipedia_512", "--quick", "--device", "cpu", "--threads", "1", "--max-length", "64",
        "--steps", "3", "--batch-size", "8", "--repeats", "3", "--json", "-o", str(output)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    by_strategy = {record["strategy"]: record for record in records}
    assert set(by_strategy) == set(measure.STRATEGIES)
    for record in records:
        assert {"measured_speedup", "predicted_speedup", "error", "speedup_noise", "run_valid"} <= set(record)
        assert record["error"] == pytest.approx(record["predicted_speedup"] / record["measured_speedup"] - 1)
    assert by_strategy["padding"]["measured_speedup"] == 1.0
    # Half the padded slots are padding: packing must run more real tokens per second.
    assert by_strategy["lpfhp"]["measured_speedup"] > 1.0
    table = pd.read_csv(output / "measured_vs_predicted.csv")
    assert len(table) == 4
    assert (output / "measured_vs_predicted.png").stat().st_size > 0
    assert (output / "profile.yaml").exists()  # calibrated first, since no --profile was given
    from simbench.costmodels.hardware import load_hardware

    # The un-padded steps' noise goes where simulate and run read it, saying what it was fitted on.
    profile = load_hardware(output / "profile.yaml")
    record = profile.calibration["unpadded_noise"]
    assert profile.unpadded_noise_cv == record["unpadded_noise_cv"] >= 0 and record["steps"] == 3
    assert "un-padded step noise" in result.stderr
    timings = json.loads((output / "timings.json").read_text())
    assert all(len(batches) == 3 for batches in timings.values())
    steps = pd.read_csv(output / "steps.csv")
    assert list(steps.columns) == ["step", *measure.STRATEGIES] and len(steps) == 3
    assert (steps[list(measure.STRATEGIES)] > 0).all().all()


def test_measure_refuses_to_replace_a_folder_that_is_no_measurement(tmp_path):
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    result = CliRunner().invoke(app, ["measure", "wikipedia_512", "--device", "cpu", "-o", str(precious)])
    assert isinstance(result.exception, InputError), result.output
    assert "holds no .simbench-folder.json" in str(result.exception) and "choose another -o" in str(
        result.exception)
    assert sorted(path.name for path in precious.iterdir()) == ["notes.txt"]


def test_measure_plot_draws_error_bars_where_rounds_measured_a_spread(tmp_path, monkeypatch):
    import warnings

    import pandas as pd
    from matplotlib.axes import Axes

    from simbench.calibrate.plot import plot_measured_vs_predicted

    drawn = []
    original = Axes.bar
    monkeypatch.setattr(Axes, "bar", lambda self, *args, **kwargs: drawn.append(kwargs.get("yerr"))
                        or original(self, *args, **kwargs))
    table = pd.DataFrame({"strategy": ["none", "spfhp", "sort"], "measured_speedup": [1.0, 1.8, 1.6],
                          "predicted_speedup": [1.0, 1.85, 1.55], "error": [0.0, 0.03, -0.03],
                          "speedup_noise": [0.0, 0.05, float("nan")], "measured_step_seconds": [0.1, 0.11, 0.09],
                          "predicted_compute_seconds": [0.05, 0.09, 0.08], "predicted_padding_seconds": [0.04, 0.0, 0.0],
                          "predicted_overhead_seconds": [0.01, 0.01, 0.01]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_measured_vs_predicted(table, tmp_path / "plot.png", "synthetic")
    assert (tmp_path / "plot.png").stat().st_size > 0
    errors = next(yerr for yerr in drawn if yerr is not None).tolist()
    assert errors[:2] == [0.0, pytest.approx(0.09)] and errors[2] != errors[2]  # NaN: no bar, not a zero one


def test_packed_varlen_attends_within_each_sequence_as_unpadding_does():
    """Packs with per-sequence attention: each real token's hidden state is the one it has un-padded (the dense
    layers act per token, attention sees its own sequence only), whatever the pack around it."""
    import torch

    from simbench.calibrate.batches import packed_varlen_batch, random_sequences, unpadded_batch
    from simbench.calibrate.encoder import Encoder, EncoderShape, attention_mask

    sequences = random_sequences([5, 3, 8, 2], 50, np.random.default_rng(0))
    torch.manual_seed(0)
    encoder = Encoder(EncoderShape(layers=2, hidden=16, heads=2, intermediate=32, vocabulary=50, max_length=64))
    unpadded = encoder.encode(unpadded_batch(sequences, "grouped"))
    for attention in ("grouped", "jagged"):
        batch = packed_varlen_batch(sequences, [[0, 1], [2], [3]], 10, attention)
        assert attention_mask(batch) is None
        assert batch.real_slots.tolist() == [*range(0, 8), *range(10, 18), 20, 21]
        packed = encoder.encode(batch)
        torch.testing.assert_close(packed.index_select(0, batch.real_slots), unpadded, atol=1e-5, rtol=1e-4)


def test_a_layouts_shape_key_is_what_the_device_sees():
    assert BatchLayout.unpadded([3, 5]).shape_key == ("unpadded", 8)
    assert BatchLayout.padded([4, 4], 4).shape_key == ("dense", 2, 4)
    # Padded and sorted rows and `row` packs run one attention over the whole row, no mask: the same kernels.
    assert BatchLayout.padded([4, 3], 4).shape_key == ("dense", 2, 4)
    assert BatchLayout.padded([4, 3], 4, ExecutionMode.SORTED).shape_key == ("dense", 2, 4)
    assert BatchLayout.packed([[2, 2], [3]], 4).shape_key == ("dense", 2, 4)
    masked = BatchLayout.packed([[2, 2], [3]], 4, ExecutionMode.PACKED_DENSE_MASK)
    assert masked.shape_key == ("dense mask", 2, 4)
    assert BatchLayout.packed([[2, 2], [3]], 4, ExecutionMode.PACKED_BLOCK_MASK).shape_key == ("block mask", 2, 4)
    varlen = BatchLayout.packed([[2, 2], [3]], 4, ExecutionMode.PACKED_VARLEN)
    assert varlen.shape_key == ("per-sequence", 2, 4) and varlen.kind == "packed_varlen"


def test_a_scenarios_strategies_are_drawn_as_the_simulator_draws_them_or_refused_with_a_reason():
    from simbench.calibrate.strategy_batches import strategy_batches
    from simbench.sim.plans import parse_plan
    from simbench.strategies.group_by_length import sequences_per_batch
    from simbench.strategies.token_budget import token_budget_batches

    histogram = measure.rescale_histogram(load_histogram("wikipedia_512"), 128)
    names = ["sort", "spfhp:3", "packed-varlen:lpfhp", "unpad", "token-budget", "group-by-length", "unpad-exchange",
             "vts"]
    built = strategy_batches([(name, parse_plan(name)) for name in names], histogram, 128, steps=5, batch_size=8,
                             seed=0)
    assert built.baseline == "none" and list(built.layouts)[0] == "none"  # padding added first, as simulate does
    assert list(built.layouts)[1:] == names[:6] and list(built.refused) == ["unpad-exchange", "vts"]
    assert all(reason for reason in built.refused.values())
    assert all(len(batches) == 5 for batches in built.layouts.values())
    for layout in built.layouts["none"]:
        assert len(layout.rows) == 8 and set(layout.row_slots) == {128} and layout.max_depth == 1
    for layout in built.layouts["sort"]:
        assert layout.mode is ExecutionMode.SORTED and set(layout.row_slots) == {int(layout.lengths.max())}
    assert all(layout.kind == "packed" and layout.max_depth <= 3 for layout in built.layouts["spfhp:3"])
    assert all(layout.kind == "packed_varlen" and set(layout.row_slots) == {128}
               for layout in built.layouts["packed-varlen:lpfhp"])
    assert all(layout.kind == "unpadded" and len(layout.rows) == 8 for layout in built.layouts["unpad"])
    budget = token_budget_batches(histogram, 8 * 128)
    kinds = {tuple(sorted(np.repeat(budget.run_lengths[start:stop], budget.run_counts[start:stop])))
             for start, stop in zip(budget.run_offsets[:-1], budget.run_offsets[1:])}
    for layout in built.layouts["token-budget"]:
        assert layout.mode is ExecutionMode.SORTED and layout.slots <= 8 * 128
        assert tuple(sorted(layout.lengths)) in kinds  # one of the bucketing's batches
    rows = sequences_per_batch(histogram, 8, 128)
    for layout in built.layouts["group-by-length"]:
        assert layout.mode is ExecutionMode.SORTED and len(layout.rows) == rows
        assert set(layout.row_slots) == {int(layout.lengths.max())}


def test_measured_batches_are_the_ones_each_plans_batch_source_draws():
    """`pad-to-longest` (the default baseline) is timed, each batch padded to its own longest; `wlb`'s outlier delay
    holds on the device as in the simulator: a step's packs all hold a long document or none does."""
    from simbench.calibrate.strategy_batches import strategy_batches
    from simbench.sim.plans import parse_plan
    from simbench.strategies.wlb import outlier_threshold

    histogram = measure.rescale_histogram(load_histogram("wikipedia_512"), 128)
    names = ["pad-to-longest", "wlb"]
    built = strategy_batches([(name, parse_plan(name)) for name in names], histogram, 128, steps=40, batch_size=8,
                             seed=0)
    assert list(built.layouts) == ["none", *names] and not built.refused
    for layout in built.layouts["pad-to-longest"]:
        assert layout.mode is ExecutionMode.SORTED and len(layout.rows) == 8 and layout.max_depth == 1
        assert set(layout.row_slots) == {int(layout.lengths.max())}
    assert parse_plan("wlb").outlier_delay
    threshold = outlier_threshold(128)
    outlier_steps = [[max(row) >= threshold for row in layout.rows] for layout in built.layouts["wlb"]]
    assert all(all(step) or not any(step) for step in outlier_steps)
    assert 0 < sum(all(step) for step in outlier_steps) < len(outlier_steps)  # both kinds of step were drawn


def test_first_sight_steps_pay_the_profiles_cost_where_their_shape_was_new_and_never_run_faster():
    model = get_model("tiny")
    profile = PROFILE.model_copy(update={"first_sight_padded_seconds": 0.02, "first_sight_varlen_seconds": 0.004})
    layouts = {"padding": [BatchLayout.padded([5, 8], 8), BatchLayout.padded([3, 8], 8)],
               "unpadding": [BatchLayout.unpadded([5, 8]), BatchLayout.unpadded([3, 8])]}
    repeated = {name: predict_seconds(model, profile, batches) for name, batches in layouts.items()}
    new = {"padding": np.array([True, False]), "unpadding": np.array([True, True])}
    # First steps exactly as priced: the repeated price, plus the first-sight cost where the shape was new.
    first = {"padding": repeated["padding"] + np.array([0.02, 0.5]),
             "unpadding": repeated["unpadding"] + 0.004}
    measured = measure_timing.MeasuredSteps(layouts, repeated, {name: np.zeros(2) for name in layouts}, None, first, new)
    table = measure_compare.compare(measured, model, profile).set_index("strategy")
    assert table["new_shape_steps"].tolist() == [1, 2]
    np.testing.assert_allclose(table["first_sight_error"], 0.0, atol=1e-12)
    np.testing.assert_allclose(table["error"], 0.0, atol=1e-12)
    assert (table["measured_first_sight_step_seconds"] >= table["measured_step_seconds"]).all()
    assert (table["predicted_first_sight_step_seconds"] >= table["predicted_step_seconds"]).all()
    # Steps at seen shapes count as repeated, whatever their first step took.
    assert measured.first_sight_step_seconds("padding") == pytest.approx(repeated["padding"].mean() + 0.01)
    # New shapes whose first steps ran faster in all than repeated ones: timing noise, first sight as repeated.
    faster = measure_timing.MeasuredSteps(layouts, repeated, {name: np.zeros(2) for name in layouts}, None,
                                   {name: seconds * 0.9 for name, seconds in repeated.items()}, new)
    assert faster.first_sight_step_seconds("unpadding") == pytest.approx(repeated["unpadding"].mean())
    # Without first steps timed, nothing is claimed about first sight.
    plain = measure_compare.compare(measure_timing.MeasuredSteps(layouts, repeated, {name: np.zeros(2) for name in layouts}),
                            model, profile)
    assert plain["first_sight_error"].isna().all()


def test_measured_first_sight_is_predicted_as_the_simulator_prices_it_hidden_under_the_steps_kernels():
    """The part of first sight a step's kernels hide is their compute and padding, not the host's overhead: the
    prediction beside a measurement is the simulator's (`sim.shapes.FirstSight.shown`) on the same steps."""
    from simbench.calibrate.fit import batch_set
    from simbench.costmodels.transformer import TransformerCostModel
    from simbench.sim.shapes import FirstSight

    model = get_model("tiny")
    # A host-bound profile: the overhead dwarfs the kernels, so hiding under the whole step would hide it all.
    profile = PROFILE.model_copy(update={"first_sight_padded_seconds": 0.05, "first_sight_hidden_seconds": 0.04,
                                         "step_overhead_seconds": 0.2})
    layouts = {"padding": [BatchLayout.padded([5, 8], 8), BatchLayout.padded([3, 7], 8)]}
    repeated = {"padding": predict_seconds(model, profile, layouts["padding"])}
    new = {"padding": np.array([True, True])}
    measured = measure_timing.MeasuredSteps(layouts, repeated, {"padding": np.zeros(2)}, None,
                                            {"padding": repeated["padding"] + 0.05}, new)
    row = measure_compare.compare(measured, model, profile).set_index("strategy").loc["padding"]
    costs = TransformerCostModel(model, profile).step_costs(batch_set(layouts["padding"]), ExecutionMode.PADDED)
    shown = FirstSight(profile.first_sight_padded_seconds, 1.0, np.random.default_rng(0), hidden_seconds=0.04).shown(costs)
    assert 0 < shown.min() < 0.05  # the kernels hide some of it, not all
    assert row["predicted_first_sight_step_seconds"] == pytest.approx(row["predicted_step_seconds"] + shown.mean(),
                                                                      rel=1e-12)


def test_the_first_passs_load_comes_from_its_steps_at_shapes_seen_before():
    first = [measure_timing.FirstPass(np.array([3.0, 2.2, 4.4]), np.array([True, False, False])),
             measure_timing.FirstPass(np.array([9.0, 1.1]), np.array([True, False]))]
    repeated = [np.array([1.0, 2.0, 4.0]), np.array([1.0, 1.0])]
    assert measure_timing.first_pass_factor(first, repeated) == pytest.approx(1.1)  # new shapes' steps left out
    all_new = [measure_timing.FirstPass(np.array([3.0]), np.array([True]))]
    assert measure_timing.first_pass_factor(all_new, [np.array([1.0])]) == 1.0


def test_first_sight_costs_are_fitted_on_the_batches_whose_shape_was_new():
    layouts = [BatchLayout.padded([8, 8], 8), BatchLayout.padded([4, 4], 4), BatchLayout.unpadded([3, 5]),
               BatchLayout.unpadded([2, 2])]
    first = measure_timing.FirstPass(np.array([0.5, 0.3, 0.24, 9.0]), np.array([True, True, True, False]))
    fields = measure_timing.first_sight_fields(layouts, first, np.array([0.1, 0.1, 0.2, 0.1]))
    # Per distinct shape, whatever the layers: not divided by them.
    assert fields["first_sight_padded_seconds"] == pytest.approx(0.3)  # median of 0.4 and 0.2
    assert fields["first_sight_varlen_seconds"] == pytest.approx(0.04)  # the seen shape's 8.9 s left out
    slower = measure_timing.first_sight_fields(layouts, first, np.array([0.6, 0.4, 0.3, 0.1]))
    assert slower["first_sight_padded_seconds"] == 0.0 == slower["first_sight_varlen_seconds"]


def test_the_warm_up_loads_every_attention_path_on_shapes_no_batch_has():
    from simbench.calibrate.strategy_batches import strategy_batches
    from simbench.sim.plans import parse_plan

    histogram = measure.rescale_histogram(load_histogram("squad_1_1_384"), 64)
    names = ["sort", "spfhp:3", "packed-varlen", "unpad", "token-budget"]
    built = strategy_batches([(name, parse_plan(name)) for name in names], histogram, 64, 6, 8, 0)
    layouts = [layout for batches in built.layouts.values() for layout in batches]
    warmups = measure_timing.warmup_layouts(layouts)
    assert {layout.shape_key[0] for layout in warmups} == {layout.shape_key[0] for layout in layouts}
    assert not {layout.shape_key for layout in warmups} & {layout.shape_key for layout in layouts}


def test_strategies_named_on_the_command_line_replace_a_histograms_four():
    from simbench.calibrate.measure_run import _measure_source

    named = _measure_source("wikipedia_512", ["unpad", "spfhp:3"])
    assert named.seed == 0 and [label for label, _ in named.plans] == ["unpad", "spfhp:3"]
    assert named.batch_size is None  # a histogram has no rows of its own
    assert _measure_source("wikipedia_512", None).plans is None  # padding, sort, lpfhp, unpadding
    scenario = _measure_source("wiki512", None)  # a bundled scenario: its strategies, labels, seed and rows
    assert [label for label, _ in scenario.plans][:3] == ["none", "sort", "greedy:max"]
    assert scenario.batch_size == 32


def test_measure_times_every_strategy_of_a_scenario_or_says_why_not_and_prints_only_json(tmp_path):
    """A scenario end to end in its own process, as a user runs it: stdout holds JSON lines and nothing else
    (the optimal packer's LP solver prints a banner from C), one per strategy listed, plus padding."""
    import subprocess
    import sys

    import yaml

    scenario = {"name": "measured", "dataset": {"histogram": "squad_1_1_384"}, "model": "bert-large",
                "strategies": ["sort", {"name": "optimal", "max_depth": 2}, "packed-varlen", "unpad",
                               "unpad-exchange", "token-budget", "group-by-length", "vts"],
                "devices": [1, 8], "batch_size": 8, "steps": 10}
    path = tmp_path / "measured.yaml"
    path.write_text(yaml.safe_dump(scenario))
    output = tmp_path / "out"
    completed = subprocess.run(
        [sys.executable, "-m", "simbench.cli", "measure", str(path), "--quick", "--device", "cpu", "--threads", "1",
         "--max-length", "32", "--steps", "2", "--batch-size", "4", "--repeats", "2", "--json", "-o", str(output)],
        capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr
    records = [json.loads(line) for line in completed.stdout.splitlines()]  # every line is JSON
    by_strategy = {record["strategy"]: record for record in records}
    assert list(by_strategy) == ["none", "sort", "optimal:2", "packed-varlen:lpfhp:max", "unpad", "token-budget",
                                 "group-by-length", "unpad-exchange", "vts"]
    refused = {name for name, record in by_strategy.items() if record["problem"].startswith("not measured: ")}
    assert refused == {"unpad-exchange", "vts"}
    assert all(len(by_strategy[name]["problem"]) > len("not measured: ") for name in refused)
    for name, record in by_strategy.items():
        if name in refused:
            assert record["measured_speedup"] is None
            continue
        assert record["problem"] == "" and record["measured_speedup"] > 0 and record["predicted_speedup"] > 0
        assert record["measured_first_sight_step_seconds"] >= record["measured_step_seconds"]
        assert record["predicted_first_sight_step_seconds"] >= record["predicted_step_seconds"]
        assert record["first_sight_error"] == pytest.approx(
            record["predicted_first_sight_speedup"] / record["measured_first_sight_speedup"] - 1)
    assert by_strategy["none"]["measured_speedup"] == 1.0 == by_strategy["none"]["measured_first_sight_speedup"]
    assert by_strategy["none"]["new_shape_steps"] >= 1  # the first batch of padding's one shape
    assert by_strategy["packed-varlen:lpfhp:max"]["mode"] == "packed_varlen" and by_strategy["unpad"]["mode"] == "unpadded"
    assert "HiGHS" not in completed.stdout  # the solver's banner never reaches stdout
    table = pd.read_csv(output / "measured_vs_predicted.csv")
    assert list(table["strategy"]) == list(by_strategy)
    timings = json.loads((output / "timings.json").read_text())
    assert set(timings) == set(by_strategy) - refused
    assert all({"first_seconds", "new_shape", "median_seconds"} <= set(batch)
               for batches in timings.values() for batch in batches)
    settings = yaml.safe_load((output / "settings.yaml").read_text())
    assert set(settings["not_measured"]) == refused and settings["baseline"] == "none"
    profile = yaml.safe_load((output / "profile.yaml").read_text())
    assert profile["provenance"]["first_sight_varlen_seconds"].startswith("fitted: first steps")


@pytest.fixture(scope="module")
def decoder_run(tmp_path_factory):
    """A decoder scenario (Llama 3.1 8B's) measured on the CPU, with its tiny stand-in, in seconds."""
    import yaml

    from simbench.calibrate.measure_run import measure_strategies

    folder = tmp_path_factory.mktemp("decoder")
    scenario = {"name": "decoder", "dataset": {"histogram": "squad_1_1_384"}, "model": "llama-3.1-8b",
                "strategies": ["sort", "greedy", "packed-varlen", "unpad", "unpad-exchange", "token-budget",
                               "group-by-length", "vts"],
                "devices": [1], "batch_size": 4, "steps": 10,
                # the 8B model fits no 40 GiB GPU: HBM without limit, since this measures on its CPU stand-in
                "hardware": {"profile": "a100", "overrides": {"hbm_capacity_bytes": 1.0e15}}}
    path = folder / "decoder.yaml"
    path.write_text(yaml.safe_dump(scenario))
    notes, counts = [], {"loads": 0, "resolutions": 0}
    import simbench.scenario as scenario_module
    from simbench.resolved import Run

    load, resolve = scenario_module.load_scenario, Run.from_scenario.__func__

    def counted_load(*arguments, **keywords):
        counts["loads"] += 1
        return load(*arguments, **keywords)

    def counted_resolve(cls, *arguments, **keywords):
        counts["resolutions"] += 1
        return resolve(cls, *arguments, **keywords)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scenario_module, "load_scenario", counted_load)
        patch.setattr(Run, "from_scenario", classmethod(counted_resolve))
        run = measure_strategies(str(path), output_dir=folder / "out", device="cpu", threads=1, max_length=32,
                                 steps=2, batch_size=4, repeats=2, quick=True, note=notes.append)
    return run, notes, counts


def test_a_measurement_loads_and_resolves_its_scenario_once(decoder_run):
    _, _, counts = decoder_run
    assert counts == {"loads": 1, "resolutions": 1}


def test_a_decoder_scenario_is_measured_end_to_end_every_strategy_timed_or_refused_with_a_reason(decoder_run):
    import yaml

    run, notes, _ = decoder_run
    assert any("tiny-decoder, the CPU stand-in for the scenario's llama-3.1-8b" in note for note in notes)
    table = run.table.set_index("strategy")
    assert list(table.index) == ["none", "sort", "greedy:max", "packed-varlen:lpfhp:max", "unpad", "token-budget",
                                 "group-by-length", "unpad-exchange", "vts"]
    assert set(run.refused) == {"unpad-exchange", "vts"} and all(run.refused.values())
    measured = table.drop(index=list(run.refused))
    assert (measured["problem"] == "").all()
    assert (measured["measured_speedup"] > 0).all() and (measured["predicted_speedup"] > 0).all()
    assert list(measured["mode"]) == ["padded", "sorted", "packed", "packed_varlen", "unpadded", "sorted", "sorted"]
    assert "tiny-decoder decoder" in run.title
    settings = yaml.safe_load((run.folder / "settings.yaml").read_text())
    assert settings["model"] == "tiny-decoder" and settings["model_family"] == "decoder"
    assert settings["unpadded_attention"] == "grouped"  # causal, one call per length group on a CPU
    profile = yaml.safe_load((run.folder / "profile.yaml").read_text())
    assert profile["calibration"]["model_dimensions"]["family"] == "decoder"
    assert "tiny-decoder decoder" in profile["source"]


def test_a_decoders_predicted_speedups_come_from_its_decoder_model_spec(decoder_run):
    import dataclasses

    from simbench.calibrate.fit import predict_seconds
    from simbench.costmodels.hardware import load_hardware

    run, _, _ = decoder_run
    profile = load_hardware(run.folder / "profile.yaml")
    timings = json.loads((run.folder / "timings.json").read_text())
    decoder = get_model("tiny-decoder")
    encoder_twin = dataclasses.replace(decoder, family="encoder")  # bidirectional attention, no LM head

    def step_seconds(model, name: str) -> float:
        layouts = [BatchLayout(ExecutionMode(batch["mode"]), tuple(map(tuple, batch["rows"])),
                               tuple(batch["row_slots"])) for batch in timings[name]]
        return float(predict_seconds(model, profile, layouts).mean())

    table = run.table.set_index("strategy")
    for name in timings:
        assert table.loc[name, "predicted_step_seconds"] == pytest.approx(step_seconds(decoder, name))
    assert step_seconds(encoder_twin, "none") != pytest.approx(step_seconds(decoder, "none"))
    predicted = step_seconds(decoder, "unpad") / step_seconds(decoder, "none")
    tokens = {name: sum(map(sum, (sum(batch["rows"], []) for batch in timings[name]))) for name in ("none", "unpad")}
    assert table.loc["unpad", "predicted_speedup"] == pytest.approx(tokens["unpad"] / tokens["none"] / predicted)


def test_a_decoder_gives_every_real_token_the_same_output_however_it_is_batched():
    """Causal attention per document is exact: a token's output in packed-varlen packs, in packs under the
    block-diagonal causal mask and in padded rows is the one it has un-padded (no position table to differ)."""
    from dataclasses import replace

    import torch

    from simbench.calibrate.batches import (packed_batch, packed_varlen_batch, padded_batch, random_sequences,
                                            unpadded_batch)
    from simbench.calibrate.causal_lm import CausalLM, real_token_slots

    model = get_model("tiny-decoder")
    sequences = random_sequences([5, 3, 8, 2], model.vocab, np.random.default_rng(0))
    torch.manual_seed(0)
    decoder = CausalLM(model)
    unpadded_batch_ = unpadded_batch(sequences, "grouped")
    unpadded = decoder.encode(unpadded_batch_)
    rows = [[0, 1], [2], [3]]
    for batch in (packed_varlen_batch(sequences, rows, 10), packed_batch(sequences, rows, 10),
                  padded_batch(sequences, 9)):
        torch.testing.assert_close(decoder.encode(batch).index_select(0, real_token_slots(batch)), unpadded,
                                   atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(decoder.loss(batch), decoder.loss(unpadded_batch_))
    # Causal: a token's output does not depend on the tokens after it.
    first_four = replace(sequences[2], token_ids=sequences[2].token_ids[:4], masked_positions=np.array([0]),
                         masked_labels=np.array([1]))
    shorter = decoder.encode(unpadded_batch([first_four], "grouped"))
    torch.testing.assert_close(shorter, unpadded[8:12], atol=1e-5, rtol=1e-4)


def test_measure_times_a_scenarios_own_model_on_cuda_its_familys_stand_in_on_a_cpu(monkeypatch):
    from simbench.calibrate import measure_run

    notes = []
    assert measure_run.measured_model("llama8b-sft-8k", device="cpu", note=notes.append).name == "tiny-decoder"
    assert "stand-in" in notes[0] and "--device cuda" in notes[0]
    assert measure_run.measured_model("wiki512", device="cpu").name == "tiny"
    assert measure_run.measured_model("llama8b-sft-8k", device="cuda") == get_model("llama-3.1-8b")
    sliced = measure_run.measured_model("llama8b-sft-8k", device="cuda", layers=2)
    assert sliced.layers == 2 and sliced.family == "decoder" and sliced.hidden == 4096
    assert measure_run.measured_model("wikipedia_512", device="cuda").name == "tiny"  # a histogram names no model
    assert measure_run.measured_model("llama8b-sft-8k", get_model("mini"), device="cpu").name == "mini"
    with pytest.raises(InputError, match="layers 40 is more than the 32 of llama-3.1-8b"):
        measure_run.measured_model("llama8b-sft-8k", device="cuda", layers=40)
    with pytest.raises(InputError, match="a decoder attends within each sequence"):
        measure_run._decoder_attention("jagged", "cpu")


def test_a_whole_decoder_llm_is_refused_before_anything_is_built():
    with pytest.raises(InputError, match="training FLOPs"):
        _settings(model=get_model("llama-3.1-8b"), max_length=8192, device="cuda", steps=16, batch_size=16)
    with pytest.raises(InputError, match="training FLOPs"):
        _settings(model=get_model("llama-3.1-8b"), max_length=128, device="cpu")


def test_a_budget_that_the_steps_outrun_stops_the_rounds_and_says_so(tmp_path, monkeypatch):
    """A budget sized on an estimate ten thousand times too fast plans the most repeats; the rounds stop at the
    fewest once its time is spent, every strategy keeping as many, and settings.yaml and a note say what ran."""
    import yaml

    from simbench.calibrate import measure_budget
    from simbench.calibrate.measure_run import measure_strategies

    estimate = measure_budget.estimated_step_seconds

    def too_fast(*arguments):
        seconds, first_sight, source = estimate(*arguments)
        return {name: value * 1e-4 for name, value in seconds.items()}, first_sight * 1e-4, source

    monkeypatch.setattr(measure_budget, "estimated_step_seconds", too_fast)
    notes = []
    run = measure_strategies("squad_1_1_384", output_dir=tmp_path / "out", device="cpu", threads=1, max_length=32,
                             batch_size=4, seconds=0.05, quick=True, strategies=["sort", "unpad"], note=notes.append)
    assert any("time budget 0 s" in note and "x 5 repeats" in note for note in notes)
    assert any(note.startswith("time budget: 2 repeats of every batch, not 5") for note in notes)
    assert yaml.safe_load((run.folder / "settings.yaml").read_text())["repeats"] == 2
    assert np.isfinite(run.table.set_index("strategy").loc["unpad", "speedup_noise"])
