"""The grid fit's least squares: the fitted terms in the solver's coordinates (`Coordinates`), a fixed set of
starts, each solved to fixed tolerances on one BLAS thread, and the lowest minimum kept, so that the same grid
gives the same terms on any machine (`fit_values`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simbench.calibrate.grid_prices import FITTED_FIELDS, GridPrices, slice_model
from simbench.calibrate.grid_timings import GridTiming
from simbench.costmodels.hardware_profile import BLOCK_MASK_ATTENTION_FRACTION, DENSE_MASK_ATTENTION_FRACTION
from simbench.costmodels.model import MODEL_PRESETS

# The solver's settings, fixed so that a fit does not depend on the machine: starts, tolerances, evaluations,
# and the relative difference in cost below which two starts' minima tie (the earlier start is kept).
FIT_STARTS = 8
FIT_START_SPREAD = 4.0
FIT_TOLERANCE = 1e-12
# A start not settled within this many evaluations stops where it is: on the grids shipped, every start that
# reaches the best minimum settles within 60, and the cap bounds a fit's time whatever the grid.
FIT_EVALUATIONS_MAX = 200
FIT_TIE_RELATIVE = 1e-9
_FORWARD_STEP = float(np.finfo(np.float64).eps) ** 0.5
# Each start is solved in the solver's fixed coordinates and in coordinates scaled by the Jacobian: each reaches
# minima the other misses on some grids.
FIT_COORDINATE_SCALES = (1.0, "jac")
# The rates whose bounds and start follow the device's speed (`_rate_scale`).
RATE_FIELDS = ("linear_flops_per_s", "attention_flops_per_s")
_START = {"linear_flops_per_s": 0.7e15, "dense_half_saturation_width": 500.0, "attention_flops_per_s": 0.45e15,
          "half_saturation_tokens": 500.0, "host_seconds_per_kernel": 1.5e-5, "varlen_floor_ratio": 1.1,
          "varlen_causal_attention_fraction": 0.6, "varlen_causal_half_length_tokens": 500.0,
          "varlen_bidirectional_attention_fraction": 0.6, "varlen_bidirectional_half_length_tokens": 200.0,
          "dense_mask_attention_fraction": 0.5, "block_mask_attention_fraction": 0.8}


@dataclass(frozen=True)
class Coordinates:
    """The solver's coordinates: each fitted term over its scale, within its bounds; the terms a grid holds no
    evidence for are held at fixed values, out of the solver's reach (it moves only the free terms)."""

    scales: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    held: np.ndarray  # True where the term is held at `held_values`
    held_values: np.ndarray
    start: np.ndarray  # the usual start, within the bounds

    @classmethod
    def of(cls, timings: Sequence[GridTiming]) -> Coordinates:
        names = list(FITTED_FIELDS)
        gpu_scales = np.array([FITTED_FIELDS[name][1] for name in names])
        # The solver's coordinates are a GPU's values over their scales: bounds and start carry over to a slower
        # device with its rates' scales multiplied by how much slower it is.
        rate_scale = _rate_scale(timings)
        scales = gpu_scales * np.array([rate_scale if name in RATE_FIELDS else 1.0 for name in names])
        held = held_terms(timings)
        lower = np.array([FITTED_FIELDS[name][0][0] for name in names]) / gpu_scales
        upper = np.array([FITTED_FIELDS[name][0][1] for name in names]) / gpu_scales
        start = np.clip(np.array([_START[name] for name in names]) / gpu_scales, lower + 1e-9, upper - 1e-9)
        return cls(scales, lower, upper, np.array([name in held for name in names]),
                   np.array([held.get(name, 0.0) for name in names]), start)

    @property
    def free(self) -> np.ndarray:
        return ~self.held

    def with_free(self, free_scaled: np.ndarray) -> np.ndarray:
        """Every term's coordinates (held ones at their start) from the free terms' (terms x points for several
        points)."""
        shape = (self.start.size,) + np.shape(free_scaled)[1:]
        scaled = np.broadcast_to(self.start.reshape((-1,) + (1,) * (len(shape) - 1)), shape).copy()
        scaled[self.free] = free_scaled
        return scaled

    def values(self, scaled: np.ndarray) -> np.ndarray:
        """The terms' values at the solver's coordinates (terms x points for several points)."""
        shape = (-1,) + (1,) * (np.ndim(scaled) - 1)
        return np.where(self.held.reshape(shape), self.held_values.reshape(shape), scaled * self.scales.reshape(shape))


def held_terms(timings: Sequence[GridTiming]) -> dict[str, float]:
    """The fitted terms the timings hold no evidence for, and the values they are held at (the solver leaves
    them out: a term no price moves with would only slow its steps)."""
    held: dict[str, float] = {}
    # One width cannot tell a width effect from the rate: the rate takes it all.
    if len({MODEL_PRESETS[t.model].hidden for t in timings}) < 2:
        held["dense_half_saturation_width"] = 0.0
    # A direction of attention the grid never ran varlen keeps dense attention's rate.
    if not any(MODEL_PRESETS[t.model].is_decoder and t.kind == "varlen" for t in timings):
        held.update(varlen_causal_attention_fraction=1.0, varlen_causal_half_length_tokens=0.0)
    if not any(not MODEL_PRESETS[t.model].is_decoder and t.kind == "varlen" for t in timings):
        held.update(varlen_bidirectional_attention_fraction=1.0, varlen_bidirectional_half_length_tokens=0.0)
    # A mask the grid never ran keeps the profile's default rate (and a fit does not write it:
    # `gridfit.fitted_mask_fields`); a block mask's price is bounded by the dense mask's.
    kinds = {t.kind for t in timings}
    if "dense-mask" not in kinds:
        held["dense_mask_attention_fraction"] = DENSE_MASK_ATTENTION_FRACTION
    if "block-mask" not in kinds:
        held["block_mask_attention_fraction"] = BLOCK_MASK_ATTENTION_FRACTION
    return held


def fit_values(timings: Sequence[GridTiming]) -> dict[str, float]:
    """Least squares on log step times (every timing counts by its relative error)."""
    coordinates = Coordinates.of(timings)
    prices = GridPrices.of(timings)
    measured = np.log([timing.median_seconds for timing in timings])
    # The cost has several local minima (a faster host per kernel against a slower rate, a saturation that
    # trades with the attention rate); which one an adaptive solver reaches from one start differed between
    # machines. Every start of a fixed set is solved to tight tolerances with fixed coordinate scales, and the
    # lowest cost wins (the earliest start on a tie), so the same grid gives the same profile anywhere.
    best = None
    with one_blas_thread():
        for point in _starts(coordinates.start, coordinates.lower, coordinates.upper):
            for x_scale in FIT_COORDINATE_SCALES:
                solution = solve(prices, measured, coordinates, point, x_scale)
                if best is None or solution.cost < best.cost * (1 - FIT_TIE_RELATIVE):
                    best = solution
    return dict(zip(FITTED_FIELDS, coordinates.values(best.x).tolist()))


def one_blas_thread():
    """BLAS on one thread while a fit solves: its small matrices gain nothing from threads, which on a busy
    machine made each step many times slower, and a result should not depend on the thread count."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def solve(prices: GridPrices, measured_log_seconds: np.ndarray, coordinates: Coordinates, start: np.ndarray,
           x_scale, evaluations_max: int = FIT_EVALUATIONS_MAX):
    """One start's least squares over the free terms, in the solver's coordinates; its `x` holds every term's."""
    from scipy.optimize import least_squares

    free = coordinates.free
    lower, upper = coordinates.lower[free], coordinates.upper[free]

    def residuals(scaled: np.ndarray) -> np.ndarray:
        return prices.log_seconds(coordinates.values(coordinates.with_free(scaled))) - measured_log_seconds

    def jacobian(scaled: np.ndarray) -> np.ndarray:
        # Forward differences, as scipy's "2-point" scheme takes them (a step of sqrt(eps) x max(1, |x|), backwards
        # where forwards leaves the bounds), every term's step priced in one call. The cost is not smooth where a
        # step meets its launch floor, and which minimum a start reaches depends on how derivatives are taken:
        # exact ones reach others (on the shipped grid, from one start, one of 3 % lower cost); the shipped
        # profile is the minimum these differences reach.
        steps = _FORWARD_STEP * np.where(scaled >= 0, 1.0, -1.0) * np.maximum(1.0, np.abs(scaled))
        steps = np.where((scaled + steps > upper) | (scaled + steps < lower), -steps, steps)
        moved = scaled[:, np.newaxis] + np.diag(steps)
        steps = np.diag(moved) - scaled
        base = residuals(scaled)
        moved_log_seconds = prices.log_seconds(coordinates.values(coordinates.with_free(moved)))
        return ((moved_log_seconds - measured_log_seconds - base) / steps[:, np.newaxis]).T

    solution = least_squares(residuals, start[free], jac=jacobian, bounds=(lower, upper), x_scale=x_scale,
                             ftol=FIT_TOLERANCE, xtol=FIT_TOLERANCE, gtol=FIT_TOLERANCE, max_nfev=evaluations_max)
    solution.x = coordinates.with_free(solution.x)
    return solution


def _starts(start: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> list[np.ndarray]:
    """The fit's starting points: the usual start, then FIT_STARTS - 1 points of an unscrambled Halton sequence
    spread a factor FIT_START_SPREAD either side of it (in log, or linearly for a term whose start is 0)."""
    from scipy.stats import qmc

    unit = qmc.Halton(d=start.size, scramble=False).random(FIT_STARTS)[1:]  # its first point is the origin
    factors = FIT_START_SPREAD ** (2 * unit - 1)
    points = [start] + [np.clip(start * factor, lower + 1e-9, upper - 1e-9) for factor in factors]
    return points


def _rate_scale(timings: Sequence[GridTiming]) -> float:
    """1 for a GPU's grid; for a device orders of magnitude slower or faster (a CPU's), how much: the rates'
    bounds and start are a GPU's times this, since the solver does not cross such gaps from a GPU's start."""
    padded = [t for t in timings if t.kind == "padded"] or list(timings)
    reached = float(np.median([slice_model(t.model, t.layers).training_flops([t.row_length] * t.rows)
                               / t.median_seconds for t in padded]))
    ratio = reached / _START["linear_flops_per_s"]
    return 1.0 if 0.01 <= ratio <= 100 else ratio
