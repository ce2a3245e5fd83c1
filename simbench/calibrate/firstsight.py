"""Fits a profile's first-sight terms on first-sight timings: many batch shapes, each new to the process that
runs it, by attention path (the format of the shipped H200 measurement, simbench/data/measurements/h200-2026-11-28).

    >>> from simbench.calibrate.firstsight import SHIPPED_FIRST_SIGHT, fit_first_sight, load_first_sight
    >>> fields = fit_first_sight(load_first_sight(SHIPPED_FIRST_SIGHT))
    >>> 0.05 < fields["first_sight_padded_seconds"] - fields["first_sight_hidden_seconds"] < 0.13
    True

A new shape's cost is paid once per distinct shape, not per layer: the measurement's padded shapes cost as
much or more at 1 layer as at 8. The host pays it while the GPU runs the step's queued work, so a longer step hides
more of it, up to a limit: a padded step of T seconds shows C - min(K, T) (C and K fitted by least absolute
deviations over every padded shape, pooled over the slices timed: their layers and widths). A varlen token count's
figure is the median extra over its shapes. Never imports torch.
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
    # Each shape's repeated step: the GPU work a first step's host-side cost could hide under.
    step_seconds: tuple[float, ...]

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
    line.whole_numbers(("layers", "hidden"), 1 << 20)
    shapes = record["shapes"]
    if not isinstance(shapes, list) or not shapes:
        raise bad("shapes must be a non-empty list of timed shapes")
    extras, steps = [], []
    for shape in shapes:
        extra = shape.get("extra_ms") if isinstance(shape, dict) else None
        if not isinstance(extra, (int, float)) or isinstance(extra, bool) or not -1e6 < extra < 1e6:
            raise bad(f"each shape needs extra_ms, a time in milliseconds within +-1e6, found {extra!r}")
        step = shape.get("repeat_ms")
        if not isinstance(step, (int, float)) or isinstance(step, bool) or not 0 < step < 1e6:
            raise bad(f"each shape needs repeat_ms, its repeated step in milliseconds, above 0 and below 1e6, "
                      f"found {step!r}")
        extras.append(extra / 1e3)
        steps.append(step / 1e3)
    return FirstSightRun(record["layers"], record["hidden"], record["kind"], tuple(extras), tuple(steps))


def fit_first_sight(runs: list[FirstSightRun]) -> dict[str, float]:
    """The profile's first-sight fields: a new padded shape's host-side cost and the most of it a step's GPU work
    hides (`fit_hidden_first_sight`), a varlen token count's median extra; at least 0; a path no run measured is
    left out."""
    fields = {}
    padded = [run for run in runs if run.kind == "padded"]
    if padded:
        extras = np.concatenate([run.extra_seconds for run in padded])
        steps = np.concatenate([run.step_seconds for run in padded])
        fields["first_sight_padded_seconds"], fields["first_sight_hidden_seconds"] = fit_hidden_first_sight(extras,
                                                                                                            steps)
    varlen = [extra for run in runs if run.kind == "varlen" for extra in run.extra_seconds]
    if varlen:
        fields["first_sight_varlen_seconds"] = max(0.0, float(np.median(varlen)))
    return fields


def fit_hidden_first_sight(extra_seconds: np.ndarray, step_seconds: np.ndarray) -> tuple[float, float]:
    """(C, K) of extra = C - min(K, step) by least absolute deviations (medians, as the figure per path was): for
    each K among 0 and the measured steps (where the model bends), C is the median of extra + min(K, step); the K
    of the least total deviation wins, the smallest on ties. K stays at most C: no step shows less than nothing."""
    best = None
    for hidden in np.unique(np.concatenate([[0.0], step_seconds])):
        covered = np.minimum(hidden, step_seconds)
        cost = max(0.0, float(np.median(extra_seconds + covered)))
        hidden = min(float(hidden), cost)
        deviation = float(np.abs(extra_seconds - (cost - np.minimum(hidden, step_seconds))).sum())
        if best is None or deviation < best[0]:
            best = (deviation, cost, hidden)
    return best[1], best[2]
