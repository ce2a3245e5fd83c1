"""`simbench run`, `validate`, `plot` and `list`: scenarios in, report folders out.

Progress bars and messages go to stderr; the report folder is the only thing written.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from simbench.commands.common import command, progress_bar

REPORTS_DIR = Path("reports")
SCENARIO_HELP = "scenario YAML file, or a bundled scenario's name (simbench list)"
SIMULATOR_PLAN_DESCRIPTIONS = {
    "unpad": "un-padding: no padding tokens, kernels grouped by length, each device's batch as drawn",
    "unpad-exchange": "un-padding with NVIDIA's padding exchange: the global batch sorted and dealt out",
    "unpad-exchange-overlap": "un-padding with the exchange on the host, overlapped with the step (Baidu)",
    "packed-varlen": "packs with per-sequence (varlen) attention instead of a block-diagonal mask",
    "vts": "Cerebras variable tensor shapes: samples stream through a stage pipeline, padding stripped",
    "vts-bucketed": "variable tensor shapes with batches bucketed by length",
}


def run(
    scenario_path: Path = typer.Argument(..., metavar="SCENARIO", help=SCENARIO_HELP),
    out: Path = typer.Option(None, "--out", help="report folder; default: reports/<scenario name> "
                                                 "(a file of several scenarios: DIR/<scenario name>)"),
    quick: bool = typer.Option(False, "--quick", help="every strategy, but few steps and device counts (seconds)"),
    seed: int = typer.Option(None, "--seed", min=0, help="replace the scenario's seed"),
) -> None:
    """Simulate a scenario and write its report: tables, summary.md and plots."""
    from simbench.report.folder import check_replaceable, write_report
    from simbench.report.results import build_tables, progress_total
    from simbench.scenario import load_scenarios

    console = Console(stderr=True)
    scenarios = load_scenarios(scenario_path, seed=seed)
    if quick:
        scenarios = [scenario.quickened() for scenario in scenarios]
    targets = [out if out is not None and len(scenarios) == 1 else (out or REPORTS_DIR) / scenario.name
               for scenario in scenarios]
    for target in targets:
        check_replaceable(target)  # every one before minutes of simulation, not after the first report
    for scenario, target in zip(scenarios, targets):
        start = time.perf_counter()
        histogram = scenario.dataset.load()
        with progress_bar(console) as progress:
            task = progress.add_task(f"simulating {scenario.name}", total=progress_total(scenario))
            tables = build_tables(scenario, histogram, lambda units: progress.advance(task, units))
            progress.update(task, description=f"writing {target}")
            write_report(target, scenario, histogram, tables)
        console.print(f"wrote {target}/ in {time.perf_counter() - start:.1f} s; start with {target / 'summary.md'}",
                      highlight=False, soft_wrap=True)


def validate(scenario_path: Path = typer.Argument(..., metavar="SCENARIO", help=SCENARIO_HELP)) -> None:
    """Check a scenario file without running it."""
    from simbench.scenario import load_scenarios

    console = Console(stderr=True)
    for scenario in load_scenarios(scenario_path):  # validating loads each dataset
        console.print(f"{scenario_path}: valid scenario {scenario.name!r} ({len(scenario.strategies)} strategies, "
                      f"devices {', '.join(map(str, scenario.devices))})", highlight=False, soft_wrap=True)


def plot(report: Path = typer.Argument(..., metavar="DIR", help="an existing report folder")) -> None:
    """Redraw a report's plots from its CSVs and resolved scenario."""
    from simbench.report.folder import draw_plots, read_report

    scenario, histogram, tables = read_report(report)
    written = draw_plots(report, scenario, histogram, tables)
    Console(stderr=True).print(f"redrew {len(written)} files in {report}/", highlight=False, soft_wrap=True)


def list_everything() -> None:
    """Show strategies, simulator plans, bundled histograms, and model and hardware presets."""
    from simbench.costmodels import HARDWARE_PRESETS, MODEL_PRESETS
    from simbench.histogram import bundled_histograms
    from simbench.scenario import bundled_scenarios
    from simbench.sim.plans import EXTRA_PLANS
    from simbench.strategies import available_strategies

    console = Console()
    console.print(_table("Packers and batchers (registry)", ["name", "description"],
                         [(name, strategy.description) for name, strategy in available_strategies().items()]))
    console.print(_table("Simulator plans", ["name", "description"],
                         [(name, SIMULATOR_PLAN_DESCRIPTIONS.get(name, "")) for name in EXTRA_PLANS]))
    console.print(_table("Bundled histograms", ["name", "file"],
                         [(name, str(path)) for name, path in bundled_histograms().items()]))
    console.print(_table("Bundled scenarios (simbench run NAME)", ["name", "file"],
                         [(name, str(path)) for name, path in bundled_scenarios().items()]))
    console.print(_table("Model presets", ["name", "layers", "hidden", "heads", "ffn"],
                         [(name, *map(str, (model.layers, model.hidden, model.heads, model.ffn)))
                          for name, model in MODEL_PRESETS.items()]))
    console.print(_table("Hardware presets", ["name", "source"],
                         [(name, profile.source) for name, profile in HARDWARE_PRESETS.items()]))


def _table(title: str, columns: list[str], rows: list[tuple[str, ...]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table


def register(app: typer.Typer) -> None:
    app.command("run")(command(run))
    app.command("validate")(validate)
    app.command("plot")(plot)
    app.command("list")(list_everything)
