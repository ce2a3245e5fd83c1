"""Whole calibration runs, as `simbench calibrate` starts them: settings from plain values, the timing with a
progress callback, and the profile (and a grid's raw timings) each writes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from simbench.calibrate.run_setup import (DEFAULT_MAX_LENGTH, Progress, check_profile_output,
                                          check_unpadded_attention, import_torch, resolve_device)
from simbench.errors import InputError

def calibrate_profile(output: Path, *, model, max_length: int = DEFAULT_MAX_LENGTH, device: str | None = None,
                      threads: int | None = None, seed: int = 0, quick: bool = False,
                      unpadded_attention: str | None = None, wall_clock: bool = False,
                      progress: Progress = lambda total: None, force: bool = False):
    """Time padded, packed and un-padded steps, fit a profile to them and write it to `output` (YAML); an
    existing file at `output` is replaced only with `force`."""
    check_profile_output(output, force=force)
    torch = import_torch()
    from simbench.atomic import atomic_file
    from simbench.calibrate.calibration import CalibrationSettings, calibration_steps, run_calibration
    from simbench.costmodels.hardware import profile_to_yaml

    device = resolve_device(device)
    settings = CalibrationSettings(model=model, max_length=max_length, device=device,
                                   threads=torch.get_num_threads() if threads is None else threads, seed=seed, quick=quick,
                                   unpadded_attention=check_unpadded_attention(unpadded_attention, device),
                                   wall_clock=wall_clock)
    settings.encoder_shape()
    total = calibration_steps(settings)
    fit = run_calibration(settings, lambda: progress(total))
    with atomic_file(output, replace=force, option="-o") as temporary:
        temporary.write_text(profile_to_yaml(fit.profile))
    return fit


@dataclass(frozen=True)
class GridRun:
    fit: object  # gridfit.GridFit: the fitted profile, its predictions and held-out errors
    profile: object  # the HardwareProfile written
    grid_path: Path  # the raw timings, in the grid's JSON-lines format
    device_name: str


def grid_timings_path(output: Path) -> Path:
    """Where `calibrate --grid` writes a profile's raw timings: beside it, `profile.yaml` -> `profile.grid.jsonl`."""
    return output.with_name(f"{output.stem}.grid.jsonl")


def calibrate_grid(output: Path, *, model, layers: int | None = None, device: str | None = None,
                   threads: int | None = None, seed: int = 0, quick: bool = False,
                   unpadded_attention: str | None = None, wall_clock: bool = False, base=None,
                   progress: Progress = lambda total: None, force: bool = False) -> GridRun:
    """Time the primitive-shape grid of `model`'s layers on the device, write the raw timings beside `output`
    (`grid_timings_path`), fit the profile's GPU terms on them with `gridfit` and write the profile.

    `base` gives every field the grid does not fit (default: h200 on a GPU; on a CPU a profile with no
    optimizer, transfer or communication cost). `layers` defaults to the model's (at most 4 of a decoder's).
    Existing files at `output` or beside it are replaced only with `force`.
    """
    base_inputs = [Path(base)] if isinstance(base, str | Path) else []
    check_profile_output(output, inputs=base_inputs, force=force)
    check_profile_output(grid_timings_path(output), inputs=[*base_inputs, output], force=force)
    torch = import_torch()
    from simbench.atomic import atomic_file
    from simbench.calibrate.grid import GRID_RECORD_FIELDS, GridSettings, time_grid
    from simbench.calibrate.grid_timings import load_timing_grid
    from simbench.calibrate.gridfit import fit_grid, fitted_profile
    from simbench.calibrate.timing import device_description, training_precision, uses_cpu_clock
    from simbench.costmodels.hardware import load_hardware, profile_to_yaml
    from simbench.costmodels.model import MODEL_PRESETS

    if MODEL_PRESETS.find(model.name) != model:
        raise InputError(f"model must be a preset for a timing grid (its lines name the preset, so that any machine "
                         f"can fit them): one of {', '.join(MODEL_PRESETS)}, not dimensions", parameter="model")
    device = resolve_device(device)
    threads = torch.get_num_threads() if threads is None else threads
    attention = check_unpadded_attention(unpadded_attention, device) or _grid_attention(device)
    layers = layers if layers is not None else min(model.layers, 4) if model.is_decoder else model.layers
    settings = GridSettings(model=model, layers=layers, device=device, threads=threads, repeats=3 if quick else 7,
                            seed=seed, quick=quick, attention=attention,
                            cpu_clock=uses_cpu_clock(device, threads, wall_clock))
    shapes = settings.shapes()
    settings.check_work(shapes)  # before a base profile is read or anything is built
    torch.set_num_threads(threads)
    machine = device_description(device)
    base_profile = load_hardware(base if base is not None else "h200" if device.startswith("cuda")
                                 else _cpu_base(machine))
    records = time_grid(settings, lambda: progress(len(shapes)))
    grid_path = grid_timings_path(output)
    with atomic_file(grid_path, replace=force, option="-o") as temporary:
        temporary.write_text("".join(json.dumps({key: record[key] for key in GRID_RECORD_FIELDS}) + "\n"
                                     for record in records))
    # Fitted from the file as written, as `calibrate --timings` would fit it on another machine.
    fit = fit_grid(load_timing_grid(grid_path), base_profile)
    source = f"simbench calibrate --grid on {machine['device_name']} ({grid_path.name})"
    profile = fitted_profile(fit, base_profile, source)
    record = {**profile.calibration, **machine, "model": model.name, "layers": layers,
              "precision": "bfloat16" if device.startswith("cuda") else training_precision(device),
              "unpadded_attention": attention, "clock": "process CPU seconds" if settings.cpu_clock
              else "wall-clock seconds", "grid_file": grid_path.name}
    profile = profile.model_copy(update={"name": f"{base_profile.name} grid {machine['device_name']}",
                                         "source": f"{base_profile.source} Grid terms fitted: {source}",
                                         "calibration": record})
    with atomic_file(output, replace=force, option="-o") as temporary:
        temporary.write_text(profile_to_yaml(profile))
    return GridRun(fit, profile, grid_path, machine["device_name"])


def _grid_attention(device: str) -> str:
    """torch's varlen kernel on CUDA where this torch has it (as the H200 grid ran), else measure's default."""
    from simbench.calibrate.calibration import default_unpadded_attention

    if device.startswith("cuda"):
        try:
            from torch.nn.attention.varlen import varlen_attn  # noqa: F401
        except ImportError:
            return default_unpadded_attention(device)
        return "torch_varlen"
    return default_unpadded_attention(device)


def _cpu_base(machine: dict):
    """A profile for a CPU grid to complete: rates to be fitted, and no optimizer, transfer or communication cost."""
    from simbench.costmodels.hardware import HardwareProfile

    return HardwareProfile(name="cpu", source=(f"{machine['device_name']}, torch {machine['torch_version']}, "
                                               f"{machine['threads']} threads; no optimizer, transfer or "
                                               "communication cost (a CPU timing grid has none)."),
                           linear_flops_per_s=1e9, attention_flops_per_s=1e9, host_to_device_bytes_per_s=float("inf"))
