"""`simbench gumbel`: extrapolate a measured per-step speed-up spread to larger clusters.

Defaults to the packing paper's 8-GPU fit; `--log` fits an MLPerf log's per-GPU throughput instead.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd

import typer
from rich.console import Console
from rich.table import Table

from simbench.commands.common import command, parse_counts
from simbench.errors import InputError, read_text_file
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
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Single-device Gumbel behind a cluster fit, and the expected cluster speed-up per device count."""
    from simbench.costmodels import gumbel as model

    device_counts = tuple(parse_counts(devices, "--devices"))
    if sum([log is not None, samples is not None, location is not None or scale is not None]) > 1:
        raise InputError("give one of --log, --samples or --location/--scale")
    if column is not None and samples is None:
        raise InputError("--column goes with --samples")
    if samples is not None:
        values = read_samples(samples, column)
        fit = model.fit_gumbel(values, side="right")
        location, scale = fit.location, fit.scale
        fit_devices = 1 if fit_devices is None else fit_devices
        unit = "speed-up"
        origin = f"{samples}{f' column {column}' if column else ''} ({values.size} steps)"
    elif log is not None:
        from simbench.costmodels.mlperf import parse_mlperf_log

        run = parse_mlperf_log(log)
        samples = run.per_gpu_sequences_per_s(after_step)
        fit = model.fit_gumbel(samples, side="right")
        location, scale = fit.location, fit.scale
        fit_devices = run.gpus if fit_devices is None else fit_devices
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
        fit_devices = model.PAPER_DEVICES if fit_devices is None else fit_devices
        unit = "speed-up"
    table = model.extrapolate_cluster_speedups(location, scale, fit_devices, device_counts)
    single = model.single_device_from_cluster(location, scale, fit_devices)
    if as_json:
        print(json.dumps({
            "unit": unit, "origin": origin,
            "cluster_fit": {"location": location, "scale": scale, "devices": fit_devices},
            "single_device": {"location": single.location, "scale": single.scale},
            "clusters": table.to_dict(orient="records"),
        }))
        return
    console = Console()
    console.print(f"cluster fit ({origin}): location {location:.4f}, scale {scale:.4f} on {fit_devices} devices")
    console.print(f"single device: location {single.location:.4f}, scale {single.scale:.4f} ({unit})")
    # A gain over the baseline only means something for speed-ups, not for raw throughputs.
    show_gain = unit == "speed-up"
    rich_table = Table("devices", f"mean {unit}", f"median {unit}", *(["mean gain %"] if show_gain else []))
    for row in table.itertuples():
        gain = [f"{row.mean_gain_percent:.1f}"] if show_gain else []
        rich_table.add_row(str(row.devices), f"{row.mean_speedup:.4f}", f"{row.median_speedup:.4f}", *gain)
    console.print(rich_table)


def read_samples(path: Path, column: str | None) -> np.ndarray:
    """Finite per-step values from a CSV column, or from a text file of one number per line."""
    text = read_text_file(path, "speed-up samples")
    if not text.strip():
        raise InputError("the file is empty; expected per-step speed-ups", source=str(path))
    if column is None:
        frame = pd.read_csv(io.StringIO(text), header=None, names=["value"], skip_blank_lines=True)
        column = "value"
    else:
        frame = pd.read_csv(io.StringIO(text))
        if column not in frame.columns:
            raise InputError(f"no column {column!r}; columns: {', '.join(map(str, frame.columns))}", source=str(path))
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = np.flatnonzero(~np.isfinite(values.to_numpy(dtype=float)))
    if bad.size:
        line = int(bad[0]) + (2 if column != "value" else 1)  # 1-based, after the header if there is one
        raise InputError(f"not a finite number: {frame[column].iloc[bad[0]]!r}", source=str(path), line=line)
    if values.size < 3:
        raise InputError(f"a Gumbel fit needs at least 3 samples, found {values.size}", source=str(path))
    return values.to_numpy(dtype=float)


def register(app: typer.Typer) -> None:
    app.command()(command(gumbel))
