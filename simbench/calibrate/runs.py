"""Whole calibration and measurement runs, as `simbench calibrate` and `simbench measure` start them:
settings from plain values, the timing with a progress callback, and the files each run writes.

torch is imported inside the functions: without it each says how to install it, as an InputError.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from simbench.errors import InputError
from simbench.validation import check_choice, check_whole_number

TORCH_MISSING = "torch is not installed: pip install 'simbench-seq[torch]'"
DEFAULT_MAX_LENGTH = 128  # long enough for packing to matter, short enough for a CPU run in minutes
# What measure times on a CPU for a scenario's model of each family (model presets small enough for seconds).
CPU_STAND_INS = {"encoder": "tiny", "decoder": "tiny-decoder"}
MEASURE_TABLE = "measured_vs_predicted.csv"
MEASURE_COLUMNS = ["strategy", "mode", "measured_speedup", "predicted_speedup", "error", "speedup_noise", "run_valid",
                   "problem", "measured_step_seconds", "predicted_step_seconds", "predicted_compute_seconds",
                   "predicted_padding_seconds", "predicted_overhead_seconds", "measured_tokens_per_s",
                   "predicted_tokens_per_s", "new_shape_steps", "measured_first_sight_speedup",
                   "predicted_first_sight_speedup", "first_sight_error", "measured_first_sight_step_seconds",
                   "predicted_first_sight_step_seconds"]
# Called once per timed step with the run's total number of steps, e.g. to advance a progress bar.
Progress = Callable[[int], None]


def import_torch():
    try:
        import torch
    except ImportError:
        raise InputError(TORCH_MISSING) from None
    return torch


def resolve_device(requested: str | None) -> str:
    """`cpu` or `cuda[:N]`; None means cuda when torch sees a GPU, else cpu."""
    torch = import_torch()
    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested != "cpu" and not requested.startswith("cuda"):
        raise InputError(f"device must be cpu or cuda[:N], found {requested!r}", parameter="device")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device {requested}: this torch build sees no CUDA device", parameter="device")
    return requested


# Un-padded attention kernels that exist on CUDA only.
CUDA_ONLY_ATTENTION = ("flash_varlen", "torch_varlen")


def check_unpadded_attention(name: str | None, device: str | None = None) -> str | None:
    """The un-padded attention named, checked against the choices (and, given a device, against what runs there)."""
    from simbench.calibrate.batches import UNPADDED_ATTENTION

    if name is None:
        return None
    check_choice(name, "unpadded_attention", UNPADDED_ATTENTION)
    if device is not None and not device.startswith("cuda") and name in CUDA_ONLY_ATTENTION:
        raise InputError(f"unpadded_attention {name} runs on CUDA only, not on {device}; use grouped or jagged",
                         parameter="unpadded_attention")
    return name


def check_profile_output(path: Path, *, inputs=(), force: bool = False) -> None:
    """Refuse, before minutes of timing, a profile path that cannot be written, that is one of `inputs`, or
    (unless `force`) that exists."""
    from simbench.atomic import check_output_file

    if path.is_dir():
        raise InputError("is a folder; output names the profile file to write", source=str(path), parameter="output")
    check_output_file(path, inputs=inputs, force=force, option="output")
    blocking = next((parent for parent in path.absolute().parents if parent.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise InputError(f"cannot write the profile: {blocking} is a file, not a folder", source=str(path))


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
    with atomic_file(output, replace=force, option="output") as temporary:
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
    from simbench.calibrate.gridfit import fit_grid, fitted_profile, load_timing_grid
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
    with atomic_file(grid_path, replace=force, option="output") as temporary:
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
    with atomic_file(output, replace=force, option="output") as temporary:
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


@dataclass(frozen=True)
class MeasureRun:
    table: object  # pandas DataFrame: one row per strategy, measured against predicted (refused ones last)
    title: str  # model, histogram, steps and device, for tables and plots
    folder: Path  # where the run wrote its files
    verdict: object = None  # measure.Verdict: whether the timing noise lets the errors mean anything
    noise: object = None  # noisefit.NoiseFit of the un-padded steps, written into profile.yaml (None: not fitted)
    baseline: str = "padding"  # the strategy every speed-up is measured against
    refused: dict = field(default_factory=dict)  # strategy -> why it was not measured


def measured_model(source: str, model=None, device: str = "cpu", layers: int | None = None,
                   note: Callable[[str], None] = lambda message: None):
    """The `ModelSpec` measure times and prices: `model` if given; else for a scenario its model on CUDA, and on
    a CPU its family's small stand-in (`tiny` for an encoder, `tiny-decoder` for a decoder), said in a note;
    else `tiny`. `layers` times the first that many of its layers instead of all."""
    import dataclasses

    from simbench.costmodels.model import get_model

    scenario_model = _scenario_model(source)
    if model is None and scenario_model is not None and device.startswith("cuda"):
        model = scenario_model
    elif model is None and scenario_model is not None:
        model = get_model(CPU_STAND_INS[scenario_model.family])
        if model != scenario_model:
            note(f"timing {model.name}, the CPU stand-in for the scenario's {scenario_model.name} "
                 f"({scenario_model.family}): --model chooses another, --device cuda times {scenario_model.name}")
    elif model is None:
        model = get_model(CPU_STAND_INS["encoder"])
    if layers is not None:
        check_whole_number(layers, "layers", minimum=1)
        if layers > model.layers:
            raise InputError(f"layers {layers} is more than the {model.layers} of {model.name}", parameter="layers")
        model = dataclasses.replace(model, layers=layers)
    return model


def _scenario_model(source: str):
    """A scenario's model, None for a histogram."""
    from simbench.costmodels.model import get_model
    from simbench.scenario import bundled_scenarios, load_scenario

    if source.endswith((".yaml", ".yml")) or source in bundled_scenarios():
        return get_model(load_scenario(source).model)
    return None


def measure_strategies(source: str, *, output_dir: Path | None = None, model=None, layers: int | None = None,
                       device: str | None = None,
                       steps: int = 16, batch_size: int = 16, repeats: int = 3, profile_path: Path | None = None,
                       max_length: int = DEFAULT_MAX_LENGTH, threads: int | None = None, seed: int | None = None,
                       quick: bool = False, unpadded_attention: str | None = None, wall_clock: bool = False,
                       strategies: list[str] | None = None, progress: Progress = lambda total: None,
                       note: Callable[[str], None] = lambda message: None) -> MeasureRun:
    """Time real training steps of every strategy on a scenario's or histogram's lengths, compare the
    realized speed-ups with the cost model's prediction, at first sight of each shape and repeated, and write
    the folder (measure-<histogram> by default): the comparison CSV and plot, per-step speed-ups, raw timings,
    settings and the profile.

    The strategies are `strategies` (plan names as `simulate --strategy` takes them), else a scenario's, built
    from its histogram as the simulator builds them (`strategy_batches`; padding added as the baseline),
    else a histogram's four: padding, sort, lpfhp and unpadding. One that cannot be timed on one device is
    listed in the table with the reason. `model` and `layers` choose the model timed (`measured_model`: by
    default a scenario's own on CUDA, its family's small stand-in on a CPU); a decoder is timed as a causal LM
    (`causal_lm.CausalLM`) and priced with its decoder `ModelSpec`. Without `profile_path` a profile is
    calibrated on held-out batches
    timed in the same rounds (its first-sight costs from their first steps); the strategies' steps are
    never fitted on.
    """
    from simbench.calibrate.noisefit import check_measure_repeats

    check_measure_repeats(repeats)  # before torch is needed
    torch = import_torch()
    import numpy as np

    from simbench.calibrate.calibration import CalibrationSettings, fit_calibration, prepare_calibration
    from simbench.calibrate.measure import (MeasureSettings, compare, deepest_calibrated_pack, fit_unpadded_noise,
                                            judge, measure_steps, rescale_histogram, strategy_layouts,
                                            time_strategies)
    from simbench.costmodels.hardware import load_hardware
    from simbench.report.folder import check_replaceable

    histogram, scenario_seed, plans = _measure_source(source, strategies)
    output_dir = output_dir or Path(f"measure-{histogram.name}")
    # Checked before minutes of timing; and never swap away a folder that is not an earlier result.
    check_replaceable(output_dir, option="-o", inputs=[Path(source), profile_path])
    device = resolve_device(device)
    model = measured_model(source, model, device, layers, note)
    if max_length > model.max_positions:
        raise InputError(f"max_length {max_length} exceeds the model's {model.max_positions} positions",
                         parameter="max_length")
    seed = scenario_seed if seed is None else seed
    threads = torch.get_num_threads() if threads is None else threads
    scaled = rescale_histogram(histogram, max_length)
    if scaled is not histogram:
        note(f"lengths of {histogram.name} (max {histogram.max_length}) rescaled by "
             f"{max_length}/{histogram.max_length} to fit max length {max_length}")
    given_profile = load_hardware(profile_path) if profile_path is not None else None
    if model.is_decoder:
        unpadded_attention = _decoder_attention(unpadded_attention, device)
    elif given_profile is not None and unpadded_attention is None and given_profile.calibration:
        # Run un-padded attention the way the profile was calibrated, so its group term applies.
        unpadded_attention = given_profile.calibration.get("unpadded_attention")
    settings = MeasureSettings(model=model, max_length=max_length, device=device, threads=threads, steps=steps,
                               batch_size=batch_size, repeats=repeats, seed=seed,
                               unpadded_attention=check_unpadded_attention(unpadded_attention, device),
                               wall_clock=wall_clock, strategies=len(plans) + 1 if plans else 4)
    calibration = None
    calibration_layouts, calibration_batches = [], []
    if profile_path is None:
        # Its own seed: the profile is fitted on other batches than the ones it is checked on.
        calibration = CalibrationSettings(model=model, max_length=max_length, device=device, threads=threads,
                                          seed=seed + 1000, quick=quick,
                                          unpadded_attention=settings.unpadded_attention, wall_clock=wall_clock)
        calibration_layouts, calibration_batches = prepare_calibration(calibration)
        deepest = max(layout.max_depth for layout in calibration_layouts if layout.kind == "packed")
    else:
        deepest = deepest_calibrated_pack(given_profile)
    if plans is None:
        if deepest is not None:
            # Deeper packs would price packing's overhead by extrapolating the line fitted to these depths.
            settings = replace(settings, max_depth=deepest)
            note(f"lpfhp packs at most {deepest} sequences: the deepest calibrated")
        layouts, refused, baseline = strategy_layouts(scaled, settings, np.random.default_rng(seed)), {}, "padding"
    else:
        from simbench.calibrate.strategy_batches import strategy_batches

        built = strategy_batches(plans, scaled, max_length, steps, batch_size, seed)
        layouts, refused, baseline = built.layouts, built.refused, built.baseline
        _note_deep_packs(layouts, deepest, note)
    settings.check_layouts(layouts)
    total = measure_steps(settings, layouts, calibration_layouts)
    measured, calibration_steps = time_strategies(layouts, settings, lambda: progress(total), calibration_batches,
                                                  calibration_layouts, baseline)
    profile = given_profile
    if calibration is not None:
        fit = fit_calibration(calibration, calibration_layouts, calibration_steps.timings, calibration_steps.seconds)
        profile = _with_first_sight(fit.profile, calibration_layouts, calibration_steps)
    table = compare(measured, model, profile)
    verdict = judge(table, baseline=baseline)
    table = _with_refused(table, refused)
    table["run_valid"] = verdict.valid
    title = (f"{model.name} {model.family}{_slice(model)}, {scaled.name}, {steps} steps x {batch_size} rows, "
             f"{profile.calibration.get('device_name', device) if profile.calibration else device}")
    noise = fit_unpadded_noise(measured, model, profile)
    record = _settings_record(settings, source, scaled, profile_path)
    record.update(strategies=list(layouts), baseline=baseline, not_measured=refused,
                  first_pass_load_factor=measured.first_pass_factor)
    _write_measure_folder(output_dir, table, measured, title, record, _with_fitted_noise(profile, noise, source))
    return MeasureRun(table, title, output_dir, verdict, noise, baseline, refused)


def _decoder_attention(requested: str | None, device: str) -> str:
    """A decoder attends within each sequence the one way `DecoderLayer` does on the device."""
    from simbench.calibrate.calibration import decoder_attention

    attention = decoder_attention(device)
    if requested not in (None, attention):
        raise InputError(f"a decoder attends within each sequence with {attention} on {device} (causal); "
                         f"unpadded_attention {requested} applies to encoders", parameter="unpadded_attention")
    return attention


def _slice(model) -> str:
    """`, 4 of 32 layers` where a preset is timed in part."""
    from simbench.costmodels.model import MODEL_PRESETS

    preset = MODEL_PRESETS.find(model.name)
    sliced = preset is not None and preset.layers != model.layers
    return f", {model.layers} of {preset.layers} layers" if sliced else ""


def _measure_source(source: str, strategies: list[str] | None):
    """The histogram, seed and (label, plan) strategies to measure: the named ones, else a scenario's, else
    None (a histogram's four)."""
    from simbench.histogram import load_histogram
    from simbench.scenario import bundled_scenarios, load_scenario
    from simbench.sim.plans import parse_plans

    scenario = None
    if source.endswith((".yaml", ".yml")) or source in bundled_scenarios():
        scenario = load_scenario(source)
        histogram, seed = scenario.dataset.load(), scenario.seed
    else:
        histogram, seed = load_histogram(source), 0
    if strategies:
        return histogram, seed, [(plan.name, plan) for plan in parse_plans(strategies)]
    if scenario is not None:
        return histogram, seed, [(spec.label, spec.plan()) for spec in scenario.strategies]
    return histogram, seed, None


def _note_deep_packs(layouts: dict, deepest: int | None, note: Callable[[str], None]) -> None:
    """Say which strategies pack deeper than the profile's calibration did: their packing overhead is extrapolated."""
    if deepest is None:
        return
    deeper = {name: max(layout.max_depth for layout in batches) for name, batches in layouts.items()
              if batches[0].kind == "packed" and max(layout.max_depth for layout in batches) > deepest}
    if deeper:
        note(f"packs deeper than the deepest calibrated ({deepest} sequences): "
             + ", ".join(f"{name} {depth}" for name, depth in deeper.items())
             + "; their packing overhead is the fitted line extrapolated")


def _with_first_sight(profile, layouts, calibration_steps):
    """The calibrated profile with first-sight costs fitted on the calibration batches' first steps."""
    from simbench.calibrate.measure import first_sight_fields

    fields = first_sight_fields(layouts, calibration_steps.first, calibration_steps.seconds)
    new = calibration_steps.first.new_shape
    why = (f"fitted: first steps of {int(new.sum())} calibration batches at shapes new to the process "
           f"(simbench measure)")
    record = {**(profile.calibration or {}), "first_sight": {
        "first_seconds": calibration_steps.first.seconds.tolist(), "new_shape": new.tolist(), **fields}}
    return profile.model_copy(update={**fields, "calibration": record,
                                      "provenance": {**profile.provenance, **{name: why for name in fields}}})


def _with_refused(table, refused: dict):
    """The table with a row for each strategy not measured: its name and why, nothing measured or predicted."""
    import pandas as pd

    if not refused:
        return table
    rows = pd.DataFrame({"strategy": list(refused), "problem": [f"not measured: {why}" for why in refused.values()]})
    return pd.concat([table, rows], ignore_index=True)


def _with_fitted_noise(profile, noise, source: str):
    """The profile with the un-padded step noise this run fitted, and where it came from."""
    if noise is None:
        return profile
    record = {"fitted_on": f"simbench measure {source}: the un-padded steps' measured over predicted seconds",
              "steps": noise.steps, "unpadded_noise_cv": noise.cv, "measured_over_predicted_cv": noise.spread_cv,
              "timing_noise_cv_removed": noise.timing_noise_cv}
    return profile.model_copy(update={"unpadded_noise_cv": noise.cv,
                                      "calibration": {**(profile.calibration or {}), "unpadded_noise": record}})


def _write_measure_folder(folder: Path, table, measured, title: str, settings: dict, profile) -> None:
    """The six files of a measurement, swapped into place together; profile.yaml is the profile the run
    priced with (calibrated or given) carrying the un-padded step noise fitted on its steps."""
    import yaml

    from simbench.atomic import atomic_directory
    from simbench.calibrate.measure import per_step_speedups
    from simbench.calibrate.plot import plot_measured_vs_predicted
    from simbench.costmodels.hardware import profile_to_yaml

    with atomic_directory(folder, option="-o") as staging:
        table.to_csv(staging / MEASURE_TABLE, index=False)
        per_step_speedups(measured).to_csv(staging / "steps.csv", index=False)
        measured_rows = ~table["problem"].fillna("").str.startswith("not measured")
        plot_measured_vs_predicted(table[measured_rows], staging / "measured_vs_predicted.png", title)
        (staging / "timings.json").write_text(json.dumps(_timings_record(measured), indent=1))
        (staging / "settings.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        (staging / "profile.yaml").write_text(profile_to_yaml(profile))


def _settings_record(settings, source: str, histogram, profile_path: Path | None) -> dict:
    from simbench.calibrate.calibration import default_unpadded_attention

    return {"source": source, "histogram": histogram.name, "model": settings.model.name,
            "model_family": settings.model.family, "layers": settings.model.layers,
            "max_length": settings.max_length, "device": settings.device, "threads": settings.threads,
            "steps": settings.steps, "batch_size": settings.batch_size, "repeats": settings.repeats,
            "warmup": settings.warmup, "seed": settings.seed,
            "unpadded_attention": settings.unpadded_attention or default_unpadded_attention(settings.device),
            "clock": "process CPU seconds" if settings.cpu_clock else "wall-clock seconds",
            "profile": (str(profile_path) if profile_path
                        else "calibrated in the same run on held-out batches (profile.yaml)")}


def _timings_record(measured) -> dict:
    """Every timed batch (its rows of lengths and slots) with its median seconds, its first step's seconds
    (the first pass's load factored out: settings.yaml's first_pass_load_factor) and whether its shape was
    new to the process then, per strategy."""
    return {name: [{"mode": layout.mode.value, "rows": [list(row) for row in layout.rows],
                    "row_slots": list(layout.row_slots), "median_seconds": float(seconds),
                    "first_seconds": float(first), "new_shape": bool(new)}
                   for layout, seconds, first, new in zip(layouts, measured.seconds[name],
                                                          measured.first_seconds[name], measured.new_shape[name])]
            for name, layouts in measured.layouts.items()}
