"""A whole measurement, as `simbench measure` starts it: the source's histogram, model and strategies, the
batches and calibration sized to a time budget, the timing with a progress callback, and the folder it writes.

torch is imported inside the functions: without it each says how to install it, as an InputError.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from simbench.calibrate.measure_folder import settings_record, write_measure_folder
from simbench.calibrate.noisefit import check_measure_repeats
from simbench.calibrate.run_setup import (DEFAULT_MAX_LENGTH, Progress, check_unpadded_attention, import_torch,
                                          resolve_device)
from simbench.costmodels.hardware import load_hardware
from simbench.errors import InputError
from simbench.validation import check_whole_number

# What measure times on a CPU for a scenario's model of each family (model presets small enough for seconds).
CPU_STAND_INS = {"encoder": "tiny", "decoder": "tiny-decoder"}
MEASURE_COLUMNS = ["strategy", "mode", "measured_speedup", "predicted_speedup", "error", "speedup_noise", "run_valid",
                   "problem", "measured_step_seconds", "predicted_step_seconds", "predicted_compute_seconds",
                   "predicted_padding_seconds", "predicted_overhead_seconds", "measured_tokens_per_s",
                   "predicted_tokens_per_s", "new_shape_steps", "measured_first_sight_speedup",
                   "predicted_first_sight_speedup", "first_sight_error", "measured_first_sight_step_seconds",
                   "predicted_first_sight_step_seconds"]


@dataclass(frozen=True)
class MeasureRun:
    table: object  # pandas DataFrame: one row per strategy, measured against predicted (refused ones last)
    title: str  # model, histogram, steps and device, for tables and plots
    folder: Path  # where the run wrote its files
    verdict: object = None  # measure_compare.Verdict: whether the timing noise lets the errors mean anything
    noise: object = None  # noisefit.NoiseFit of the un-padded steps, written into profile.yaml (None: not fitted)
    baseline: str = "padding"  # the strategy every speed-up is measured against
    refused: dict = field(default_factory=dict)  # strategy -> why it was not measured


def measured_model(source, model=None, device: str = "cpu", layers: int | None = None,
                   note: Callable[[str], None] = lambda message: None):
    """The `ModelSpec` measure times and prices: `model` if given; else for a scenario (its name or path, or its
    resolved `Run`) its model on CUDA, and on a CPU its family's small stand-in (`tiny` for an encoder,
    `tiny-decoder` for a decoder), said in a note; else `tiny`. `layers` times the first that many of its layers
    instead of all."""
    import dataclasses

    from simbench.costmodels.model import get_model
    from simbench.resolved import Run

    scenario_model = source.model if isinstance(source, Run) else _scenario_model(source)
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
                       device: str | None = None, steps: int | None = None, batch_size: int | None = None,
                       repeats: int | None = None, seconds: float | None = None, profile_path: Path | None = None,
                       max_length: int | None = None, threads: int | None = None, seed: int | None = None,
                       quick: bool = False, unpadded_attention: str | None = None, wall_clock: bool = False,
                       strategies: list[str] | None = None, progress: Progress = lambda total: None,
                       note: Callable[[str], None] = lambda message: None) -> MeasureRun:
    """Time real training steps of every strategy on a scenario's or histogram's lengths, compare the realized
    speed-ups with the cost model's prediction, at first sight of each shape and repeated, and write the folder
    (measure-<histogram> by default): the comparison CSV and plot, per-step speed-ups, raw timings, settings and
    the profile.

    The strategies are `strategies` (as `simulate --strategy` takes them), else a scenario's (`strategy_batches`;
    padding added as the baseline), else a histogram's four: padding, sort, lpfhp and unpadding. Each runs the
    attention it is priced with (`kernels`); one this device cannot time is listed with the reason. The model is
    `measured_model`'s, rows are `measure_shape`'s, steps and repeats not given are sized to `seconds`
    (`measure_budget.budgeted_passes`). Without `profile_path` a profile is calibrated on held-out batches timed in the
    same rounds (`_measure_plan`); the strategies' steps are never fitted on.
    """
    if repeats is not None:
        check_measure_repeats(repeats)  # before torch is needed
    given_profile = load_hardware(profile_path) if profile_path is not None else None  # a bad one: before torch
    import_torch()
    from simbench.calibrate.measure_compare import compare, fit_unpadded_noise, judge
    from simbench.calibrate.measure_timing import measure_steps, time_strategies
    from simbench.atomic import check_replaceable

    measured_source = _measure_source(source, strategies)
    output_dir = output_dir or Path(f"measure-{measured_source.histogram.name}")
    # Checked before minutes of timing; and never swap away a folder that is not an earlier result.
    check_replaceable(output_dir, option="-o", inputs=[Path(source), profile_path])
    device = resolve_device(device)
    model = measured_model(measured_source.run or source, model, device, layers, note)
    plan = _measure_plan(measured_source, model, device, given_profile, max_length=max_length, batch_size=batch_size,
                         steps=steps, repeats=repeats, seconds=seconds, threads=threads, seed=seed, quick=quick,
                         unpadded_attention=unpadded_attention, wall_clock=wall_clock, note=note)
    settings = plan.settings
    total = measure_steps(settings, plan.layouts, plan.calibration_layouts)
    note(_timing_note(plan, total))
    measured, calibration_steps = time_strategies(plan.layouts, settings, lambda: progress(total),
                                                  plan.calibration_batches, plan.calibration_layouts, plan.baseline,
                                                  deadline=_deadline(plan, repeats))
    settings = _as_timed(settings, measured, note)
    profile = plan.profile
    if plan.calibration is not None:
        profile = _calibrated_profile(plan.calibration, plan.calibration_layouts, calibration_steps)
    table = compare(measured, model, profile)
    verdict = judge(table, baseline=plan.baseline, device=device)
    table = _with_refused(table, plan.refused)
    table["run_valid"] = verdict.valid
    title = (f"{model.name} {model.family}{_slice(model)}, {plan.histogram.name}, {settings.steps} steps x "
             f"{settings.batch_size} rows, "
             f"{profile.calibration.get('device_name', device) if profile.calibration else device}")
    noise = fit_unpadded_noise(measured, model, profile)
    record = settings_record(settings, source, plan.histogram, profile_path)
    record.update(strategies=list(plan.layouts), baseline=plan.baseline, not_measured=plan.refused,
                  first_pass_load_factor=measured.first_pass_factor, budget=plan.budget_note)
    write_measure_folder(output_dir, table, measured, title, record, _with_fitted_noise(profile, noise, source))
    return MeasureRun(table, title, output_dir, verdict, noise, plan.baseline, plan.refused)


def _probed_rate(layout, settings, given_profile, steps: int | None, repeats: int | None) -> float | None:
    """On a CPU without a profile, the rate one step of `layout` runs at now, to size the budget on (None where
    the budget is not used, or a profile prices the steps)."""
    if (steps is not None and repeats is not None) or given_profile is not None or settings.device.startswith("cuda"):
        return None
    from simbench.calibrate.measure_timing import probed_flops_per_s

    return probed_flops_per_s(layout, settings)


def _timing_note(plan: MeasurePlan, total: int) -> str:
    settings = plan.settings
    return (f"timing {total:,} steps: {len(plan.layouts)} strategies x {settings.steps} batches, a first-sight pass "
            f"and {settings.repeats} repeats each" + (f", and {len(plan.calibration_layouts)} calibration batches"
                                                      if plan.calibration_layouts else ""))


def _deadline(plan: MeasurePlan, repeats: int | None) -> float | None:
    """When the repeated rounds must end (`time.monotonic()`): the budget from the start of timing, where the
    budget sized the repeats (None where `--repeats` fixed them, or no budget was used)."""
    if repeats is not None or plan.budget_seconds is None:
        return None
    return time.monotonic() + plan.budget_seconds


def _as_timed(settings, measured, note: Callable[[str], None]):
    """The settings with the repeats that ran, said where the budget stopped them early."""
    if measured.repeats is None or measured.repeats == settings.repeats:
        return settings
    note(f"time budget: {measured.repeats} repeats of every batch, not {settings.repeats}: the steps ran slower "
         "than the budget was sized for; --repeats fixes them")
    return replace(settings, repeats=measured.repeats)


@dataclass(frozen=True)
class MeasureSource:
    """What a measurement's source gives: its histogram, seed, strategies (None: a histogram's four) and rows."""

    histogram: object
    seed: int
    plans: list | None
    batch_size: int | None  # a scenario's rows a step; None for a histogram
    run: object = None  # a scenario's resolved `simbench.resolved.Run`; None for a histogram


@dataclass(frozen=True)
class MeasurePlan:
    """Everything a measurement times, resolved before the first step: settings, batches, calibration, profile."""

    settings: object  # measure.MeasureSettings
    histogram: object  # the lengths the batches are drawn from, rescaled where the rows are shorter
    layouts: dict
    refused: dict
    baseline: str
    profile: object  # the given profile; None until calibrated
    calibration: object = None  # calibration.CalibrationSettings where no profile was given
    calibration_layouts: list = field(default_factory=list)
    calibration_batches: list = field(default_factory=list)
    budget_note: str | None = None
    budget_seconds: float | None = None  # what the budget sized steps and repeats to; None: both given


DEFAULT_BATCH_SIZE = 16  # rows a step for a histogram (a scenario gives its own)


def _measure_plan(measured_source: MeasureSource, model, device: str, given_profile, *, max_length,
                  batch_size, steps, repeats, seconds, threads, seed, quick, unpadded_attention, wall_clock,
                  note) -> MeasurePlan:
    """Resolve a measurement: rows, attention, calibration and batches, then steps and repeats to the budget."""
    import torch

    from simbench.calibrate.calibration import CalibrationSettings, prepare_calibration
    from simbench.calibrate.measure import MeasureSettings
    from simbench.calibrate.measure_budget import BUDGET_STEPS_MAX, BUDGET_STEPS_MIN, budgeted_passes
    from simbench.calibrate.measure_compare import deepest_calibrated_pack
    histogram, max_length = measure_shape(measured_source.histogram, model, device, max_length, note)
    batch_size = batch_size or measured_source.batch_size or DEFAULT_BATCH_SIZE
    seed = measured_source.seed if seed is None else seed
    if model.is_decoder:
        unpadded_attention = _decoder_attention(unpadded_attention, device)
    elif given_profile is not None and unpadded_attention is None and given_profile.calibration:
        # Run un-padded attention the way the profile was calibrated, so its group term applies.
        unpadded_attention = given_profile.calibration.get("unpadded_attention")
    plans = measured_source.plans
    # Checked for work at the steps given, or the fewest a budget gives, before anything is built.
    settings = MeasureSettings(model=model, max_length=max_length, device=device,
                               threads=torch.get_num_threads() if threads is None else threads,
                               steps=steps or BUDGET_STEPS_MIN, batch_size=batch_size, repeats=repeats or 2, seed=seed,
                               unpadded_attention=check_unpadded_attention(unpadded_attention, device),
                               wall_clock=wall_clock, strategies=len(plans) + 1 if plans else 4)
    calibration, calibration_layouts, calibration_batches = None, [], []
    if given_profile is None:
        # Its own seed: the profile is fitted on other batches than the ones it is checked on.
        calibration = CalibrationSettings(model=model, max_length=max_length, device=device, threads=settings.threads,
                                          seed=seed + 1000, quick=quick,
                                          unpadded_attention=settings.unpadded_attention, wall_clock=wall_clock)
        calibration_layouts, calibration_batches = prepare_calibration(calibration)
        deepest = max(layout.max_depth for layout in calibration_layouts if layout.kind == "packed")
    else:
        deepest = deepest_calibrated_pack(given_profile)
    layouts, refused, baseline = _strategy_layouts(plans, histogram, settings, steps or BUDGET_STEPS_MAX, deepest, note,
                                                   measured_source.run)
    budget = budgeted_passes(layouts, model, device, given_profile, len(calibration_layouts), seconds, steps, repeats,
                             _probed_rate(layouts[baseline][0], settings, given_profile, steps, repeats))
    if budget.message:
        note(budget.message)
    settings = replace(settings, steps=budget.steps, repeats=budget.repeats)
    layouts = {name: batches[:budget.steps] for name, batches in layouts.items()}
    settings.check_layouts(layouts)
    return MeasurePlan(settings, histogram, layouts, refused, baseline, given_profile, calibration,
                       calibration_layouts, calibration_batches, budget.message, budget.seconds)


def measure_shape(histogram, model, device: str, max_length: int | None, note: Callable[[str], None]):
    """The histogram and row length measured: `max_length` as given, else the histogram's own on CUDA (the
    scenario's rows) and at most DEFAULT_MAX_LENGTH on a CPU; longer lengths are rescaled to the rows, said in
    a note. A row longer than the model's positions is refused."""
    from simbench.calibrate.measure import rescale_histogram

    given = max_length is not None
    if not given:
        max_length = histogram.max_length if device.startswith("cuda") else min(DEFAULT_MAX_LENGTH,
                                                                                histogram.max_length)
    if max_length > model.max_positions:
        raise InputError(f"max_length {max_length} exceeds the model's {model.max_positions} positions"
                         + ("" if given else f" ({histogram.name}'s own); pass a shorter --max-length"),
                         parameter="max_length")
    scaled = rescale_histogram(histogram, max_length)
    if scaled is not histogram:
        why = "--max-length" if given else f"the rows a CPU times by default (--max-length {histogram.max_length} " \
                                           "times the scenario's own)"
        note(f"lengths of {histogram.name} (max {histogram.max_length}) rescaled by {max_length}/"
             f"{histogram.max_length} to fit max length {max_length}: {why}")
    return scaled, max_length


def _strategy_layouts(plans, histogram, settings, steps: int, deepest: int | None, note: Callable[[str], None],
                      run=None):
    """Each strategy's `steps` batches (a histogram's four where `plans` is None), those the device cannot run as
    priced refused with the reason, and the baseline's name. A scenario's packs are its run's (`run`): packed
    with its cost model's options, and its very packings where the rows, seed and lengths are the run's."""
    import numpy as np

    from simbench.calibrate.kernels import check_runnable
    from simbench.calibrate.measure import strategy_layouts
    from simbench.calibrate.strategy_batches import strategy_batches

    if plans is None:
        if deepest is not None:
            # Deeper packs would price packing's overhead by extrapolating the line fitted to these depths.
            settings = replace(settings, max_depth=deepest)
            note(f"lpfhp packs at most {deepest} sequences: the deepest calibrated")
        return strategy_layouts(histogram, settings, np.random.default_rng(settings.seed), steps), {}, "padding"
    as_run = run is not None and (histogram, settings.batch_size, settings.seed) == (run.histogram, run.batch_size,
                                                                                      run.seed)
    built = strategy_batches(plans, histogram, settings.max_length, steps, settings.batch_size, settings.seed,
                             cost_model=None if run is None else run.cost_model,
                             packings=run.packings if as_run else None)
    layouts, refused = dict(built.layouts), dict(built.refused)
    for name, batches in built.layouts.items():
        try:
            check_runnable(batches[0].mode, settings.device)
        except InputError as error:
            refused[name] = error.message
            del layouts[name]
    _note_deep_packs(layouts, deepest, note)
    return layouts, refused, built.baseline


def _calibrated_profile(calibration, layouts, calibration_steps):
    """The profile fitted on the calibration batches timed alongside, with their first-sight costs."""
    from simbench.calibrate.calibration import fit_calibration

    fit = fit_calibration(calibration, layouts, calibration_steps.timings, calibration_steps.seconds)
    return _with_first_sight(fit.profile, layouts, calibration_steps)


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


def _measure_source(source: str, strategies: list[str] | None) -> MeasureSource:
    """The histogram, seed, (label, plan) strategies to measure (the named ones, else a scenario's, else None: a
    histogram's four) and a scenario's rows a step. A scenario is loaded and resolved once (`scenario_run`)."""
    from simbench.histogram import load_histogram
    from simbench.scenario import bundled_scenarios
    from simbench.sim.plans import parse_plans

    run = None
    if source.endswith((".yaml", ".yml")) or source in bundled_scenarios():
        run = scenario_run(source)
        histogram, seed = run.histogram, run.seed
    else:
        histogram, seed = load_histogram(source), 0
    batch_size = run.batch_size if run is not None else None
    if strategies:
        return MeasureSource(histogram, seed, [(plan.name, plan) for plan in parse_plans(strategies)], batch_size, run)
    if run is not None:
        return MeasureSource(histogram, seed, [(run.label(plan.name), plan) for plan in run.plans], batch_size, run)
    return MeasureSource(histogram, seed, None, None)


def scenario_run(source: str):
    """The scenario's `Run`, each strategy at the scenario's own rows (`compare_at: as-configured`): measure times
    every strategy at one batch size (its `--batch-size`), so none is sized to equal tokens."""
    from simbench.resolved import Run
    from simbench.scenario import load_scenario

    scenario = load_scenario(source)
    return Run.from_scenario(scenario.model_copy(update={"compare_at": "as-configured"}))


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
    from simbench.calibrate.measure_timing import first_sight_fields

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
