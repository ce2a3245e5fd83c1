"""Each fitted grid term's uncertainty: its spread over bootstrap resamples of the grid's lines, in the profile
field's units (`fit_uncertainty`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simbench.calibrate.grid_prices import FITTED_FIELDS, GRID_KERNELS_PER_LAYER, GridPrices, moves_a_price
from simbench.calibrate.grid_solver import Coordinates, one_blas_thread, solve

if TYPE_CHECKING:
    from simbench.calibrate.gridfit import GridFit

# Each fitted term's uncertainty: its standard deviation over bootstrap resamples of the grid's lines, drawn within
# each model and attention path (so that every resample holds the kinds of timing each term needs), each refitted
# from the fit's own minimum. 64 resamples state a standard deviation to about 10 % (1 / sqrt(2 x 63)).
BOOTSTRAP_RESAMPLES = 64
BOOTSTRAP_SEED = 0
BOOTSTRAP_EVALUATIONS_MAX = 100
BOOTSTRAP_RULE = (f"one standard deviation over {BOOTSTRAP_RESAMPLES} bootstrap resamples of the grid's lines, drawn "
                  f"within each model and attention path (seed {BOOTSTRAP_SEED}), each refitted from the fit's minimum")
# The profile field each fitted term sets, and the factor from the term to the field.
_FIELD_OF_TERM = {"varlen_floor_ratio": ("varlen_kernels_per_layer", GRID_KERNELS_PER_LAYER)}


def fit_uncertainty(fit: GridFit, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, float]:
    """Each fitted profile field's uncertainty (BOOTSTRAP_RULE), in the field's units. A term the timings hold no
    evidence for is left out: one held fixed, or one no timing's price moves with at the fit (a launch floor no
    step reaches), which a resample would leave where it is."""
    timings = fit.timings
    coordinates, prices = Coordinates.of(timings), GridPrices.of(timings)
    measured = np.log([timing.median_seconds for timing in timings])
    fitted = np.array([fit.values[name] for name in FITTED_FIELDS])
    start = np.clip(np.where(coordinates.held, coordinates.start, fitted / coordinates.scales), coordinates.lower,
                    coordinates.upper)
    groups: dict[tuple[str, str], list[int]] = {}
    for index, timing in enumerate(timings):
        groups.setdefault((timing.model, timing.kind), []).append(index)
    rng = np.random.default_rng(seed)
    draws = []
    with one_blas_thread():
        for _ in range(resamples):
            lines = np.concatenate([rng.choice(members, len(members)) for members in groups.values()])
            solution = solve(prices.take(lines), measured[lines], coordinates, start, 1.0, BOOTSTRAP_EVALUATIONS_MAX)
            draws.append(coordinates.values(solution.x))
    spread = np.std(draws, axis=0, ddof=1)
    uncertainty = {}
    for index, name in enumerate(FITTED_FIELDS):
        if coordinates.held[index] or not moves_a_price(prices, fitted, index, coordinates.scales[index]):
            continue
        field, factor = _FIELD_OF_TERM.get(name, (name, 1))
        # Three digits: a standard deviation of 64 resamples is itself known to about 10 %.
        uncertainty[field] = float(f"{spread[index] * factor:.3g}")
    return uncertainty
