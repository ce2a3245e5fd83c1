"""Every plot can be read: drawn for every bundled scenario (a small run of its strategies, devices, model and
hardware on a few thousand sequences of its max length; its own length histogram) and for the sizes users
have (3 to 20 strategies, 512 to 128k contexts, solve times within one decade or across nine, the sweep's
panels), no two texts overlap, every text lies inside the figure, every panel labels its ticks and no legend
covers a data line, a point, a bar or a text (measured with matplotlib's own text extents)."""

import numpy as np
import pandas as pd
import pytest

from figure_layout import layout_problems
from simbench.histogram import LengthHistogram
from simbench.report import plots
from simbench.report.folder import plot_arguments
from simbench.report.sweep import scaling_facets_figure, winners, winners_figure
from simbench.scenario import Scenario, bundled_scenarios
from simbench.checked import load_checked_scenarios as load_scenarios

BUNDLED = sorted(bundled_scenarios())
SEQUENCES = 1_000  # a small run: the tables' shapes are the scenario's, not its figures


def assert_readable(figure) -> None:
    try:
        problems = layout_problems(figure)
    finally:
        plots.plt.close(figure)
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def bundled_runs():
    """Per bundled scenario: (scenario, its own histogram, a small run's plot arguments)."""
    from simbench.experiment import run_experiment

    runs = {}
    for name in BUNDLED:
        scenario = load_scenarios(name)[0]
        histogram = scenario.dataset.load()
        data = scenario.model_dump(mode="json")
        data["dataset"] = {"histogram": {"synthetic": "lognormal", "sequences": SEQUENCES, "sigma": 1.0,
                                         "median_length": max(histogram.max_length // 5, 2)},
                           "max_length": histogram.max_length}
        data["steps"] = 3
        data["outputs"]["lp_bounds"] = False
        small = Scenario.model_validate(data)
        tables = run_experiment(small)
        runs[name] = (scenario, histogram, plot_arguments(scenario, small.dataset.load(), tables))
    return runs


@pytest.mark.parametrize("name", BUNDLED)
def test_every_plot_of_every_bundled_scenario_is_readable(bundled_runs, name):
    scenario, histogram, arguments = bundled_runs[name]
    assert "scaling" in arguments and "breakdown" in arguments
    for plot, values in arguments.items():
        if plot == "histogram":
            values = (histogram,)  # the scenario's own lengths: where its truncation spike and note fall
        figure = plots.FIGURES[plot](*values)
        try:
            assert_readable(figure)
        except AssertionError as error:
            raise AssertionError(f"{name}: {plot}.png\n{error}") from None


# Synthetic tables of the sizes users have.

PACKERS = ["greedy", "spfhp:2", "spfhp:3", "spfhp:4", "spfhp:8", "spfhp:max", "lpfhp:max", "nnlshp:3",
           "optimal:3", "ffd", "bfd"]
TWENTY = ["none", "sort", "token-budget", "group-by-length", *PACKERS, "packed-varlen", "packed-varlen:spfhp:max",
          "unpad", "unpad-exchange", "unpad-exchange-overlap"]


def scaling_table(labels: list[str], devices: list[int], close: bool) -> pd.DataFrame:
    """Speed-ups that, with `close`, end within 0.002 of one another for most strategies (packers on
    Wikipedia all reach 1.91-1.92), else spread from 1 to 2.2; un-padding falls with scale."""
    rows = []
    for number, label in enumerate(labels):
        base = 1.0 if label == "none" else (1.91 + 0.0002 * number if close else 1.1 + 1.1 * number / len(labels))
        for count in devices:
            fall = 0.08 * np.log2(count) if label.startswith("unpad") else 0.0
            reference = "vts-padded" if label.startswith("vts") else "none"
            rows.append({"strategy": label, "devices": count, "speedup": max(base - fall, 0.9),
                         "reference": reference})
    return pd.DataFrame(rows)


def packing_tables(labels: list[str], max_length: int, solve_seconds: np.ndarray) -> tuple[pd.DataFrame, ...]:
    efficiency = np.linspace(0.2, 0.99999, len(labels))
    packs = np.round(1e6 / efficiency)
    packing = pd.DataFrame({"label": labels, "strategy": [label.split(":")[0] for label in labels],
                            "efficiency": efficiency, "packs": packs, "tokens": packs * max_length,
                            "lower_bound_packs": np.full(len(labels), 1_000_001.0)})
    timings = pd.DataFrame({"strategy": labels, "solve_seconds": solve_seconds})
    return packing, timings


def breakdown_table(labels: list[str], devices: list[int]) -> pd.DataFrame:
    rows = [{"strategy": label, "devices": count, "compute_seconds": 0.1, "padding_seconds": 0.05 * (label == "none"),
             "overhead_seconds": 0.01, "waiting_seconds": 0.02 * (count > 1), "communication_seconds": 0.01,
             "stall_seconds": 0.0, "step_seconds_mean": 0.2, "real_tokens_per_device_step": 8_000}
            for label in labels for count in (devices[0], devices[-1])]
    return pd.DataFrame(rows)


def lognormal_histogram(max_length: int, sequences: int = 200_000) -> LengthHistogram:
    lengths = np.random.default_rng(0).lognormal(np.log(max_length / 6), 1.0, sequences).astype(int)
    counts = np.bincount(np.clip(lengths, 1, max_length), minlength=max_length + 1)[1:]
    return LengthHistogram.from_counts(counts, name=f"lognormal-{max_length}")


SIZES = [pytest.param(["none", "spfhp:3", "unpad"], [1, 8], 512, id="3-strategies-512"),
         pytest.param(TWENTY, [2**power for power in range(12)], 512, id="20-strategies-512"),
         pytest.param(TWENTY[:9], [1, 2, 4, 8, 16, 32, 64, 128], 131_072, id="9-strategies-128k"),
         pytest.param(TWENTY, [2**power for power in range(21)], 131_072, id="20-strategies-128k-1M-devices")]


@pytest.mark.parametrize("labels, devices, max_length", SIZES)
@pytest.mark.parametrize("close", [True, False], ids=["close", "spread"])
def test_scaling_plot_is_readable_at_every_size(labels, devices, max_length, close):
    scaling = scaling_table(labels, devices, close)
    assert_readable(plots.scaling_figure(scaling, f"lognormal-{max_length}, llama-3.1-8b on h100-sxm",
                                         dashed=(2.4, "ideal: every sequence alone at full rate")))


@pytest.mark.parametrize("labels, devices, max_length", SIZES)
@pytest.mark.parametrize("seconds", [(0.041, 0.09), (0.3, 1.5), (2e-6, 900.0)],
                         ids=["within-a-decade", "across-a-decade", "nine-decades"])
def test_packing_plot_is_readable_at_every_size(labels, devices, max_length, seconds):
    solve_seconds = np.geomspace(*seconds, len(labels))
    packing, timings = packing_tables(labels, max_length, solve_seconds)
    assert_readable(plots.packing_figure(packing, timings, real_tokens=1_000_000 * max_length,
                                         max_length=max_length))


@pytest.mark.parametrize("labels, devices, max_length", SIZES)
def test_breakdown_and_histogram_plots_are_readable_at_every_size(labels, devices, max_length):
    assert_readable(plots.breakdown_figure(breakdown_table(labels, devices)))
    assert_readable(plots.histogram_figure(lognormal_histogram(max_length)))


def test_histogram_of_a_truncated_dataset_keeps_its_note_clear():
    counts = np.bincount(np.random.default_rng(1).integers(1, 8192, 50_000), minlength=8193)[1:]
    counts[-1] += 10_000  # truncated to the max length: the last bin towers, its note is printed
    assert_readable(plots.histogram_figure(LengthHistogram.from_counts(counts)))


@pytest.mark.parametrize("strategies", [1, 4])
def test_gumbel_plot_is_readable(strategies):
    rng = np.random.default_rng(0)
    labels = ["unpad", "unpad-exchange", "packed-varlen", "group-by-length"][:strategies]
    latency = pd.concat([pd.DataFrame({"strategy": label, "speedup": rng.gumbel(1.5, 0.2, 2_000)})
                         for label in labels])
    fit = pd.DataFrame({"strategy": labels, "location": 1.5, "scale": 0.2})
    devices = [2**power for power in range(12)]
    extrapolation = pd.DataFrame([{"strategy": label, "devices": count, "expected_speedup": 1.5 - 0.03 * index,
                                   "simulated_speedup": 1.48 - 0.03 * index}
                                  for label in [*labels, "paper's 8-GPU MLPerf fit"]
                                  for index, count in enumerate(devices)])
    extrapolation.loc[extrapolation["strategy"].str.startswith("paper"), "simulated_speedup"] = np.nan
    assert_readable(plots.gumbel_figure(latency, fit, extrapolation))


def sweep_results(panels: int, strategies: list[str], devices: list[int]) -> pd.DataFrame:
    lengths = [1024 * 2**power for power in range(panels)]
    rows = []
    for cell, (max_length, count) in enumerate((length, count) for length in lengths for count in devices):
        for number, strategy in enumerate(["none", *strategies]):
            rows.append({"cell": cell, "dataset.max_length": max_length, "devices": count, "strategy": strategy,
                         "speedup": 1.0 if strategy == "none" else 1.2 + number / 10 - 0.01 * np.log2(count),
                         "reference": "none", "packer": None, "mode": None})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("panels", [1, 4, 10, 12])
def test_sweep_plots_label_every_panel_and_stay_readable(panels):
    devices = [2**power for power in range(20)]
    results = sweep_results(panels, ["spfhp:3", "unpad", "packed-varlen"], devices)
    axes = ("dataset.max_length", "devices")
    assert_readable(scaling_facets_figure(results, axes))
    assert_readable(winners_figure(winners(results, axes), ("devices", "dataset.max_length")))


@pytest.mark.parametrize("labels", [["none", "spfhp:3", "unpad"], TWENTY[:9]], ids=["3-strategies", "9-strategies"])
def test_padding_towering_over_the_rest_cuts_the_breakdown_axis_and_says_its_total(labels):
    # Padding to 128k costs ~40x what packing does per real token (58 ms against 1.5 ms in 4D): uncut, every
    # other bar was a line at the bottom.
    table = breakdown_table(labels, [1, 8])
    table.loc[table["strategy"] == "none", "padding_seconds"] = 8.0
    figure = plots.breakdown_figure(table)
    axis = figure.axes[0]
    others = [patch.get_y() + patch.get_height() for patch in axis.patches if patch.get_height() > 0]
    top = axis.get_ylim()[1]
    assert max(height for height in others if height < top) > 0.5 * top  # the rest fill the panel
    notes = [text.get_text() for text in axis.texts]
    total = 1e6 / 8_000 * (0.1 + 8.0 + 0.01 + 0.01)
    assert notes == [f"{total:,.1f} ms\n(cut; {100 * 8.0 / (8.0 + 0.12):.0f} %\npadding)"]
    assert_readable(figure)
    # A padding bar that does not tower leaves the axis whole.
    figure = plots.breakdown_figure(breakdown_table(labels, [1, 8]))
    assert not figure.axes[0].texts and figure.axes[0].get_ylim()[1] >= 1e6 / 8_000 * 0.17
    plots.plt.close(figure)


@pytest.mark.parametrize("devices", [[1], [1, 2, 4], [2**power for power in range(6)]])
def test_a_narrow_winners_map_keeps_its_title_clear_of_the_legend(devices):
    results = sweep_results(1, ["spfhp:3", "unpad", "packed-varlen:lpfhp:max"], devices)
    assert_readable(winners_figure(winners(results, ("dataset.max_length", "devices")),
                                   ("devices", "dataset.max_length")))
