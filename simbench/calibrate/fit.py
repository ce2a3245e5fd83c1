"""Fits a hardware profile's cost-model parameters to measured step times (scipy least squares).

The fit prices the timed batches with `TransformerCostModel` itself, so the fitted profile means
exactly what the cost model will do with it, and the per-token rates become FLOP/s via `ModelSpec`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from simbench.calibrate.layout import BatchLayout, batch_set
from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.hardware import MAX_FLOPS_PER_S, HardwareProfile
from simbench.costmodels.model import ModelSpec
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError

# Fitted parameters, each with the scale that makes it about 1 in the solver's coordinates.
FITTED = (
    ("seconds_per_linear_gflop", 1e-2),
    ("seconds_per_attention_gflop", 1e-2),
    ("kernel_launch_seconds", 1e-5),
    ("step_overhead_seconds", 1e-3),
    ("pack_overhead_fraction", 1e-2),
    ("pack_overhead_per_depth_fraction", 1e-3),
    ("unpad_group_half_saturation_tokens", 1e2),
)


@dataclass(frozen=True)
class TimedLayout:
    """A batch layout and its measured median step time."""

    layout: BatchLayout
    median_seconds: float
    spread_fraction: float


@dataclass(frozen=True)
class ProfileFit:
    """The fitted profile and how well it reproduces the timings it was fitted on."""

    profile: HardwareProfile
    parameters: dict[str, float]
    predicted_seconds: np.ndarray
    measured_seconds: np.ndarray

    @property
    def relative_errors(self) -> np.ndarray:
        return (self.predicted_seconds - self.measured_seconds) / self.measured_seconds


def profile_from_parameters(base: dict, values: dict[str, float]) -> HardwareProfile:
    """A profile with the fitted values in the cost model's units (seconds per GFLOP -> FLOP/s). A term the fit
    drives to zero (at tiny shapes, attention's time can vanish in the timings' noise) gets the highest rate a
    profile may state, not a validation error in the middle of the fit."""
    fastest = 1e9 / MAX_FLOPS_PER_S
    return HardwareProfile(
        **base,
        linear_flops_per_s=1e9 / max(values["seconds_per_linear_gflop"], fastest),
        attention_flops_per_s=1e9 / max(values["seconds_per_attention_gflop"], fastest),
        kernel_launch_seconds=values["kernel_launch_seconds"],
        step_overhead_seconds=values["step_overhead_seconds"],
        pack_overhead_fraction=values["pack_overhead_fraction"],
        pack_overhead_per_depth_fraction=values["pack_overhead_per_depth_fraction"],
        unpad_group_half_saturation_tokens=values["unpad_group_half_saturation_tokens"],
    )


def predict_seconds(model: ModelSpec, profile: HardwareProfile, layouts: Sequence[BatchLayout]) -> np.ndarray:
    """Predicted step seconds of each layout (priced mode by mode, in the layouts' order)."""
    return step_seconds_by_term(model, profile, layouts).sum(axis=1)


def step_seconds_by_term(model: ModelSpec, profile: HardwareProfile, layouts: Sequence[BatchLayout]) -> np.ndarray:
    """(layouts, 3) predicted compute, padding and overhead seconds of each layout; padding here holds all work
    on no real pair of tokens (a block-diagonal mask's discarded attention too), so the three add up."""
    cost_model = TransformerCostModel(model, profile)
    terms = np.zeros((len(layouts), 3))
    for mode in {layout.mode for layout in layouts}:
        chosen = [index for index, layout in enumerate(layouts) if layout.mode is mode]
        costs = cost_model.step_costs(batch_set([layouts[index] for index in chosen]), ExecutionMode(mode))
        terms[chosen] = np.column_stack([costs.compute_seconds, costs.padding_seconds + costs.masked_attention_seconds,
                                         costs.overhead_seconds])
    return terms


def fit_profile(model: ModelSpec, timed: Sequence[TimedLayout], base: dict) -> ProfileFit:
    """Least-squares fit of the relative step-time errors over all timed layouts.

    `base` holds the profile fields that are not fitted (name, source, group boundaries,
    calibration record). Relative residuals weigh a 20 ms and a 500 ms step alike.
    """
    if len(timed) < len(FITTED):
        raise InputError(f"fitting {len(FITTED)} parameters needs at least {len(FITTED)} timed batches, "
                         f"found {len(timed)}")
    layouts = [item.layout for item in timed]
    measured = np.array([item.median_seconds for item in timed])
    scales = np.array([scale for _, scale in FITTED])
    names = [name for name, _ in FITTED]

    def residuals(scaled: np.ndarray) -> np.ndarray:
        profile = profile_from_parameters(base, dict(zip(names, scaled * scales)))
        return predict_seconds(model, profile, layouts) / measured - 1

    upper = np.full(len(FITTED), np.inf)
    upper[names.index("pack_overhead_fraction")] = 0.5 / scales[names.index("pack_overhead_fraction")]
    result = least_squares(residuals, x0=np.ones(len(FITTED)), bounds=(np.zeros(len(FITTED)), upper),
                           x_scale="jac", method="trf")
    values = dict(zip(names, (result.x * scales).tolist()))
    profile = profile_from_parameters(base, values)
    return ProfileFit(profile, values, predict_seconds(model, profile, layouts), measured)
