"""Fits a hardware profile's GPU terms on a grid of primitive-shape timings (padded rows and flat
variable-length batches of model slices, `grid_timings`), and says how well it predicts the timings it was not
fitted on.

    >>> from simbench.calibrate.gridfit import shipped_grid_fit
    >>> fit = shipped_grid_fit()  # fit_grid(load_timing_grid(SHIPPED_GRID)), made once a process
    >>> fit.held_out_median_error < 0.05
    True

A fit's predictions go through `TransformerCostModel`, so the fit and the simulator price a step the same way;
its solver (`grid_solver`) evaluates the same prices written out per timing (`grid_prices.GridPrices`, held equal
by the tests). Each fitted term's uncertainty comes from a bootstrap over the grid's lines
(`grid_uncertainty.fit_uncertainty`), written in a profile beside the term. It never imports torch: a grid timed
elsewhere is fitted on any machine.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simbench.calibrate.grid_first_sight import first_sight_fields
from simbench.calibrate.grid_prices import (FITTED_FIELDS, GRID_KERNELS_PER_LAYER, GridPrices, grid_base,
                                            moves_a_price, predict_grid)
from simbench.calibrate.grid_solver import fit_values, held_terms
from simbench.calibrate.grid_timings import HELD_OUT_RULE, MASK_KINDS, SHIPPED_GRID, GridTiming, load_timing_grid
from simbench.calibrate.grid_uncertainty import BOOTSTRAP_RULE, fit_uncertainty
from simbench.costmodels.hardware import HardwareProfile, load_hardware
from simbench.errors import InputError

# The shipped grid's uncertainty, which the h200 preset states: written by `python -m simbench.calibrate.gridfit`.
SHIPPED_UNCERTAINTY = SHIPPED_GRID.with_name("grid_uncertainty.json")


@dataclass(frozen=True)
class GridFit:
    """A profile fitted on a timing grid, its predictions, and the errors of a fit without the held-out
    timings on those timings."""

    profile: HardwareProfile
    timings: tuple[GridTiming, ...]
    predicted_seconds: np.ndarray  # by the profile fitted on every timing
    held_out_predicted_seconds: np.ndarray  # of the held-out timings, by the profile fitted without them
    values: dict[str, float]  # the fitted terms (FITTED_FIELDS) before the profile rounds the varlen floor

    @property
    def errors(self) -> np.ndarray:
        """Predicted over measured step time, minus one, of every timing (the fit on all of them)."""
        return self.predicted_seconds / np.array([t.median_seconds for t in self.timings]) - 1

    @property
    def held_out_errors(self) -> np.ndarray:
        measured = np.array([t.median_seconds for t in self.timings if t.held_out])
        return self.held_out_predicted_seconds / measured - 1

    @property
    def held_out_median_error(self) -> float:
        return float(np.median(np.abs(self.held_out_errors))) if self.held_out_errors.size else math.nan

    def error_rows(self) -> list[dict]:
        """A row per held-out group and for the fitted timings: how many, median and largest |error|."""
        held = [t for t in self.timings if t.held_out]
        groups: dict[str, list[float]] = {}
        for timing, error in zip(held, self.held_out_errors):
            groups.setdefault(f"held out: {timing.model} {timing.kind}", []).append(float(error))
        fitted = [float(e) for t, e in zip(self.timings, self.errors) if not t.held_out]
        groups["fitted timings (fit on all)"] = fitted
        # Rows under a mask apart too: a block mask that beats the varlen floor priced for it shows here.
        for timing, error in zip(self.timings, self.errors):
            if timing.kind in MASK_KINDS and not timing.held_out:
                groups.setdefault(f"fitted: {timing.model} {timing.kind}", []).append(float(error))
        return [{"timings": name, "count": len(errors), "median_abs_error": float(np.median(np.abs(errors))),
                 "max_abs_error": float(np.max(np.abs(errors)))} for name, errors in groups.items() if errors]

def _profile(base: dict, values: dict[str, float], timings: Sequence[GridTiming]) -> HardwareProfile:
    """The base profile with the fitted values, but for a mask's rate the timings do not measure (the base
    profile's own stays)."""
    from pydantic import ValidationError

    unfitted = set(MASK_FRACTION_FIELDS) - set(fitted_mask_fields(timings, values))
    data = {**base, **{k: v for k, v in values.items() if k != "varlen_floor_ratio" and k not in unfitted}}
    data["varlen_kernels_per_layer"] = round(GRID_KERNELS_PER_LAYER * values["varlen_floor_ratio"])
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as error:  # times far too short for their work: rates past any device's
        problems = "; ".join(f"{'.'.join(map(str, item['loc']))} {item['input']:.4g}: "
                             f"{item['msg'].removeprefix('Value error, ')}" for item in error.errors())
        raise InputError(f"the timing grid's steps fit terms no device has ({problems}); are its times in "
                         "milliseconds?") from None


def check_evidence(timings: Sequence[GridTiming]) -> None:
    """InputError unless the timings hold at least as many distinct shapes as the fit has terms, and padded
    shapes of more than one token count (else the saturation and the floor cannot be told from the rate): the
    same timing written many times is one piece of evidence, and a fit on it would return its start values."""
    shapes = {(t.model, t.layers, t.kind, t.rows, t.row_length, t.documents) for t in timings}
    terms = len(FITTED_FIELDS) - len(held_terms(timings))
    if len(shapes) < terms:
        raise InputError(f"the timing grid has {len(shapes)} distinct shapes to fit {terms} terms on "
                         f"({len(timings)} timings, held out: {HELD_OUT_RULE}); time more shapes")
    padded_tokens = {t.tokens for t in timings if t.kind == "padded"}
    if len(padded_tokens) < 2:
        raise InputError(f"the timing grid's padded shapes hold {len(padded_tokens)} distinct token count(s); "
                         "the rate, its saturation and the launch floor need padded steps of several sizes")


@functools.lru_cache(maxsize=1)
def shipped_grid_fit() -> GridFit:
    """The fit of the shipped H200 grid, made once a process: the shipped profile, its tests and its doctest all
    read it."""
    return fit_grid(load_timing_grid(SHIPPED_GRID))


def fit_grid(timings: Sequence[GridTiming], base: HardwareProfile | str = "h200") -> GridFit:
    """Fit the profile's GPU terms on every timing, and again without the held-out ones to predict them."""
    timings = tuple(timings)
    base_data = grid_base(base)
    held_in = [timing for timing in timings if not timing.held_out]
    held_out = [timing for timing in timings if timing.held_out]
    check_evidence(held_in)
    partial = _profile(base_data, fit_values(held_in), held_in)
    held_out_predicted = predict_grid(partial, held_out) if held_out else np.zeros(0)
    values = fit_values(timings)
    base_data.update(first_sight_fields(timings))
    profile = _profile(base_data, values, timings)
    return GridFit(profile, timings, predict_grid(profile, timings), held_out_predicted, values)

def fitted_profile(fit: GridFit, base: HardwareProfile | str, source: str) -> HardwareProfile:
    """The base profile with the grid's fitted terms, marked measured, each with its uncertainty
    (`fit_uncertainty`), and the raw timings kept."""
    fields = GRID_PROFILE_FIELDS + fitted_mask_fields(fit.timings, fit.values)
    fitted = {name: getattr(fit.profile, name) for name in fields}
    fitted[GRID_FIRST_SIGHT_HIDDEN[0]] = 0.0
    base_profile = load_hardware(base)
    provenance = {**base_profile.provenance, **{name: f"fitted: {source}" for name in fields},
                  GRID_FIRST_SIGHT_HIDDEN[0]: GRID_FIRST_SIGHT_HIDDEN[1]}
    uncertainty = {**{name: value for name, value in base_profile.uncertainty.items() if name not in fitted},
                   **{name: value for name, value in fit_uncertainty(fit).items() if name in fields}}
    record = {"grid": [dataclasses.asdict(timing) for timing in fit.timings],
              "held_out": HELD_OUT_RULE, "held_out_errors": fit.error_rows(), "uncertainty": BOOTSTRAP_RULE}
    return base_profile.model_copy(update={**fitted, "provenance": provenance, "calibration": record,
                                           "uncertainty": uncertainty,
                                           "source": f"{base_profile.source} GPU terms fitted: {source}"})


GRID_PROFILE_FIELDS = ("linear_flops_per_s", "dense_half_saturation_width", "attention_flops_per_s",
                       "half_saturation_tokens", "host_seconds_per_kernel", "kernels_per_layer",
                       "varlen_kernels_per_layer", "kernel_launch_seconds", "shape_change_seconds",
                       "varlen_causal_attention_fraction", "varlen_causal_half_length_tokens",
                       "varlen_bidirectional_attention_fraction", "varlen_bidirectional_half_length_tokens",
                       "varlen_tile_tokens", "first_sight_padded_seconds", "first_sight_varlen_seconds",
                       "unpadded_flops_fraction")
# The mask rates a grid fits only where it timed rows under that mask (`fitted_mask_fields`).
MASK_FRACTION_FIELDS = ("dense_mask_attention_fraction", "block_mask_attention_fraction")


def fitted_mask_fields(timings: Sequence[GridTiming], values: dict[str, float]) -> tuple[str, ...]:
    """The mask rates the timings measure at the fitted `values`: those of the masks they hold rows of, whose
    prices move with the rate either way (a block mask's do not where each costs what its documents cost on varlen
    kernels, the cost model's floor for it: any rate above the fitted one prices them alike)."""
    held, prices = held_terms(timings), GridPrices.of(timings)
    point = np.array([values[name] for name in FITTED_FIELDS])
    names = list(FITTED_FIELDS)
    return tuple(name for name in MASK_FRACTION_FIELDS if name not in held and moves_a_price(
        prices, point, names.index(name), FITTED_FIELDS[name][1], both_ways=True))


# A grid's first sight is what showed at its few step lengths: none of it is taken as hidden under GPU work (a base
# profile's hiding, fitted on another measurement, would hide part of a figure that already is what shows).
GRID_FIRST_SIGHT_HIDDEN = ("first_sight_hidden_seconds", "chosen: a grid's first sight is what showed at its steps, "
                           "none of it taken as hidden under GPU work")


def shipped_uncertainty_record() -> dict:
    """What SHIPPED_UNCERTAINTY holds: the shipped grid fit's uncertainty (`fit_uncertainty`) and how it was made."""
    return {"grid": SHIPPED_GRID.name, "rule": BOOTSTRAP_RULE, "written by": "python -m simbench.calibrate.gridfit",
            "uncertainty": fit_uncertainty(shipped_grid_fit())}


if __name__ == "__main__":
    SHIPPED_UNCERTAINTY.write_text(json.dumps(shipped_uncertainty_record(), indent=1) + "\n")
    print(SHIPPED_UNCERTAINTY)
