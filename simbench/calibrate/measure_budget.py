"""A measurement's steps and repeats: as given, or sized to a time budget from the cost model's estimate of each
batch's step (`budgeted_passes`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbench.calibrate.fit import step_seconds_by_term
from simbench.calibrate.layout import BatchLayout
from simbench.costmodels.hardware import HardwareProfile
from simbench.costmodels.model import ModelSpec
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError


# A measurement's time budget when `--seconds` is not given: about two minutes on a GPU (a default run of a bundled
# scenario then ends within three, calibration and start-up included); a CPU's for its small stand-in models.
DEFAULT_BUDGET_SECONDS = {"cuda": 120.0, "cpu": 60.0}
BUDGET_STEPS_MIN = 2  # the fewest batches a strategy is timed on (a speed-up's noise needs more than one)
BUDGET_STEPS_MAX = 32  # the most a budget gives; more rounds instead, up to BUDGET_REPEATS_MAX
BUDGET_REPEATS = (3, 2)  # repeats a budget tries, most first, before fewer steps
BUDGET_REPEATS_MAX = 5


@dataclass(frozen=True)
class Budget:
    """Batches per strategy and repeats of each, as given or sized to a time budget, and the note saying so."""

    steps: int
    repeats: int
    message: str | None = None  # None where both were given
    seconds: float | None = None  # the budget the steps and repeats were sized to; None where both were given


def budgeted_passes(layouts: dict[str, list[BatchLayout]], model: ModelSpec, device: str,
                    profile: HardwareProfile | None, calibration_batches: int, seconds: float | None,
                    steps: int | None, repeats: int | None, probed_rate: float | None = None) -> Budget:
    """The most batches per strategy (up to the layouts drawn, BUDGET_STEPS_MAX) and repeats (BUDGET_REPEATS;
    BUDGET_REPEATS_MAX where the steps reach the most) whose estimated timing fits `seconds` (default
    DEFAULT_BUDGET_SECONDS for the device), `steps` and `repeats` kept where given. Each strategy's step is
    estimated by `estimated_step_seconds`; each batch takes a first-sight pass, a warm-up and load pass and its
    repeats, each calibration batch a first pass and its repeats."""
    if steps is not None and repeats is not None:
        return Budget(steps, repeats)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    budget = DEFAULT_BUDGET_SECONDS[kind] if seconds is None else float(seconds)
    if not budget > 0:
        raise InputError(f"--seconds must be above 0, found {seconds}", parameter="seconds")
    per_step, first_sight, source = estimated_step_seconds(layouts, model, device, profile, probed_rate)
    every_strategy = float(sum(per_step.values()))
    calibration = calibration_batches * every_strategy / max(len(per_step), 1)
    drawn = min(len(batches) for batches in layouts.values())

    def total(step_count: int, repeat_count: int) -> float:
        # At most every batch's first step at a new shape, as the first-sight pass may pay.
        return ((repeat_count + 2) * every_strategy + first_sight) * step_count + (repeat_count + 1) * calibration

    def most_steps(repeat_count: int) -> int | None:
        fitting = [count for count in range(BUDGET_STEPS_MIN, drawn + 1) if total(count, repeat_count) <= budget]
        return steps if steps is not None else max(fitting, default=None)

    chosen = next(((most_steps(count), count) for count in ([repeats] if repeats else BUDGET_REPEATS)
                   if most_steps(count) is not None), None)
    over = chosen is None
    if over:
        chosen = (steps or BUDGET_STEPS_MIN, repeats or BUDGET_REPEATS[-1])
    step_count, repeat_count = chosen
    while repeats is None and step_count == drawn and repeat_count < BUDGET_REPEATS_MAX and total(
            step_count, repeat_count + 1) <= budget:
        repeat_count += 1
    given = "" if seconds is None else " (--seconds)"
    fit = ("over the budget: the fewest steps and repeats" if over else
           f"{step_count} batches x {repeat_count} repeats per strategy")
    return Budget(step_count, repeat_count, (
        f"time budget {budget:.0f} s{given}: {fit}, about {total(step_count, repeat_count):.0f} s of steps at an "
        f"estimated {1e3 * every_strategy:.1f} ms for one step of every strategy ({source}); --steps and --repeats "
        "set them"), budget)


def estimated_step_seconds(layouts: dict[str, list[BatchLayout]], model: ModelSpec, device: str,
                           profile: HardwareProfile | None,
                           probed_rate: float | None = None) -> tuple[dict[str, float], float, str]:
    """Each strategy's mean step in seconds, as the profile prices it (on CUDA without one, the h200 preset's),
    else on a CPU its FLOPs at `probed_rate` (what a step ran at here just now, `measure_timing.probed_flops_per_s`)
    or without one at the rate `timing.check_timed_work` assumes; what one step of every strategy at a new shape
    adds (the profile's first-sight costs; 0 without a profile); and where the estimate comes from."""
    from simbench.calibrate.timing import assumed_flops_per_s

    if profile is None and device.startswith("cuda"):
        from simbench.costmodels.hardware import load_hardware

        profile = load_hardware("h200")
    if profile is not None:
        seconds = {name: float(step_seconds_by_term(model, profile, batches).sum(axis=1).mean())
                   for name, batches in layouts.items()}
        cost_model = TransformerCostModel(model, profile)
        first_sight = sum(cost_model.first_sight_seconds(batches[0].mode) for batches in layouts.values())
        return seconds, first_sight, f"priced with the {profile.name} profile"
    rate = assumed_flops_per_s(device) if probed_rate is None else probed_rate
    seconds = {name: float(np.mean([model.training_flops(layout.row_slots) for layout in batches])) / rate
               for name, batches in layouts.items()}
    measured = "" if probed_rate is None else ", the rate a padded step ran at here just now"
    return seconds, 0.0, f"its FLOPs at {rate:.1e} FLOP/s{measured}"
