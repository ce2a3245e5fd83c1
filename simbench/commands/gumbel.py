"""`simbench gumbel`: extrapolate a measured per-step speed-up spread to larger clusters.

Defaults to the packing paper's 8-GPU fit; `--log` fits an MLPerf log's per-GPU throughput instead.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from simbench.commands.simulate import parse_device_counts
from simbench.errors import InputError

DEFAULT_DEVICES = "1,2,4,8,16,32,64,128,256,512,1024,2048"


def gumbel(
    log: Path = typer.Option(None, "--log", help="MLPerf BERT result log (.txt or .txt.gz): fit its per-GPU seq/s "
                             "(right-skewed Gumbel, as the paper fits speed-ups)"),
    location: float = typer.Option(None, "--location", help="Gumbel location of the cluster's per-step speed-up"),
    scale: float = typer.Option(None, "--scale", help="Gumbel scale of the cluster's per-step speed-up"),
    fit_devices: int = typer.Option(None, "--fit-devices", help="devices the fit was measured on [default: 8, or the log's GPUs]"),
    devices: str = typer.Option(DEFAULT_DEVICES, "--devices", help="comma-separated device counts to extrapolate to"),
    after_step: int = typer.Option(50, "--after-step", help="with --log: skip warm-up steps up to this one"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Single-device Gumbel behind a cluster fit, and the expected cluster speed-up per device count."""
    from simbench.costmodels import gumbel as model

    device_counts = tuple(parse_device_counts(devices))
    if fit_devices is not None and fit_devices < 1:
        raise InputError(f"--fit-devices must be at least 1, found {fit_devices}")
    if log is not None:
        if location is not None or scale is not None:
            raise InputError("give either --log or --location/--scale, not both")
        from simbench.costmodels.mlperf import parse_mlperf_log

        run = parse_mlperf_log(log)
        samples = run.per_gpu_sequences_per_s(after_step)
        fit = model.fit_gumbel(samples, side="right")
        location, scale = fit.location, fit.scale
        fit_devices = fit_devices or run.gpus
        unit = "seq/s per GPU"
        origin = f"{log} ({run.gpus} GPUs, {samples.size} steps after step {after_step})"
    else:
        if (location is None) != (scale is None):
            raise InputError("--location and --scale go together")
        if location is None:
            location, scale = model.PAPER_LOCATION, model.PAPER_SCALE
            origin = "packing paper, un-padding over padding, NVIDIA MLPerf v0.7 on 8 GPUs"
        else:
            origin = "given"
        fit_devices = fit_devices or model.PAPER_DEVICES
        unit = "speed-up"
    if not math.isfinite(location):
        raise InputError(f"--location must be a finite number, found {location}")
    if not (math.isfinite(scale) and scale > 0):
        raise InputError(f"--scale must be positive and finite, found {scale}")
    single = model.single_device_from_cluster(location, scale, fit_devices)
    table = model.extrapolate_cluster_speedups(location, scale, fit_devices, device_counts)
    if as_json:
        print(json.dumps({
            "unit": unit, "origin": origin,
            "cluster_fit": {"location": location, "scale": scale, "devices": fit_devices},
            "single_device": {"location": single.location, "scale": single.scale},
            "clusters": table.to_dict(orient="records"),
        }, indent=2))
        return
    console = Console()
    console.print(f"cluster fit ({origin}): location {location:.4f}, scale {scale:.4f} on {fit_devices} devices")
    console.print(f"single device: location {single.location:.4f}, scale {single.scale:.4f} ({unit})")
    # A gain over the baseline only means something for speed-ups, not for raw throughputs.
    show_gain = log is None
    rich_table = Table("devices", f"mean {unit}", f"median {unit}", *(["mean gain %"] if show_gain else []))
    for row in table.itertuples():
        gain = [f"{row.mean_gain_percent:.1f}"] if show_gain else []
        rich_table.add_row(str(row.devices), f"{row.mean_speedup:.4f}", f"{row.median_speedup:.4f}", *gain)
    console.print(rich_table)


def register(app: typer.Typer) -> None:
    app.command()(gumbel)
