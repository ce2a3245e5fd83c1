"""`simbench sweep`: run a design-space sweep, on this machine or on a Dask cluster, and report it."""

from __future__ import annotations

from collections.abc import Callable
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
    """Run every cell of a sweep; results go to OUT/results (Parquet), failures to OUT/failures. Exit status 1
    when no cell of the sweep has finished (every one failed)."""
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

    run_sweep(spec, out, workers=workers, scheduler=scheduler, resume=resume,
              progress=ProgressLines(spec.estimated_seconds(planned), say), note=say)
    failures, results = read_failures(out), read_results(out)
    write_sweep_report(out, spec.name, spec.axes, spec.report_axes, failures, results)
    say(f"wrote {out}/ in {time.perf_counter() - start:.0f} s; start with {out / 'summary.md'}")
    if failures:
        say(_failed_cells_line(out, failures, len(spec.cells), every=results.empty))
    if results.empty:  # the sweep ran, and nothing came of it: as `pack --check-baseline`'s regressions, status 1
        raise typer.Exit(1)


def _failed_cells_line(out: Path, failures: list[dict], cells: int, every: bool) -> str:
    """One line for the failed cells of the sweep in `out` (this run's and those an earlier one left, which
    `--resume` runs again): how many, where their errors are, and the first error."""
    from simbench.sweep_ledger import FAILURES

    first = failures[0]
    error = first["error"].splitlines()[0] if first["error"] else ""
    where = f"their errors are in {out / FAILURES}/ and {out / 'summary.md'}; the first, cell {first['cell']}: {error}"
    if every:
        return f"error: every cell of the sweep failed ({len(failures):,} of {cells:,}): {where}"
    return f"warning: {len(failures):,} of {cells:,} cells failed: {where}"


class ProgressLines:
    """A sweep's progress as a few lines: one as soon as the first cells calibrate the time estimate, then
    one every `STEP_FRACTION` of the cells or every `STEP_SECONDS`, whichever comes first, and the last
    (a 200-cell sweep printed a line per cell); likewise for the shared packings made first."""

    STEP_FRACTION = 0.1
    STEP_SECONDS = 10.0
    # The estimate is first given once the cells timed (those after the first to finish) have taken this long,
    # and at least CALIBRATION_CELLS are done: fewer, and one slow or quick cell would set it.
    CALIBRATION_SECONDS = 2.0
    CALIBRATION_CELLS = 3

    def __init__(self, rough_seconds: float, say: Callable[[str], None]):
        self.rough_seconds, self.say = rough_seconds, say
        self.phase, self.first, self.last_seconds, self.last_step, self.calibrated = None, 0, 0.0, 0, False

    def __call__(self, state) -> None:
        finished = state.done + state.failed
        if state.phase != self.phase:  # a new phase counts from where it starts (a resumed sweep's cells)
            self.phase, self.first, self.last_step, self.calibrated = state.phase, finished - 1, 0, False
        run, left = finished - self.first, state.total - self.first
        step = int(run / max(left, 1) / self.STEP_FRACTION)
        calibrating = (state.phase == "cells" and not self.calibrated and state.remaining_seconds is not None
                       and run >= min(self.CALIBRATION_CELLS, left) and state.cells_seconds >= self.CALIBRATION_SECONDS)
        if not (calibrating or step > self.last_step or finished == state.total
                or state.elapsed_seconds - self.last_seconds >= self.STEP_SECONDS):
            return
        self.last_step, self.last_seconds = step, state.elapsed_seconds
        if state.phase == "packing":
            self.say(f"packed {state.done} of {state.total} shared packings, {state.elapsed_seconds:.0f} s elapsed")
            return
        remaining = state.remaining_seconds
        line = (f"{state.done:,}/{state.total:,} cells done, {state.failed} failed, {state.elapsed_seconds:.0f} s "
                f"elapsed" + (f", about {remaining:.0f} s left" if remaining is not None and finished < state.total
                              else ""))
        if calibrating:
            self.calibrated = True
            line += (f" (estimate calibrated on the first {run} cells; the rough one was {self.rough_seconds:.0f} s "
                     "in all)")
        self.say(line)


def register(app: typer.Typer) -> None:
    app.command("sweep")(command(sweep))
