"""`simbench calibrate` fits a hardware profile to real torch training steps; `simbench measure`
times each strategy for real and compares the speed-ups with the cost model's prediction.

torch is an optional extra: it is imported inside the commands, so the rest of the CLI works without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer
import yaml
from rich.console import Console
from rich.table import Table

from simbench.commands.common import command, parse_model, print_json_lines, progress_bar
from simbench.errors import InputError

TORCH_MISSING = "torch is not installed: pip install 'simbench[torch]'"
DEFAULT_MAX_LENGTH = 128  # long enough for packing to matter, short enough for a CPU run in minutes
WALL_CLOCK_HELP = "time single-threaded CPU steps by the wall clock instead of the process's CPU seconds"
MEASURE_TABLE = "measured_vs_predicted.csv"
UNPADDED_HELP = ("un-padded attention: grouped (one call per length), jagged (nested tensors) or flash_varlen; "
                 "default: flash_varlen or jagged on CUDA, grouped on CPU")


def calibrate(
    output: Path = typer.Option(..., "-o", "--output", help="hardware profile YAML to write"),
    device: str = typer.Option(None, "--device", help="cpu or cuda[:N]; default: cuda when available"),
    model: str = typer.Option("tiny", "--model",
                              help="model preset (tiny, mini, bert-base) or dimensions "
                                   "layers=2,hidden=128,heads=2,ffn=512"),
    max_length: int = typer.Option(DEFAULT_MAX_LENGTH, "--max-length", min=8, help="row length of the timed batches"),
    threads: int = typer.Option(None, "--threads", min=1, help="torch CPU threads (default: torch's choice); recorded"),
    quick: bool = typer.Option(False, "--quick", help="few small batches, few repeats: seconds, for tests"),
    seed: int = typer.Option(0, "--seed", min=0),
    unpadded_attention: str = typer.Option(None, "--unpadded-attention", help=UNPADDED_HELP),
    wall_clock: bool = typer.Option(False, "--wall-clock", help=WALL_CLOCK_HELP),
) -> None:
    """Time padded, packed and un-padded training steps and fit the cost model's parameters to them."""
    _check_output_file(output)
    torch = _import_torch()
    from simbench.calibrate.calibration import CalibrationSettings, calibration_steps, run_calibration

    settings = CalibrationSettings(model=parse_model(model), max_length=max_length, device=_device(torch, device),
                                   threads=threads or torch.get_num_threads(), seed=seed, quick=quick,
                                   unpadded_attention=_unpadded_attention(unpadded_attention), wall_clock=wall_clock)
    settings.encoder_shape()
    with progress_bar(Console(stderr=True)) as progress:
        task = progress.add_task("calibrating", total=calibration_steps(settings))
        fit = run_calibration(settings, lambda: progress.advance(task))
    _write_profile(fit.profile, output)
    console = Console(stderr=True)
    console.print(_fit_table(fit))
    console.print(f"wrote {output}", highlight=False)


def measure(
    source: str = typer.Argument(..., metavar="SCENARIO_OR_HISTOGRAM",
                                 help="scenario YAML, histogram file or bundled histogram name"),
    device: str = typer.Option(None, "--device", help="cpu or cuda[:N]; default: cuda when available"),
    steps: int = typer.Option(16, "--steps", min=1, help="timed batches per strategy"),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="rows (sequences or packs) per batch"),
    repeats: int = typer.Option(3, "--repeats", min=1,
                                help="timings of every batch (round load factored out, then the median)"),
    profile_path: Path = typer.Option(None, "--profile",
                                      help="calibrated profile; default: calibrate on held-out batches "
                                           "timed alongside"),
    model: str = typer.Option("tiny", "--model", help="model preset or dimensions, as for calibrate"),
    max_length: int = typer.Option(DEFAULT_MAX_LENGTH, "--max-length", min=8,
                                   help="row length; longer histograms are rescaled to it"),
    threads: int = typer.Option(None, "--threads", min=1, help="torch CPU threads (default: torch's choice)"),
    seed: int = typer.Option(None, "--seed", min=0, help="default: the scenario's seed, else 0"),
    quick: bool = typer.Option(False, "--quick", help="without --profile: a quick calibration (seconds, for tests)"),
    unpadded_attention: str = typer.Option(None, "--unpadded-attention", help=UNPADDED_HELP),
    wall_clock: bool = typer.Option(False, "--wall-clock", help=WALL_CLOCK_HELP),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object per strategy"),
    output_dir: Path = typer.Option(None, "-o", "--output", help="folder for the CSV, the plot and the settings"),
) -> None:
    """Run real training steps per strategy and compare realized speed-ups with the cost model's."""
    torch = _import_torch()
    from simbench.calibrate.calibration import CalibrationSettings, fit_calibration, prepare_calibration
    from simbench.calibrate.measure import MeasureSettings, compare, measure_steps, rescale_histogram, \
        per_step_speedups, strategy_layouts, time_strategies
    from simbench.calibrate.plot import plot_measured_vs_predicted
    from simbench.costmodels.hardware import load_hardware, profile_to_yaml
    from simbench.report.folder import check_replaceable
    from simbench.atomic import atomic_directory

    histogram, scenario_seed = _histogram_and_seed(source)
    output_dir = output_dir or Path(f"measure-{histogram.name}")
    # Checked before minutes of timing; and never swap away a folder that is not an earlier result.
    check_replaceable(output_dir, option="-o")
    spec = parse_model(model)
    if max_length > spec.max_positions:
        raise InputError(f"--max-length {max_length} exceeds the model's {spec.max_positions} positions")
    seed = scenario_seed if seed is None else seed
    device = _device(torch, device)
    threads = threads or torch.get_num_threads()
    console = Console(stderr=True)
    scaled = rescale_histogram(histogram, max_length)
    if scaled is not histogram:
        console.print(f"lengths of {histogram.name} (max {histogram.max_length}) rescaled by "
                      f"{max_length}/{histogram.max_length} to fit max length {max_length}", highlight=False)
    given_profile = load_hardware(profile_path) if profile_path is not None else None
    if given_profile is not None and unpadded_attention is None and given_profile.calibration:
        # Run un-padded attention the way the profile was calibrated, so its group term applies.
        unpadded_attention = given_profile.calibration.get("unpadded_attention")
    settings = MeasureSettings(model=spec, max_length=max_length, device=device, threads=threads, steps=steps,
                               batch_size=batch_size, repeats=repeats, seed=seed,
                               unpadded_attention=_unpadded_attention(unpadded_attention), wall_clock=wall_clock)
    layouts = strategy_layouts(scaled, settings, _rng(seed))
    calibration = None
    calibration_layouts, calibration_batches = [], []
    if profile_path is None:
        # Its own seed: the profile is fitted on other batches than the ones it is checked on.
        calibration = CalibrationSettings(model=spec, max_length=max_length, device=device, threads=threads,
                                          seed=seed + 1000, quick=quick,
                                          unpadded_attention=settings.unpadded_attention, wall_clock=wall_clock)
        calibration_layouts, calibration_batches = prepare_calibration(calibration)
    with progress_bar(Console(stderr=True)) as progress:
        task = progress.add_task("timing", total=measure_steps(settings, len(layouts), len(calibration_batches)))
        measured, calibration_timings, calibration_seconds = time_strategies(
            layouts, settings, lambda: progress.advance(task), calibration_batches)
    calibrated = None
    if calibration is not None:
        calibrated = fit_calibration(calibration, calibration_layouts, calibration_timings,
                                     calibration_seconds).profile
    profile = calibrated or given_profile
    table = compare(measured, spec, profile)
    title = (f"{spec.name} encoder, {scaled.name}, {steps} steps x {batch_size} rows, "
             f"{profile.calibration.get('device_name', device) if profile.calibration else device}")
    with atomic_directory(output_dir, option="-o") as folder:
        table.to_csv(folder / MEASURE_TABLE, index=False)
        per_step_speedups(measured).to_csv(folder / "steps.csv", index=False)
        plot_measured_vs_predicted(table, folder / "measured_vs_predicted.png", title)
        (folder / "timings.json").write_text(json.dumps(_timings_record(measured), indent=1))
        (folder / "settings.yaml").write_text(yaml.safe_dump(_settings_record(settings, source, scaled, profile_path),
                                                             sort_keys=False))
        if calibrated is not None:
            (folder / "profile.yaml").write_text(profile_to_yaml(calibrated))
    if as_json:
        columns = ["strategy", "measured_speedup", "predicted_speedup", "error", "measured_step_seconds",
                   "predicted_step_seconds", "predicted_compute_seconds", "predicted_padding_seconds",
                   "predicted_overhead_seconds", "measured_tokens_per_s", "predicted_tokens_per_s"]
        print_json_lines(table[columns].to_dict(orient="records"))
    else:
        Console().print(_comparison_table(table))
    console.print(f"wrote {output_dir}/measured_vs_predicted.csv and .png, per-step speed-ups in steps.csv",
                  highlight=False)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(command(calibrate))
    app.command("measure")(command(measure))


def _import_torch():
    try:
        import torch
    except ImportError:
        raise InputError(TORCH_MISSING) from None
    return torch


def _device(torch, requested: str | None) -> str:
    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested != "cpu" and not requested.startswith("cuda"):
        raise InputError(f"--device must be cpu or cuda[:N], found {requested!r}")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {requested}: this torch build sees no CUDA device")
    return requested


def _unpadded_attention(name: str | None) -> str | None:
    from simbench.calibrate.batches import UNPADDED_ATTENTION

    if name is not None and name not in UNPADDED_ATTENTION:
        raise InputError(f"--unpadded-attention must be one of {', '.join(UNPADDED_ATTENTION)}, found {name!r}")
    return name


def _histogram_and_seed(source: str):
    from simbench.histogram import load_histogram

    if source.endswith((".yaml", ".yml")):
        from simbench.scenario import load_scenario

        scenario = load_scenario(Path(source))
        return scenario.dataset.load(), scenario.seed
    return load_histogram(source), 0


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check_output_file(path: Path) -> None:
    if path.is_dir():
        raise InputError("is a folder; -o names the profile file to write", source=str(path))
    blocking = next((parent for parent in path.absolute().parents if parent.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise InputError(f"cannot write the profile: {blocking} is a file, not a folder", source=str(path))


def _write_profile(profile, path: Path) -> None:
    from simbench.costmodels.hardware import profile_to_yaml
    from simbench.atomic import atomic_file

    with atomic_file(path) as temporary:
        temporary.write_text(profile_to_yaml(profile))


def _settings_record(settings, source: str, histogram, profile_path: Path | None) -> dict:
    return {"source": source, "histogram": histogram.name, "model": settings.model.name,
            "max_length": settings.max_length, "device": settings.device, "threads": settings.threads,
            "steps": settings.steps, "batch_size": settings.batch_size, "repeats": settings.repeats,
            "warmup": settings.warmup, "seed": settings.seed, "unpadded_attention": _resolved_attention(settings),
            "clock": "process CPU seconds" if settings.cpu_clock else "wall-clock seconds",
            "profile": (str(profile_path) if profile_path
                        else "calibrated in the same run on held-out batches (profile.yaml)")}


def _timings_record(measured) -> dict:
    """Every timed batch (its rows of lengths and slots) with its median seconds, per strategy."""
    return {name: [{"mode": layout.mode.value, "rows": [list(row) for row in layout.rows],
                    "row_slots": list(layout.row_slots), "median_seconds": float(seconds)}
                   for layout, seconds in zip(layouts, measured.seconds[name])]
            for name, layouts in measured.layouts.items()}


def _resolved_attention(settings) -> str:
    from simbench.calibrate.calibration import default_unpadded_attention

    return settings.unpadded_attention or default_unpadded_attention(settings.device)


def _fit_table(fit) -> Table:
    table = Table(title="fitted parameters")
    table.add_column("parameter")
    table.add_column("value", justify="right")
    for name, value in fit.parameters.items():
        table.add_row(name, f"{value:.4g}")
    errors = abs(fit.relative_errors)
    table.add_row("fit error (median / max, relative)", f"{float(np.median(errors)):.1%} / {errors.max():.1%}")
    return table


def _comparison_table(frame) -> Table:
    table = Table(title="realized speed-up over padding: measured vs predicted")
    for column in ("strategy", "measured", "predicted", "error", "step ms measured", "step ms predicted"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for row in frame.itertuples():
        table.add_row(row.strategy, f"{row.measured_speedup:.3f}", f"{row.predicted_speedup:.3f}", f"{row.error:+.1%}",
                      f"{row.measured_step_seconds * 1e3:.1f}", f"{row.predicted_step_seconds * 1e3:.1f}")
    errors = frame.loc[frame["strategy"] != "padding", "error"].abs()
    if len(errors):
        table.caption = (f"|error| over the strategies other than padding: median {errors.median():.1%} "
                         f"(target 5 %), largest {errors.max():.1%} (target 10 %)")
    return table
