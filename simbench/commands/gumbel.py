"""`simbench gumbel`: extrapolate a measured per-step speed-up spread to larger clusters.

Defaults to the packing paper's 8-GPU fit; `--log` fits an MLPerf log's per-GPU throughput instead.
"""

from __future__ import annotations

from pathlib import Path

import typer

from simbench.commands.common import command, parse_counts, print_json_lines, print_table, say
from simbench.errors import InputError
from simbench.validation import DEFAULT_DEVICES


def gumbel(
    log: Path = typer.Option(None, "--log", help="MLPerf BERT result log (.txt or .txt.gz): fit its per-GPU seq/s "
                             "(right-skewed Gumbel, as the paper fits speed-ups)"),
    samples: Path = typer.Option(None, "--samples", help="per-step speed-ups to fit: a CSV column (--column), e.g. "
                                 "`simbench measure`'s steps.csv, or a text file with one number per line"),
    column: str = typer.Option(None, "--column", help="with --samples: the CSV column, e.g. unpadding"),
    location: float = typer.Option(None, "--location", help="Gumbel location of the cluster's per-step speed-up"),
    scale: float = typer.Option(None, "--scale", help="Gumbel scale of the cluster's per-step speed-up"),
    fit_devices: int = typer.Option(None, "--fit-devices", help="devices the fit was measured on [default: 8, the "
                                    "log's GPUs, or 1 with --samples]"),
    devices: str = typer.Option(",".join(map(str, DEFAULT_DEVICES)), "--devices",
                                help="comma-separated device counts to extrapolate to"),
    after_step: int = typer.Option(50, "--after-step", help="with --log: skip warm-up steps up to this one"),
    as_json: bool = typer.Option(False, "--json", help="JSON lines: the fit as one JSON object on one line"),
) -> None:
    """Single-device Gumbel behind a cluster fit, and the expected cluster speed-up per device count."""
    from simbench.sim.stragglers import extrapolation

    device_counts = parse_counts(devices, "--devices")
    if sum([log is not None, samples is not None, location is not None or scale is not None]) > 1:
        raise InputError("give one of --log, --samples or --location/--scale")
    if column is not None and samples is None:
        raise InputError("--column goes with --samples")
    if (location is None) != (scale is None):
        raise InputError("--location and --scale go together")
    if samples is not None:
        fit = extrapolation.samples_fit(samples, column, fit_devices)
    elif log is not None:
        fit = extrapolation.log_fit(log, after_step, fit_devices)
    elif location is not None:
        fit = extrapolation.given_fit(location, scale, fit_devices)
    else:
        fit = extrapolation.paper_fit(fit_devices)
    result = extrapolation.extrapolate(fit, device_counts)
    if as_json:
        print_json_lines([result.record()])
        return
    single = result.single_device
    say(f"cluster fit ({fit.origin}): location {fit.location:.4f}, scale {fit.scale:.4f} on {fit.devices} devices",
        stderr=False)
    say(f"single device: location {single.location:.4f}, scale {single.scale:.4f} ({fit.unit})", stderr=False)
    # A gain over the baseline only means something for speed-ups, not for raw throughputs.
    show_gain = fit.unit == extrapolation.SPEEDUP
    print_table(None, ["devices", f"mean {fit.unit}", f"median {fit.unit}", *(["mean gain %"] if show_gain else [])],
                ([str(row.devices), f"{row.mean_speedup:.4f}", f"{row.median_speedup:.4f}",
                  *([f"{row.mean_gain_percent:.1f}"] if show_gain else [])] for row in result.table.itertuples()))


def register(app: typer.Typer) -> None:
    app.command()(command(gumbel))
