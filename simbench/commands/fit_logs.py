"""`simbench fit-logs`: fit a hardware profile on training logs, predict other logs, print the errors."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from simbench.commands.common import FORCE_HELP, command, field_values, print_json_lines

FREE_HELP = ("comma-separated profile fields to fit: unpadded_flops_fraction, unpadded_noise_cv, "
             "unpad_group_half_saturation_tokens (un-padding priced per length group), "
             "step_overhead_seconds (needs logs at two batch sizes), compute_rate_scale (one factor on the "
             "dense and attention FLOP/s); empty: fit nothing, only compare")
SET_HELP = ("hold a profile field at a value, FIELD=VALUE (repeatable), e.g. unpadded_flops_fraction=0.84 "
            "fitted on another GPU's logs")


def fit_logs(
    logs: list[Path] = typer.Argument(..., metavar="FIT_LOG...", help="logs to fit on: MLPerf result logs "
                                      "(.txt or .txt.gz) or per-step CSVs (gpus, per_gpu_batch, unpadded, seq/s)"),
    predict: list[Path] = typer.Option([], "--predict", help="a log to predict without fitting on it (repeatable)"),
    hardware: str = typer.Option("a100", "--hardware", help="hardware preset or profile YAML to start from"),
    settings: list[str] = typer.Option([], "--set", help=SET_HELP),
    model: str = typer.Option("bert-large", "--model", help="model preset the logs trained"),
    histogram: str = typer.Option("wikipedia_512", "--histogram", help="length histogram of the logs' dataset"),
    free: str = typer.Option("unpadded_flops_fraction,unpadded_noise_cv", "--fit", help=FREE_HELP),
    after_step: int = typer.Option(50, "--after-step", min=0, help="skip warm-up steps up to this one"),
    steps: int = typer.Option(1000, "--steps", help="simulated steps per log"),
    seed: int = typer.Option(0, "--seed", min=0),
    output: Path = typer.Option(None, "-o", "--output", help="write the fitted hardware profile (YAML) here"),
    as_json: bool = typer.Option(False, "--json", help="JSON lines: one JSON object per table row"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Fit profile fields on some logs, then compare simbench with every log: fitted or predicted, and the error."""
    from rich.console import Console
    from rich.table import Table

    from simbench.atomic import atomic_file, check_output_file
    from simbench.calibrate.logfit import fit_logs as fit
    from simbench.costmodels.hardware import load_hardware, profile_to_yaml
    from simbench.sim.stragglers.mlperf_logs import read_training_log

    if output is not None:
        check_output_file(output, inputs=[*logs, *predict, Path(hardware), Path(histogram)], force=force)
    names = tuple(name.strip() for name in free.split(",") if name.strip())
    profile = load_hardware(hardware, field_values(settings))
    result = fit([read_training_log(path) for path in logs], [read_training_log(path) for path in predict],
                 hardware=profile, model=model, histogram=histogram, free=names, after_step=after_step,
                 steps=steps, seed=seed)
    if output is not None:
        with atomic_file(output, replace=force) as temporary:
            temporary.write_text(profile_to_yaml(result.profile))
    if not result.unmatched.empty:
        misses = "; ".join(f"{_run_label(row)} {row.quantity} {row.error_percent:+.1f} %"
                           for row in result.unmatched.itertuples())
        Console(stderr=True).print(f"warning: the fit did not match every log it was fitted on ({misses}): the fitted "
                                   "fields cannot reach them (batch content alone may spread steps more than the "
                                   "log does, fixed costs may bound the throughput); fit other fields or check the "
                                   "logs' setup", highlight=False, soft_wrap=True)
    if as_json:
        print_json_lines(result.table.to_dict(orient="records"))
        return
    console = Console()
    for row in result.table.drop_duplicates("log").itertuples():
        console.print(f"{_run_label(row)}: {row.log}", highlight=False, soft_wrap=True)
    fitted = ", ".join(f"{name} = {value:.4g}" for name, value in result.fitted.items()) or "nothing"
    console.print(f"fitted: {fitted}", highlight=False, soft_wrap=True)
    table = Table("run", "quantity", "role", "simbench", "log", "error %")
    for row in result.table.itertuples():
        table.add_row(_run_label(row), row.quantity, row.role, f"{row.simbench:.4g}", f"{row.measured:.4g}",
                      "" if math.isnan(row.error_percent) else f"{row.error_percent:+.1f}")
    console.print(table)
    if output is not None:
        Console(stderr=True).print(f"wrote {output}", highlight=False)


def _run_label(row) -> str:
    return f"{row.gpus} x {row.per_gpu_batch} {row.execution}"


def register(app: typer.Typer) -> None:
    app.command("fit-logs")(command(fit_logs))
