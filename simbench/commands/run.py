"""`simbench run`, `validate` and `plot`: scenarios in, report folders out.

Progress bars and messages go to stderr; the report folder is the only thing written.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from simbench.commands.common import QUIET_HELP, command, progress_bar, say, stage_lines
from simbench.errors import InputError

REPORTS_DIR = Path("reports")
# What a run's workers import as they start (the modules of the packers marked `slow`, which they pack first),
# and while this process simulates (the plots', which load matplotlib).
SLOW_PACKER_MODULES = ("simbench.strategies.greedy", "simbench.strategies.nnlshp", "simbench.strategies.optimal")
PLOT_MODULES = ("simbench.report.plots",)
SCENARIO_HELP = "scenario YAML file, or a bundled scenario's name (simbench list)"


def run(
    scenario_path: Path = typer.Argument(..., metavar="SCENARIO", help=SCENARIO_HELP),
    out: Path = typer.Option(None, "--out", "-o", help="report folder; default: reports/<scenario name> "
                                                 "(a file of several scenarios: DIR/<scenario name>)"),
    quick: bool = typer.Option(False, "--quick", help="every strategy, but few steps and device counts (seconds)"),
    seed: int = typer.Option(None, "--seed", min=0, help="replace the scenario's seed"),
    seeds: int = typer.Option(None, "--seeds", help="replace the scenario's seeds: whole simulations with seeds "
                              "seed, seed+1, ..., reported as their mean and spread"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Simulate a scenario and write its report: tables, summary.md and plots."""
    from simbench.workers import ReportWorkers

    # The workers start first, importing the slow packers' modules beside this process's own imports; they pack
    # those packers, then load the plots' modules while this process simulates.
    with ReportWorkers(preload=PLOT_MODULES, start=SLOW_PACKER_MODULES) as workers:
        _run_scenarios(scenario_path, out, quick, seed, seeds, quiet, workers)


def _run_scenarios(scenario_path: Path, out: Path | None, quick: bool, seed: int | None, seeds: int | None,
                   quiet: bool, workers) -> None:
    from rich.console import Console

    from simbench.atomic import check_replaceable
    from simbench.report.folder import write_report
    from simbench.report.summary import overdraw_warning
    from simbench.experiment import progress_total, run_experiment
    from simbench.checked import check_scenarios
    from simbench.scenario import load_scenarios

    console = Console(stderr=True)
    scenarios = load_scenarios(scenario_path, seed=seed, seeds=seeds)
    if quick:
        scenarios = [scenario.quickened() for scenario in scenarios]
    checked = check_scenarios(scenarios)  # every document's refusals before any runs
    targets = [out if out is not None and len(scenarios) == 1 else (out or REPORTS_DIR) / scenario.name
               for scenario in scenarios]
    inputs = [scenario_path, *(path for scenario in scenarios for path in scenario.input_files())]
    for target in targets:
        # Every one before minutes of simulation, not after the first report.
        check_replaceable(target, inputs=inputs)
    for scenario, target, resolution in zip(scenarios, targets, checked):
        start = time.perf_counter()
        stage = stage_lines(console, quiet)
        histogram = resolution.histogram
        if stage is not None:
            stage(f"{scenario.name}: {histogram.name}, {histogram.sequences:,} sequences up to "
                  f"{histogram.max_length:,} tokens; packing {len(scenario.strategies)} strategies")
        with progress_bar(console, quiet) as progress:
            task = progress.add_task(f"simulating {scenario.name}", total=progress_total(scenario))
            tell = _telling(progress, task, stage)
            tables = run_experiment(scenario, histogram, lambda units: progress.advance(task, units),
                                    stage=tell, workers=workers, checked=resolution)
            tell(f"writing {target}/")
            write_report(target, scenario, histogram, tables, workers, tell)
        say(f"wrote {target}/ in {time.perf_counter() - start:.1f} s; start with {target / 'summary.md'}")
        warning = overdraw_warning(tables.scaling, histogram.sequences)
        if warning:
            say(warning.replace("**", ""))


def _telling(progress, task, stage):
    """Each finished stage in the live bar's words (a terminal), and as a line where `stage` speaks (elsewhere):
    the fits, the 4D table and the plots take seconds after the bar is full, and neither stays silent then."""
    width = 70

    def tell(text: str) -> None:
        progress.update(task, description=text if len(text) <= width else text[:width - 3] + "...")
        if stage is not None:
            stage(text)

    return tell


def validate(scenario_path: Path = typer.Argument(..., metavar="SCENARIO", help=SCENARIO_HELP),
             as_json: bool = typer.Option(False, "--json", help="JSON lines: one object per scenario (valid, its "
                                          "defaults, memory budget and check, footing and warnings) or one with "
                                          "every error")) -> None:
    """Check a scenario file without running it; every error in it is listed at once, and every default it
    runs with (model, hardware, batch size not given) is said."""
    from simbench.checked import check_scenarios
    from simbench.commands.common import print_json_lines
    from simbench.errors import InputErrors
    from simbench.resolved import resolve
    from simbench.scenario import load_scenarios

    try:
        scenarios = load_scenarios(scenario_path)  # validating loads each dataset
        checked = check_scenarios(scenarios)
    except InputError as failure:  # InputErrors holds every error of the file; others come alone
        errors = failure.errors if isinstance(failure, InputErrors) else [failure]
        if as_json:
            print_json_lines([{"file": str(scenario_path), "valid": False, "errors": [str(error) for error in errors]}])
            raise typer.Exit(2) from None
        if len(errors) == 1:
            raise errors[0] from None  # one line, as every command says one error
        for error in errors:
            say(f"error: {error}")
        say(f"{scenario_path}: {len(errors)} errors")
        raise typer.Exit(2) from None
    from simbench.workers import ReportWorkers

    # Validating is resolving: each scenario sized and checked as `run` sizes and checks it (its packings made by
    # workers, as a run's are), so that memory is checked at the microbatches it runs.
    with ReportWorkers() as workers:  # started only if a slow packer is asked for
        for scenario, resolution in zip(scenarios, checked):
            _report_valid(scenario_path, scenario, resolve(scenario, checked=resolution, workers=workers), as_json)


def _report_valid(scenario_path: Path, scenario, run, as_json: bool) -> None:
    """A valid scenario's defaults, memory budget and check, warnings and footing, in words or as a JSON line."""
    from simbench.commands.common import print_json_lines

    budget, warnings = _memory_budget_line(scenario, run), scenario.depth_warnings()
    memory, footing = _memory_lines(scenario, run), _footing_lines(run)
    if as_json:
        print_json_lines([{"file": str(scenario_path), "valid": True, "scenario": scenario.name,
                           "strategies": [spec.label for spec in scenario.strategies],
                           "devices": list(scenario.devices), "defaults": scenario.unstated_defaults(),
                           "memory": budget, "memory_check": memory, "footing": footing, "warnings": warnings}])
        return
    count = len(scenario.strategies)
    say(f"{scenario_path}: valid scenario {scenario.name!r} ({count} strateg{'y' if count == 1 else 'ies'}, "
        f"devices {', '.join(map(str, scenario.devices))})")
    for line in [*scenario.unstated_defaults(), *([budget] if budget is not None else []),
                 *(f"memory: {line}" for line in memory), *(f"warning: {warning}" for warning in warnings), *footing]:
        say(line)


def _footing_lines(run) -> list[str]:
    """How the run sizes its strategies' optimizer steps, and each way they are not on equal footing."""
    footing = run.footing
    lines = [f"compare_at: {footing.compare_at}: expected real tokens per optimizer step "
             + ", ".join(f"{run.label(name)} {plan.expected_real_tokens_per_step:,.0f}"
                         for name, plan in footing.plans.items())]
    return lines + [f"warning: {warning}" for warning in footing.warnings(run.label)]


def _memory_budget_line(scenario, run) -> str | None:
    """What the scenario's memory lets a microbatch hold, for a layout or a decoder (whose long rows memory
    bounds) on hardware that states its HBM; None otherwise."""
    from simbench.sim.memory_budget import budget_sentence, layout_token_budget

    if run.hardware.hbm_capacity_bytes is None or (scenario.layout is None and not run.model.is_decoder):
        return None
    tokens = layout_token_budget(run.model, run.hardware, scenario.memory_layout, min(run.devices))
    return budget_sentence(tokens, scenario.memory_layout)


def _memory_lines(scenario, run) -> list[str]:
    """The memory check `run` prices by (`Run.memory`, after sizing), in words."""
    from simbench.sim.memory_fit import memory_sentences

    memory = run.memory
    if memory is None:
        return []
    return memory_sentences(memory.table(), one_gpu_layout=memory.raised and scenario.layout is None,
                            replica_word="device" if scenario.layout is None else "replica")


def plot(report: Path = typer.Argument(..., metavar="DIR", help="an existing report folder")) -> None:
    """Redraw a report's plots from its CSVs and resolved scenario."""
    from simbench.atomic import changed_files, record_rewritten
    from simbench.report.folder import PLOT_SUFFIXES, draw_plots, read_report

    scenario, histogram, tables = read_report(report)
    edited = [name for name in changed_files(report) if Path(name).suffix in PLOT_SUFFIXES]
    if edited:
        raise InputError(f"the report's plot file(s) {', '.join(edited)} changed since simbench wrote them; "
                         "redrawing would replace your edits: move them out first", source=str(report))
    written = draw_plots(report, scenario, histogram, tables)
    record_rewritten(report, written)
    say(f"redrew {len(written)} files in {report}/")


def register(app: typer.Typer) -> None:
    app.command("run")(command(run))
    app.command("validate")(command(validate))
    app.command("plot")(command(plot))
