"""A report's name for the simulated unit: with a 4D layout a replica, counted with its GPUs, in summary.md,
report.html's charts and table notes and the plots' axes; without one a device, worded as it always was."""

import re

import pytest

from simbench.experiment import run_experiment
from simbench.report import html
from simbench.report.folder import plot_arguments, report_charts
from simbench.report.plots import breakdown_figure, scaling_figure
from simbench.report.summary import summary_markdown
from simbench.report.units import DEVICE, device_unit
from simbench.scenario import Scenario
from simbench.costmodels.layout import ParallelLayout

SMALL = {"name": "small", "dataset": {"histogram": "squad_1_1_384"}, "strategies": ["spfhp", "packed-varlen"],
         "batch_size": 2, "steps": 3, "outputs": {"plots": ["scaling", "breakdown"], "formats": ["svg"]}}
# "device" as a word, not inside a profile field's name (host_to_device_bytes_per_s, devices_per_node).
DEVICE_WORD = re.compile(r"(?<![\w`])devices?(?![\w`])")


def run_part(summary: str) -> str:
    """The summary's words about this run: the sections on the profile's sources (real GPUs of published runs)
    left out."""
    return summary.partition("\n## Fitted or predicted")[0]


@pytest.fixture(scope="module")
def laid_out():
    scenario = Scenario(**SMALL, parallel={"tp": 2, "pp": 2, "cp": 2, "microbatches": 4}, devices=[8, 32])
    return scenario, run_experiment(scenario, assumptions=False)


@pytest.fixture(scope="module")
def flat():
    scenario = Scenario(**SMALL, devices=[1, 4])
    return scenario, run_experiment(scenario, assumptions=False)


def test_the_unit_is_decided_by_the_layout_alone():
    replica = device_unit(ParallelLayout(tp=8, pp=16, cp=16))
    assert device_unit(None) is DEVICE
    assert (DEVICE.count(1), DEVICE.count(8), DEVICE.axis_label("data parallel")) == \
        ("1 device", "8 devices", "devices (data parallel)")
    assert (replica.count(1), replica.count(8)) == ("1 replica (2,048 GPUs)", "8 replicas (16,384 GPUs)")
    assert replica.axis_label("data parallel") == "replicas (data parallel, x 2,048 GPUs)"
    assert replica.axis_label() == "replicas (x 2,048 GPUs)"


def test_a_layouts_summary_counts_replicas_and_their_gpus(laid_out):
    scenario, tables = laid_out
    text = summary_markdown(scenario, scenario.dataset.load(), tables)
    assert "**Answer:** on 1 replica (8 GPUs)" in text and "On 4 replicas (32 GPUs)" in text
    assert "| replicas | GPUs | fastest |" in text and "| 4 | 32 |" in text
    assert "## Speed-up over pad-to-longest by replica count" in text
    assert "| strategy | 1 replica (8 GPUs) | 4 replicas (32 GPUs) |" in text
    assert "## Where a step's time goes (4 replicas (32 GPUs), ms per step)" in text
    assert "real tokens per replica" in text and "batch size 2 per replica and microbatch" in text
    assert DEVICE_WORD.findall(run_part(text)) == []


def test_without_a_layout_the_summary_says_devices_as_before(flat):
    scenario, tables = flat
    text = summary_markdown(scenario, scenario.dataset.load(), tables)
    assert "**Answer:** on 1 device the fastest strategy is" in text or "**Answer:** on 1 device **" in text
    assert "| devices | fastest |" in text and "| strategy | 1 | 4 |" in text
    assert "## Speed-up over pad-to-longest by device count" in text and "real tokens per device" in text
    assert "## Where a step's time goes (4 devices, ms per step)" in text
    assert "replica" not in run_part(text) and "GPUs" not in run_part(text)


def test_the_plots_axes_name_the_unit(laid_out, flat):
    for (scenario, tables), x_label, titles in [
            (laid_out, "replicas (data parallel, x 8 GPUs)", ["1 replica (8 GPUs)", "4 replicas (32 GPUs)"]),
            (flat, "devices (data parallel)", ["1 device", "4 devices"])]:
        arguments = plot_arguments(scenario, scenario.dataset.load(), tables)
        assert arguments["scaling"][-1] == arguments["breakdown"][-1] == device_unit(scenario.layout)
        assert scaling_figure(*arguments["scaling"]).axes[0].get_xlabel() == x_label
        figure = breakdown_figure(*arguments["breakdown"])
        assert [axis.get_title() for axis in figure.axes] == titles
        unit = device_unit(scenario.layout)
        assert figure.axes[0].get_ylabel() == f"{unit.name} time per 1,000 real tokens (ms)"


def test_the_pages_charts_and_table_notes_name_the_unit(laid_out, flat):
    scenario, tables = laid_out
    chart = report_charts(scenario.dataset.load(), tables, device_unit(scenario.layout))[0]
    assert chart["title"].endswith("against replicas") and chart["x_label"] == "replicas (x 8 GPUs)"
    notes = html.table_notes(device_unit(scenario.layout))
    assert notes["scaling.csv"] == ("a row per strategy and replica count (`devices`: replicas of 8 GPUs; `gpus`: "
                                    "all of them)")
    scenario, tables = flat
    chart = report_charts(scenario.dataset.load(), tables)[0]
    assert chart["title"].endswith("against devices") and chart["x_label"] == "devices"
    assert html.table_notes()["scaling.csv"] == "a row per strategy and device count"
