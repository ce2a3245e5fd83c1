"""`simbench calibrate`: fit a hardware profile to real torch training steps on this machine.

torch is an optional extra, imported inside the library call, so the rest of the CLI works without it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from simbench.calibrate.run_setup import DEFAULT_MAX_LENGTH
from simbench.commands.common import (FORCE_HELP, UNPADDED_HELP, WALL_CLOCK_HELP, advancing, command, parse_model,
                                      print_table, progress_bar, say)
from simbench.errors import InputError



def calibrate(
    output: Path = typer.Option(..., "-o", "--output", help="hardware profile YAML to write"),
    device: str = typer.Option(None, "--device", help="cpu or cuda[:N]; default: cuda when available"),
    model: str = typer.Option("tiny", "--model",
                              help="model preset (tiny, mini, bert-base) or dimensions "
                                   "layers=2,hidden=128,heads=2,ffn=512"),
    max_length: int = typer.Option(DEFAULT_MAX_LENGTH, "--max-length", help="row length of the timed batches"),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads (default: torch's choice); recorded"),
    quick: bool = typer.Option(False, "--quick", help="few small batches, few repeats: seconds, for tests"),
    seed: int = typer.Option(0, "--seed"),
    unpadded_attention: str = typer.Option(None, "--unpadded-attention", help=UNPADDED_HELP),
    wall_clock: bool = typer.Option(False, "--wall-clock", help=WALL_CLOCK_HELP),
    timings: Path = typer.Option(None, "--timings",
                                 help="fit on stored primitive-shape timings (JSON lines in the format of "
                                      "simbench/data/measurements/h200-2026-11/grid.jsonl) instead of timing "
                                      "anything: no torch needed"),
    grid: bool = typer.Option(False, "--grid",
                              help="time the primitive-shape grid of the model's layers on --device (padded rows, "
                                   "flat variable-length batches; first step at each shape apart), write it beside "
                                   "the profile (PROFILE.grid.jsonl) and fit the profile on it as --timings does"),
    layers: int = typer.Option(None, "--layers",
                               help="with --grid: layers in the timed slice (default: the model's, at most 4 of "
                                    "a decoder's)"),
    base: str = typer.Option(None, "--hardware",
                             help="with --timings or --grid: the preset or profile whose other fields the profile "
                                  "keeps (default: h200; a --grid on the CPU: no optimizer, transfer or "
                                  "communication cost)"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Time padded, packed and un-padded training steps and fit the cost model's parameters to them; or fit the
    GPU terms (launch floor, dense efficiency, varlen attention, first sight) on a primitive-shape grid, stored
    (--timings) or timed here (--grid)."""
    import numpy as np
    from rich.console import Console

    if timings is not None and grid:
        raise InputError("give --timings (fit a stored grid) or --grid (time one here), not both",
                         parameter="timings")
    if timings is not None:
        _fit_timings(timings, base or "h200", output, force)
        return
    if grid:
        _time_grid(output, model=model, layers=layers, device=device, threads=threads, seed=seed, quick=quick,
                   unpadded_attention=unpadded_attention, wall_clock=wall_clock, base=base, force=force)
        return
    if layers is not None or base is not None:
        raise InputError("--layers and --hardware go with --grid or --timings", parameter="layers")

    from simbench.calibrate.calibration_runs import calibrate_profile

    with progress_bar(Console(stderr=True)) as progress:
        fit = calibrate_profile(output, model=parse_model(model), max_length=max_length, device=device,
                                threads=threads, seed=seed, quick=quick, unpadded_attention=unpadded_attention,
                                wall_clock=wall_clock, progress=advancing(progress, progress.add_task("calibrating")),
                                force=force)
    errors = abs(fit.relative_errors)
    print_table("fitted parameters", ["parameter", "value"],
                [*([name, f"{value:.4g}"] for name, value in fit.parameters.items()),
                 ["fit error (median / max, relative)", f"{float(np.median(errors)):.1%} / {errors.max():.1%}"]],
                left=["parameter"], stderr=True)
    say(f"wrote {output}")


def _time_grid(output: Path, *, model: str, base: str | None, **options) -> None:
    from rich.console import Console

    from simbench.calibrate.grid_timings import HELD_OUT_RULE
    from simbench.calibrate.calibration_runs import calibrate_grid

    with progress_bar(Console(stderr=True)) as progress:
        run = calibrate_grid(output, model=parse_model(model), base=base,
                             progress=advancing(progress, progress.add_task("timing the grid")), **options)
    _print_grid_fit(run.fit)
    say(f"held out: {HELD_OUT_RULE}, predicted by a fit on the others; timed on {run.device_name}; wrote "
        f"{run.grid_path} (the raw timings) and {output}")


def _print_grid_fit(fit) -> None:
    print_table("fit of the timing grid: |predicted / measured - 1|", ["timings", "count", "median", "max"],
                [(row["timings"], str(row["count"]), f"{row['median_abs_error']:.1%}", f"{row['max_abs_error']:.1%}")
                 for row in fit.error_rows()], left=["timings"], stderr=True)


def _fit_timings(timings: Path, base: str, output: Path, force: bool) -> None:
    from simbench.atomic import atomic_file, check_output_file
    from simbench.calibrate.grid_timings import HELD_OUT_RULE, load_timing_grid
    from simbench.calibrate.gridfit import fit_grid, fitted_profile
    from simbench.costmodels.hardware import load_hardware, profile_to_yaml

    if output.is_dir():
        raise InputError("the output is a folder; give a .yaml file name", source=str(output))
    check_output_file(output, inputs=[timings, Path(base)], force=force)
    load_hardware(base)  # a bad base is refused before the fit
    fit = fit_grid(load_timing_grid(timings), base)
    profile = fitted_profile(fit, base, f"simbench calibrate --timings {timings.name}")
    with atomic_file(output, replace=force) as temporary:
        temporary.write_text(profile_to_yaml(profile))
    _print_grid_fit(fit)
    say(f"held out: {HELD_OUT_RULE}, predicted by a fit on the others; wrote {output}")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(command(calibrate))
