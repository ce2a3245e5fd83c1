"""`simbench sweep`: run a design-space sweep, on this machine or on a Dask cluster, and report it."""

from __future__ import annotations

from pathlib import Path

import typer

from simbench.commands.common import command, say

REPORTS_DIR = Path("sweeps")


def sweep(
    sweep_path: Path = typer.Argument(..., metavar="SWEEP", help="sweep YAML (a base scenario and axes), or a bundled sweep's name (simbench list)"),
    out: Path = typer.Option(None, "--out", help="results folder; default: sweeps/<sweep name>"),
    workers: int = typer.Option(None, "--workers", min=0,
                                help="local Dask workers (default: one per core); 0 runs the cells here, in turn"),
    scheduler: str = typer.Option(None, "--scheduler",
                                  help="a Dask scheduler (tcp://host:8786); default: DASK_SCHEDULER_ADDRESS, else local"),
    resume: bool = typer.Option(False, "--resume", help="finish an interrupted sweep in --out"),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate every cell and estimate the time; run nothing"),
) -> None:
    """Run every cell of a sweep; results go to OUT/results (Parquet), failures to OUT/failures."""
    import os
    import time

    from simbench.report.sweep import write_sweep_report
    from simbench.sweep import load_sweep, read_failures, read_results, run_sweep

    start = time.perf_counter()
    spec = load_sweep(sweep_path)
    planned = workers if workers is not None else os.cpu_count() or 1
    say(f"sweep {spec.name}: {len(spec.cells):,} cells over {', '.join(spec.axes)}; about "
        f"{spec.estimated_seconds(planned):.0f} s on {max(planned, 1)} worker(s) (rough estimate)")
    if dry_run:
        return
    out = out or REPORTS_DIR / spec.name

    def report_progress(state) -> None:
        remaining = state.remaining_seconds
        say(f"{state.done}/{state.total} cells done, {state.failed} failed, {state.elapsed_seconds:.0f} s elapsed"
            + (f", about {remaining:.0f} s left" if remaining is not None else ""))

    run_sweep(spec, out, workers=workers, scheduler=scheduler, resume=resume, progress=report_progress, note=say)
    failures = read_failures(out)
    write_sweep_report(out, spec.name, spec.axes, spec.report_axes, failures, read_results(out))
    say(f"wrote {out}/ in {time.perf_counter() - start:.0f} s; start with {out / 'summary.md'}")


def register(app: typer.Typer) -> None:
    app.command("sweep")(command(sweep))
