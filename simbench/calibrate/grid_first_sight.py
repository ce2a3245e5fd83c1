"""What a grid's first steps say: the first-sight cost of a shape new to the process, per attention path, where
it stands out of its own spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from simbench.calibrate.grid_timings import GridTiming

# The first-sight terms a grid fit gives; the h200 preset takes them from a measurement of its own instead
# (many shapes, each new to a fresh process: `simbench.calibrate.firstsight`).
FIRST_SIGHT_FIELDS = ("first_sight_padded_seconds", "first_sight_varlen_seconds", "first_sight_hidden_seconds")


def new_shape_timings(timings: Sequence[GridTiming]) -> list[GridTiming]:
    """The timings whose shape no earlier line of the grid ran (a grid is timed in one process, in its order):
    only their first step measured a shape being new."""
    seen: set[tuple] = set()
    new = []
    for timing in timings:
        if timing.shape_key not in seen:
            new.append(timing)
        seen.add(timing.shape_key)
    return new


def first_sight_fields(timings: Sequence[GridTiming]) -> dict[str, float]:
    """First-sight costs per distinct shape, by attention path: the median over the timings whose shape was new
    of (first step - median step), not divided by layers (a new shape costs as much at 8 layers as at 1). The
    median is robust to the rare first step that loads a kernel library (seconds, once per process); a path
    whose median does not stand out of its own spread (`distinguishable_median`) is 0, not fitted to noise."""
    new = new_shape_timings(timings)

    def median(kind: str) -> float:
        return distinguishable_median([t.first_sight_seconds for t in new if t.kind == kind])

    # A grid times one first step per new shape at few step lengths: the figure is what showed, hidden by nothing
    # more (what GPU work hides is fitted where many shapes span step lengths: `simbench.calibrate.firstsight`).
    return {"first_sight_padded_seconds": median("padded"), "first_sight_varlen_seconds": median("varlen"),
            "first_sight_hidden_seconds": 0.0}


# A first-sight median counts when it lies this many of its standard errors above 0: a grid times one first step
# per shape, so a cost of a few milliseconds among steps that vary by as much is not told from noise.
FIRST_SIGHT_STANDARD_ERRORS = 2.0
# The standard error of a median of n normal samples is sqrt(pi / 2) sigma / sqrt(n); sigma is estimated
# robustly as 1.4826 x the median absolute deviation.
_MEDIAN_STANDARD_ERROR_FACTOR = math.sqrt(math.pi / 2) * 1.4826


def distinguishable_median(extra_seconds: Sequence[float]) -> float:
    """The median of first-sight extras, or 0 where there are none, or where it lies within
    FIRST_SIGHT_STANDARD_ERRORS standard errors of 0 (or below it)."""
    values = np.asarray(extra_seconds, dtype=np.float64)
    if values.size == 0:
        return 0.0
    median = float(np.median(values))
    standard_error = _MEDIAN_STANDARD_ERROR_FACTOR * float(np.median(np.abs(values - median))) / math.sqrt(values.size)
    return median if median > FIRST_SIGHT_STANDARD_ERRORS * standard_error else 0.0
