"""A report folder: the resolved scenario, the tables, summary.md and the plots, written atomically.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from simbench.report.folder import write_report
    >>> from simbench.experiment import run_experiment
    >>> from simbench.scenario import Scenario
    >>> scenario = Scenario(name="demo", dataset={"histogram": "squad_1_1_384"}, strategies=["sort", "unpad"],
    ...                     devices=[1, 8], steps=5, outputs={"plots": ["scaling"], "formats": ["svg"]})
    >>> histogram = scenario.dataset.load()
    >>> with tempfile.TemporaryDirectory() as root:
    ...     folder = write_report(Path(root, "demo"), scenario, histogram, run_experiment(scenario, histogram))
    ...     sorted(path.name for path in folder.iterdir())  # doctest: +NORMALIZE_WHITESPACE
    ['.simbench-folder.json', 'assumptions.csv', 'breakdown.csv', 'decision.csv', 'extrapolation.csv', 'gumbel.csv',
     'latency.csv', 'memory.csv', 'packing.csv', 'recommend.md', 'report.html', 'resolved.yaml', 'scaling.csv',
     'scaling.svg', 'summary.json', 'summary.md', 'timeline.csv', 'timings.csv']
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from simbench.errors import InputError
from simbench.experiment import ExperimentResult
from simbench.histogram import LengthHistogram
from simbench.report import html
from simbench.report.baseline import baseline_of, over_words
from simbench.report.decision import decision_table
from simbench.report.summary import speedup_reference, summary_markdown, summary_record
from simbench.report.recommend import recommend_markdown
from simbench.report.tables import RESOLVED_SCENARIO, read_tables, write_tables
from simbench.report.units import DEVICE, DeviceUnit, device_unit
from simbench.workers import ReportWorkers
from simbench.atomic import atomic_directory, check_replaceable
from simbench.scenario import Scenario, load_scenario

PLOT_SUFFIXES = (".png", ".svg", ".pdf")  # what `simbench plot` redraws
# CPU seconds to draw each plot of the main job as PNG and SVG (measured on 2026-11-28, one x86-64 core): the order
# in which workers are given them.
DRAWING_SECONDS = {"breakdown": 1.4, "packing": 1.0, "scaling": 0.9, "gumbel": 0.8, "histogram": 0.6}
HISTOGRAM_BINS = 256  # enough to see the shape, few enough for a light page at 128k tokens
# As histogram.png: a last bin this many times higher than the rest is cut, its share written at the top.
SPIKE_CLIP_RATIO = 4


def write_report(target: Path, scenario: Scenario, histogram: LengthHistogram, tables: ExperimentResult,
                 workers: ReportWorkers | None = None, stage: Callable[[str], None] | None = None) -> Path:
    """Write everything into a fresh sibling folder, then swap it in place of `target`; `workers` draw the plots.
    `stage(text)` hears of each file or group of files as it is written."""
    tell = stage or (lambda text: None)
    check_replaceable(Path(target))
    with atomic_directory(target, metadata={"scenario_sha256": _sha256(scenario.to_yaml())}) as folder:
        (folder / RESOLVED_SCENARIO).write_text(scenario.to_yaml())
        tables_written = write_tables(tables, folder)
        tell(f"wrote {RESOLVED_SCENARIO} and {len(tables_written)} tables ({', '.join(tables_written)})")
        # Summary and plots use the tables as stored, so `simbench plot` redraws them byte for byte.
        stored = read_tables(folder)
        # The workers draw while this process writes the summaries.
        plots = start_plots(scenario, histogram, stored, workers)
        decision_table(stored, histogram).to_csv(folder / "decision.csv", index=False)
        summary = summary_markdown(scenario, histogram, stored)
        (folder / "summary.md").write_text(summary)
        (folder / "summary.json").write_text(json.dumps(json_ready(summary_record(scenario, histogram, stored)),
                                                        indent=1, allow_nan=False) + "\n")
        tell("wrote decision.csv, summary.md and summary.json")
        # From the tables as stored, so that `simbench recommend` on the folder says the same.
        (folder / "recommend.md").write_text(recommend_markdown(stored, scenario, histogram))
        tell("wrote recommend.md")
        written = write_plots(folder, plots, workers, stage)
        page = html.report_html(
            scenario.name, summary, [("scaling.csv", stored.scaling), ("packing.csv", stored.packing),
                                     ("breakdown.csv", stored.breakdown)],
            report_charts(histogram, stored, device_unit(scenario.layout)),
            [path for path in written if path.suffix == ".png"], device_unit(scenario.layout))
        (folder / "report.html").write_text(page)
        tell(f"wrote report.html ({len(page.encode()) / 2**20:.1f} MB)")
    return Path(target)


def report_charts(histogram: LengthHistogram, tables: ExperimentResult, unit: DeviceUnit = DEVICE) -> list[dict]:
    """The interactive charts of report.html: speed-up against devices for each baseline, each strategy in
    its style (simbench.report.styles, as in the PNG plots), and the length histogram in at most
    `HISTOGRAM_BINS` bins by sequences and by tokens, cut above the rest where the last bin towers."""
    from simbench.report.styles import Style, strategy_styles

    charts = []
    baseline = baseline_of(tables.scaling)
    reference = tables.scaling.get("reference", pd.Series(baseline, index=tables.scaling.index))
    line, line_label = speedup_reference(histogram, tables.scaling) or (None, "")
    styles = strategy_styles(tables.scaling["strategy"], tables.scaling)
    for name in dict.fromkeys(reference):
        over = over_words(name)
        charts.append(html.line_chart(
            f"Speed-up over {over} (real tokens per second) against {unit.plural}",
            tables.scaling[reference == name], "devices", "speedup", "strategy", x_label=unit.axis_label(),
            y_label=f"speed-up over {over}", log2_x=True, styles=styles, y_format="x",
            reference=line if name == baseline else None, reference_label=line_label))
    bins = min(HISTOGRAM_BINS, histogram.max_length)
    edges = np.linspace(0, histogram.max_length, bins + 1).round().astype(int)
    lengths = np.arange(1, histogram.max_length + 1)
    sequences = np.add.reduceat(histogram.counts, edges[:-1])
    tokens = np.add.reduceat(histogram.counts * lengths, edges[:-1])
    percent = [100 * sequences / max(sequences.sum(), 1), 100 * tokens / max(tokens.sum(), 1)]
    shares = pd.DataFrame({"length": np.tile(edges[1:], 2), "share": np.concatenate(percent),
                           "of": np.repeat(["sequences", "tokens"], bins)})
    rest = max(float(share[:-1].max(initial=0.0)) for share in percent)
    spike = max(float(share[-1]) for share in percent)
    colours = {"sequences": Style("lengths", "#4c72b0", "o", False), "tokens": Style("lengths", "#dd8452", "s", False)}
    charts.append(html.line_chart(f"Lengths of {histogram.name}: share of sequences and of tokens per bin of "
                                  f"{histogram.max_length / bins:.3g} lengths", shares, "length", "share", "of",
                                  x_label="length up to (tokens)", y_label="share per bin", styles=colours,
                                  y_format="%", y_max=1.3 * rest if rest > 0 and spike > SPIKE_CLIP_RATIO * rest
                                  else None))
    return charts


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _setting(scenario: Scenario, histogram: LengthHistogram) -> str:
    """Dataset, model and hardware in a few words, for a plot's title."""
    model = scenario.model if isinstance(scenario.model, str) else "custom model"
    hardware = scenario.hardware.profile + (" (overridden)" if scenario.hardware.overrides else "")
    return f"{histogram.name}, {model} on {hardware}"


def read_report(folder: Path) -> tuple[Scenario, LengthHistogram, ExperimentResult]:
    """The scenario, histogram and tables of an existing report (what `simbench plot` redraws from)."""
    scenario = load_scenario(Path(folder) / RESOLVED_SCENARIO)
    return scenario, scenario.dataset.load(), read_tables(folder)


def plot_arguments(scenario: Scenario, histogram: LengthHistogram, tables: ExperimentResult) -> dict[str, tuple]:
    """The arguments of each plot the scenario asks for that its tables have data for, by plot name:
    `simbench.report.plots.FIGURES[name](*arguments)` draws it."""
    unit = device_unit(scenario.layout)
    arguments = {
        "histogram": (histogram,),
        "packing": (tables.packing, tables.timings, histogram.real_tokens, histogram.max_length),
        "scaling": (tables.scaling, _setting(scenario, histogram),
                    speedup_reference(histogram, tables.scaling), unit),
        "gumbel": (tables.latency, tables.gumbel, tables.extrapolation, unit),
        "timeline": (tables.timeline,),
        "breakdown": (tables.breakdown, unit),
    }
    has_data = {"packing": not tables.packing.empty, "gumbel": not tables.gumbel.empty,
                "timeline": not tables.timeline.empty}
    return {name: arguments[name] for name in scenario.outputs.plots if has_data.get(name, True)}


def _render(name: str, values: dict, formats: tuple) -> dict:
    """`plots.render`, imported where it runs: with workers, the main process never loads matplotlib (2 s)."""
    from simbench.report.plots import render

    return render(name, values, formats)


def draw_plots(folder: Path, scenario: Scenario, histogram: LengthHistogram, tables: ExperimentResult,
               workers: ReportWorkers | None = None, stage: Callable[[str], None] | None = None) -> list[Path]:
    """Every plot the scenario asks for that its tables have data for, drawn by `workers` side by side;
    `stage(text)` hears of each as it is written, and every few seconds while none is."""
    return write_plots(folder, start_plots(scenario, histogram, tables, workers), workers, stage)


def start_plots(scenario: Scenario, histogram: LengthHistogram, tables: ExperimentResult,
                workers: ReportWorkers | None = None) -> dict:
    """Every plot the scenario asks for that its tables have data for, submitted to `workers` now (without
    workers, drawn as `write_plots` collects them), by plot name."""
    formats = tuple(scenario.outputs.formats)
    jobs = {name: (_render, name, values, formats)
            for name, values in plot_arguments(scenario, histogram, tables).items()}
    # Submitted slowest first, so that no slow plot is left to draw alone at the end.
    started = (workers or ReportWorkers(processes=0)).started(
        {name: jobs[name] for name in sorted(jobs, key=lambda name: -DRAWING_SECONDS.get(name, 0.0))})
    return {name: started[name] for name in jobs}


def write_plots(folder: Path, plots: dict, workers: ReportWorkers | None = None,
                stage: Callable[[str], None] | None = None) -> list[Path]:
    """The plots `start_plots` started, written into `folder` as each is drawn, in the scenario's order;
    `stage(text)` hears of each as it is written, and every few seconds while none is."""
    tell = stage or (lambda text: None)
    written = {}
    for name, contents in (workers or ReportWorkers(processes=0)).completed(plots, lambda seconds: tell(
            f"drawing plots: {len(written)} of {len(plots)} written ({seconds:.0f} s since the last)")):
        written[name] = []
        for extension, content in contents.items():
            path = Path(folder) / f"{name}.{extension}"
            path.write_bytes(content)
            written[name].append(path)
        tell(f"drew {' and '.join(path.name for path in written[name])} ({len(written)} of {len(plots)} plots)")
    return [path for name in plots for path in written[name]]  # in the scenario's order, whichever came first


def json_ready(value):
    """`value` with what JSON cannot hold made plain: NaN (a figure not computed) as null, an infinite float (a
    profile's `.inf`, no limit) as the string "inf" or "-inf", which any JSON reader takes and `float()` reads
    back."""
    if isinstance(value, dict):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
