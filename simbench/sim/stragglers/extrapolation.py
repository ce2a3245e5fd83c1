"""A cluster's per-step Gumbel fit, from the packing paper, given numbers, per-step samples or an MLPerf
log, and its extrapolation to other cluster sizes through the single-device Gumbel behind it.

    >>> from simbench.sim.stragglers.extrapolation import extrapolate, paper_fit
    >>> extrapolate(paper_fit(), [8]).table["devices"].tolist()
    [8]
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simbench.sim.stragglers import gumbel
from simbench.errors import InputError, read_text_file

SPEEDUP = "speed-up"


@dataclass(frozen=True)
class ClusterFit:
    """A right-skewed Gumbel of a cluster's per-step value, measured on `devices` devices."""

    location: float
    scale: float
    devices: int
    unit: str  # what the value is: a speed-up, or a throughput such as "seq/s per GPU"
    origin: str  # where the fit comes from, in words


@dataclass(frozen=True)
class Extrapolation:
    fit: ClusterFit
    single_device: gumbel.GumbelFit
    table: pd.DataFrame  # devices, mean_speedup, median_speedup, mean_gain_percent

    def record(self) -> dict:
        """Everything as plain JSON-ready values."""
        fit = self.fit
        return {"unit": fit.unit, "origin": fit.origin,
                "cluster_fit": {"location": fit.location, "scale": fit.scale, "devices": fit.devices},
                "single_device": {"location": self.single_device.location, "scale": self.single_device.scale},
                "clusters": self.table.to_dict(orient="records")}


def paper_fit(devices: int | None = None) -> ClusterFit:
    """The packing paper's fit: un-padding over padding, NVIDIA MLPerf v0.7 on 8 GPUs."""
    return ClusterFit(gumbel.PAPER_LOCATION, gumbel.PAPER_SCALE, gumbel.PAPER_DEVICES if devices is None else devices,
                      SPEEDUP, "packing paper, un-padding over padding, NVIDIA MLPerf v0.7 on 8 GPUs")


def given_fit(location: float, scale: float, devices: int | None = None) -> ClusterFit:
    return ClusterFit(location, scale, gumbel.PAPER_DEVICES if devices is None else devices, SPEEDUP, "given")


def samples_fit(path: Path, column: str | None = None, devices: int | None = None) -> ClusterFit:
    """Fit per-step speed-ups read from a CSV column or a file of one number per line (one device by default)."""
    values = read_samples(path, column)
    fit = gumbel.fit_gumbel(values, side="right")
    origin = f"{path}{f' column {column}' if column else ''} ({values.size} steps)"
    return ClusterFit(fit.location, fit.scale, 1 if devices is None else devices, SPEEDUP, origin)


def log_fit(path: Path, after_step: int = 50, devices: int | None = None) -> ClusterFit:
    """Fit an MLPerf log's per-GPU throughput after warm-up (measured on the log's GPUs by default)."""
    from simbench.sim.stragglers.mlperf_logs import parse_mlperf_log

    run = parse_mlperf_log(path)
    samples = run.per_gpu_sequences_per_s(after_step)
    fit = gumbel.fit_gumbel(samples, side="right")
    origin = f"{path} ({run.gpus} GPUs, {samples.size} steps after step {after_step})"
    return ClusterFit(fit.location, fit.scale, run.gpus if devices is None else devices, "seq/s per GPU", origin)


def extrapolate(fit: ClusterFit, devices: Sequence[int]) -> Extrapolation:
    """The expected and median value on each device count, and the single-device Gumbel behind them."""
    table = gumbel.extrapolate_cluster_speedups(fit.location, fit.scale, fit.devices, tuple(devices))
    return Extrapolation(fit, gumbel.single_device_from_cluster(fit.location, fit.scale, fit.devices), table)


def read_samples(path: Path, column: str | None) -> np.ndarray:
    """Finite per-step values from a CSV column, or from a text file of one number per line."""
    text = read_text_file(path, "speed-up samples")
    if not text.strip():
        raise InputError("the file is empty; expected per-step speed-ups", source=str(path))
    try:
        if column is None:
            frame = pd.read_csv(io.StringIO(text), header=None, names=["value"], skip_blank_lines=True)
            column = "value"
        else:
            frame = pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise InputError(f"not a readable CSV: {str(error).strip()}", source=str(path)) from None
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
