"""`simbench measure`: time each strategy for real and compare the speed-ups with the cost model's prediction.

torch is an optional extra, imported inside the library call, so the rest of the CLI works without it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from simbench.calibrate.run_setup import DEFAULT_MAX_LENGTH
from simbench.commands.common import (UNPADDED_HELP, WALL_CLOCK_HELP, advancing, command, parse_model,
                                      parse_strategies, print_json_lines, print_table, progress_bar, say,
                                      stage_lines, step_lines, stdout_to_stderr)


STRATEGY_HELP = ("strategy to measure instead (repeat the option, or separate by commas), written as for simulate: "
                 "none, sort, spfhp:3, packed-varlen:lpfhp, unpad, lpfhp:max:attention=dense-mask, token-budget, "
                 "group-by-length...")
REPEATS_HELP = ("timings of every batch (round load factored out, then the median), at least 2: the noise that judges "
                "the errors is their spread; default: as the budget allows, 2-5")
MAX_LENGTH_HELP = (f"row length; longer lengths are rescaled to it (said on stderr); default: the histogram's own on a "
                   f"GPU, at most {DEFAULT_MAX_LENGTH} on a CPU")


def measure(
    source: str = typer.Argument(..., metavar="SCENARIO_OR_HISTOGRAM",
                                 help="scenario YAML or bundled scenario (its strategies are measured), or a "
                                      "histogram file or bundled histogram name (padding, sort, lpfhp, unpadding)"),
    strategy: list[str] = typer.Option(None, "--strategy", "-s", help=STRATEGY_HELP),
    device: str = typer.Option(None, "--device", help="cpu or cuda[:N]; default: cuda when available"),
    seconds: float = typer.Option(None, "--seconds",
                                  help="time budget that sizes --steps and --repeats where not given (said on stderr); "
                                       "default 120 on a GPU, 60 on a CPU"),
    steps: int = typer.Option(None, "--steps", help="timed batches per strategy; default: as the budget allows"),
    batch_size: int = typer.Option(None, "--batch-size",
                                   help="rows (sequences or packs) per batch; default: a scenario's batch_size, else 16"),
    repeats: int = typer.Option(None, "--repeats", help=REPEATS_HELP),
    profile_path: Path = typer.Option(None, "--profile",
                                      help="calibrated profile; default: calibrate on held-out batches "
                                           "timed alongside"),
    model: str = typer.Option(None, "--model",
                              help="model preset or dimensions, as for calibrate; default: a scenario's own model on "
                                   "cuda, on a CPU its family's small stand-in (tiny, or tiny-decoder for a decoder), "
                                   "and tiny for a histogram"),
    layers: int = typer.Option(None, "--layers", help="time the model's first LAYERS layers only (e.g. 4 of a "
                                                      "decoder LLM's on one GPU)"),
    max_length: int = typer.Option(None, "--max-length", help=MAX_LENGTH_HELP),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads (default: torch's choice)"),
    seed: int = typer.Option(None, "--seed", help="default: the scenario's seed, else 0"),
    quick: bool = typer.Option(False, "--quick", help="without --profile: a quick calibration (seconds, for tests)"),
    unpadded_attention: str = typer.Option(None, "--unpadded-attention", help=UNPADDED_HELP),
    wall_clock: bool = typer.Option(False, "--wall-clock", help=WALL_CLOCK_HELP),
    as_json: bool = typer.Option(False, "--json",
                                 help="JSON lines: one JSON object per strategy (only JSON on stdout)"),
    output_dir: Path = typer.Option(None, "-o", "--output", help="folder for the CSV, the plot and the settings"),
) -> None:
    """Run real training steps per strategy and compare realized speed-ups with the cost model's, at first
    sight of each batch shape and repeated."""
    from rich.console import Console

    from simbench.calibrate.measure_run import MEASURE_COLUMNS, measure_strategies

    spec = parse_model(model) if model is not None else None
    console = Console(stderr=True)
    # Libraries that print (HiGHS's banner, from C) must not mix with the JSON lines.
    with stdout_to_stderr(as_json), progress_bar(console) as progress:
        run = measure_strategies(source, output_dir=output_dir, model=spec, layers=layers, device=device,
                                 steps=steps, batch_size=batch_size, repeats=repeats, seconds=seconds,
                                 profile_path=profile_path, max_length=max_length, threads=threads, seed=seed,
                                 quick=quick, unpadded_attention=unpadded_attention, wall_clock=wall_clock,
                                 strategies=parse_strategies(strategy), note=say,
                                 progress=step_lines(stage_lines(console), "timed")
                                 or advancing(progress, progress.add_task("timing")))
    if as_json:
        print_json_lines(run.table[MEASURE_COLUMNS].to_dict(orient="records"))
    else:
        _print_comparison(run.table, run.baseline)
    _say_outcome(run)


def _say_outcome(run) -> None:
    """What a run found beyond its table, on stderr: problems, the verdict, the noise fitted, the files."""
    for row in run.table[run.table["problem"] != ""].itertuples():
        say(f"{row.strategy}: {row.problem}")
    say(run.verdict.message)
    if run.noise is not None:
        say(f"un-padded step noise: CV {run.noise.cv:.3f} beyond the priced work, fitted on {run.noise.steps} steps "
            f"(measured over predicted {run.noise.spread_cv:.3f}, less timing noise {run.noise.timing_noise_cv:.3f}); "
            f"in profile.yaml as unpadded_noise_cv for simulate and run")
    say(f"wrote {run.folder}/measured_vs_predicted.csv and .png, per-step speed-ups in steps.csv, "
        f"the profile with its fitted noise in profile.yaml")


def _print_comparison(frame, baseline: str) -> None:
    measured = frame[~frame["problem"].str.startswith("not measured")]
    errors = measured.loc[measured["strategy"] != baseline, "error"].abs().dropna()
    caption = (f"|error| over the strategies other than {baseline}: median {errors.median():.1%} "
               f"(target 5 %), largest {errors.max():.1%} (target 10 %); first sight: each step whose batch shape "
               f"was new to the process at its first step (new), the others as repeated") if len(errors) else None
    print_table(f"realized speed-up over {baseline}: measured vs predicted, repeated and at first sight",
                ["strategy", "measured", "predicted", "error", "noise", "new", "first sight measured",
                 "first sight predicted", "first sight error", "step ms measured", "step ms predicted"],
                ([row.strategy, f"{row.measured_speedup:.3f}", f"{row.predicted_speedup:.3f}", f"{row.error:+.1%}",
                  f"{row.speedup_noise:.1%}", f"{row.new_shape_steps:.0f}", f"{row.measured_first_sight_speedup:.3f}",
                  f"{row.predicted_first_sight_speedup:.3f}", f"{row.first_sight_error:+.1%}",
                  f"{row.measured_step_seconds * 1e3:.1f}", f"{row.predicted_step_seconds * 1e3:.1f}"]
                 for row in measured.itertuples()), left=["strategy"], caption=caption)


def register(app: typer.Typer) -> None:
    app.command("measure")(command(measure))
