"""`simbench calibrate-decoder`: time a slice of a decoder LLM on the GPU at hand and write a hardware
profile whose dense-layer and attention rates are the measured ones."""

from __future__ import annotations

from pathlib import Path

import typer

from simbench.commands.common import FORCE_HELP, command, parse_counts, parse_model, print_table, say
from simbench.errors import InputError


def calibrate_decoder(
    output: Path = typer.Option(..., "-o", "--output", help="hardware profile YAML to write"),
    model: str = typer.Option("llama-3.1-8b", "--model", help="decoder model preset whose layers are timed"),
    base: str = typer.Option("h100-sxm", "--base", help="hardware preset or profile giving every other field"),
    layers: int = typer.Option(2, "--layers", min=1, help="layers in the timed slice"),
    lengths: str = typer.Option(None, "--lengths", help="comma-separated row lengths to time; the longest is held "
                                "out of the fit and predicted [default: 1024,2048,8192,32768,131072]"),
    tokens_per_step: int = typer.Option(8192, "--tokens-per-step", min=1,
                                        help="shorter rows are batched up to this many tokens"),
    device: str = typer.Option("cuda", "--device", help="cuda[:N] (cpu works, for small models)"),
    repeats: int = typer.Option(5, "--repeats", min=1),
    seed: int = typer.Option(0, "--seed", min=0),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Time a few layers of a decoder LLM on rows of several lengths and fit its two rates."""
    from simbench.atomic import check_output_file
    from simbench.calibrate.run_setup import import_torch
    from simbench.costmodels.hardware import load_hardware, profile_to_yaml

    # The options are checked before torch is needed, so a mistake in them reads the same without it.
    if output.is_dir():
        raise InputError("the output is a folder; give a .yaml file name", source=str(output))
    check_output_file(output, inputs=[Path(base)], force=force)
    base_profile = load_hardware(base)
    row_lengths = None if lengths is None else parse_counts(lengths, "--lengths")
    import_torch()
    from simbench.atomic import atomic_file
    from simbench.calibrate.decoder import DEFAULT_LENGTHS, calibrate_decoder as calibrate, decoder_profile

    if row_lengths is None:
        row_lengths = DEFAULT_LENGTHS
    calibration = calibrate(parse_model(model), layers, row_lengths, device, seed,
                            repeats=repeats, tokens_per_step=tokens_per_step)
    with atomic_file(output, replace=force) as temporary:
        temporary.write_text(profile_to_yaml(decoder_profile(calibration, base_profile)))
    print_table(f"{calibration.model}, {calibration.layers} layer(s) on {calibration.device_name}",
                ("rows", "tokens", "longest", "measured ms", "predicted ms", "error %", "role"),
                [(row["kind"], f"{row['row_tokens']:,}", f"{row['longest']:,}",
                  f"{1e3 * row['measured_seconds']:.2f}", f"{1e3 * row['predicted_seconds']:.2f}",
                  f"{100 * row['error']:+.1f}", _role(row, calibration))
                 for row in calibration.errors()], left=("rows", "role"))
    say(f"dense layers {calibration.linear_flops_per_s / 1e12:.3g} TFLOP/s, causal attention "
        f"{calibration.attention_flops_per_s / 1e12:.3g} TFLOP/s; the {calibration.held_out_length:,}-token step "
        f"predicted within {calibration.held_out_error:+.1%} by the other lengths alone; wrote {output}")


def _role(row: dict, calibration) -> str:
    if not row["fitted"]:
        return "predicted"
    if row["longest"] == calibration.held_out_length:
        return f"fitted; {calibration.held_out_error:+.1%} when predicted from the others"
    return "fitted"


def register(app: typer.Typer) -> None:
    app.command("calibrate-decoder")(command(calibrate_decoder))
