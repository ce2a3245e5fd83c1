"""`simbench calibrate`: fit a hardware profile to real torch training steps on this machine.

torch is an optional extra, imported inside the library call, so the rest of the CLI works without it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from simbench.calibrate.runs import DEFAULT_MAX_LENGTH
from simbench.commands.common import (UNPADDED_HELP, WALL_CLOCK_HELP, advancing, command, parse_model, print_table,
                                      progress_bar, say)



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
) -> None:
    """Time padded, packed and un-padded training steps and fit the cost model's parameters to them."""
    import numpy as np
    from rich.console import Console

    from simbench.calibrate.runs import calibrate_profile

    with progress_bar(Console(stderr=True)) as progress:
        fit = calibrate_profile(output, model=parse_model(model), max_length=max_length, device=device,
                                threads=threads, seed=seed, quick=quick, unpadded_attention=unpadded_attention,
                                wall_clock=wall_clock, progress=advancing(progress, progress.add_task("calibrating")))
    errors = abs(fit.relative_errors)
    print_table("fitted parameters", ["parameter", "value"],
                [*([name, f"{value:.4g}"] for name, value in fit.parameters.items()),
                 ["fit error (median / max, relative)", f"{float(np.median(errors)):.1%} / {errors.max():.1%}"]],
                left=["parameter"], stderr=True)
    say(f"wrote {output}")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(command(calibrate))
