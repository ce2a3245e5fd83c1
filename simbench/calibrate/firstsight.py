"""Fits a profile's first-sight terms on first-sight timings: many batch shapes, each new to the process that
runs it, by attention path (the format of the shipped H200 measurement, simbench/data/measurements/h200-2026-11-28).

    >>> from simbench.calibrate.firstsight import SHIPPED_FIRST_SIGHT, fit_first_sight, load_first_sight
    >>> fields = fit_first_sight(load_first_sight(SHIPPED_FIRST_SIGHT))
    >>> 0.05 < fields["first_sight_padded_seconds"] < 0.13
    True

A new shape's cost is a constant per distinct shape, not per layer: the measurement's padded shapes cost as
much or more at 1 layer as at 8. Each path's figure is the median extra over all its shapes, pooled over the
slices timed (their layers and widths). Never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from simbench.calibrate.jsonlines import JsonLine, json_lines
from simbench.errors import InputError

SHIPPED_FIRST_SIGHT = (Path(str(resources.files("simbench.data"))) / "measurements" / "h200-2026-11-28"
                       / "firstsight.jsonl")
# Attention paths and the profile field each one's figure sets.
FIRST_SIGHT_FIELD_OF_KIND = {"padded": "first_sight_padded_seconds", "varlen": "first_sight_varlen_seconds"}


@dataclass(frozen=True)
class FirstSightRun:
    """One process of the measurement: a slice, its attention path, and the extra milliseconds of the first step
    at each shape new to it over that shape's repeated steps."""

    layers: int
    hidden: int
    kind: str
    extra_seconds: tuple[float, ...]

    @property
    def median_extra_seconds(self) -> float:
        return float(np.median(self.extra_seconds))


def load_first_sight(path: str | Path) -> list[FirstSightRun]:
    """Read first-sight timings (JSON lines); a bad line is an InputError naming the file and line."""
    runs = [_run_of_line(line) for line in json_lines(path, "first-sight timings", ("layers", "hidden", "kind",
                                                                                     "shapes"))]
    if not runs:
        raise InputError("the first-sight file holds no timings", source=str(path))
    return runs


def _run_of_line(line: JsonLine) -> FirstSightRun:
    record, bad = line.record, line.error
    if record["kind"] not in FIRST_SIGHT_FIELD_OF_KIND:
        raise bad(f"kind must be one of {', '.join(FIRST_SIGHT_FIELD_OF_KIND)}, found {record['kind']!r}")
    for key in ("layers", "hidden"):
        value = record[key]
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1 << 20:
            raise bad(f"{key} must be a whole number from 1 to {1 << 20}, found {value!r}")
    shapes = record["shapes"]
    if not isinstance(shapes, list) or not shapes:
        raise bad("shapes must be a non-empty list of timed shapes")
    extras = []
    for shape in shapes:
        extra = shape.get("extra_ms") if isinstance(shape, dict) else None
        if not isinstance(extra, (int, float)) or isinstance(extra, bool) or not -1e6 < extra < 1e6:
            raise bad(f"each shape needs extra_ms, a time in milliseconds within +-1e6, found {extra!r}")
        extras.append(extra / 1e3)
    return FirstSightRun(record["layers"], record["hidden"], record["kind"], tuple(extras))


def fit_first_sight(runs: list[FirstSightRun]) -> dict[str, float]:
    """The profile's first-sight fields: per attention path, the median extra over every shape of its runs
    (a constant per distinct shape), at least 0; a path no run measured is left out."""
    fields = {}
    for kind, field in FIRST_SIGHT_FIELD_OF_KIND.items():
        extras = [extra for run in runs if run.kind == kind for extra in run.extra_seconds]
        if extras:
            fields[field] = max(0.0, float(np.median(extras)))
    return fields
