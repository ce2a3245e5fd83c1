"""Fits a hardware profile's GPU terms on a grid of primitive-shape timings (padded rows and flat
variable-length batches of model slices), and says how well it predicts the timings it was not fitted on.

    >>> from simbench.calibrate.gridfit import shipped_grid_fit
    >>> fit = shipped_grid_fit()  # fit_grid(load_timing_grid(SHIPPED_GRID)), made once a process
    >>> fit.held_out_median_error < 0.05
    True

The grid's format is the stored H200 grid's (simbench/data/measurements/h200-2026-11): one JSON object
a line with model, layers, kind (padded | varlen), rows, row_length, documents, tokens, first_ms and
median_ms. A fit's predictions go through `TransformerCostModel`, so the fit and the simulator price a step the
same way; its solver evaluates the same prices written out per timing (`GridPrices`, held equal by the tests).
Each fitted term's uncertainty comes from a bootstrap over the grid's lines (`fit_uncertainty`), written in a
profile beside the term. It never imports torch: a grid timed elsewhere is fitted on any machine.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from simbench.calibrate.jsonlines import JsonLine, json_lines
from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.costmodels.hardware import HardwareProfile, load_hardware
from simbench.costmodels.model import MODEL_PRESETS, ModelSpec
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError

# A copy of ../shared/measurements/h200-2026-11 (one NVIDIA H200, PyTorch 2.11, bf16, eager; its README says how).
SHIPPED_GRID = Path(str(resources.files("simbench.data"))) / "measurements" / "h200-2026-11" / "grid.jsonl"
KINDS = ("padded", "varlen")
# The shortest step time a grid line may state: a forward and backward pass through a layer launches kernels
# for microseconds at least, so a shorter time is a unit mistake, and would drive the rates past their bounds.
STEP_MS_MIN = 1e-3
GRID_FIELDS = ("model", "layers", "kind", "rows", "row_length", "documents", "tokens", "first_ms", "median_ms")
# A line is a few bytes but its dimensions multiply, so its work is bounded before any is done. Its tokens x
# layers x model width: the largest step a grid times (16,384 tokens) through every layer of the widest preset
# (126 layers of 16,384) is 2^35; twice that is the bound.
TIMING_WORK_MAX = 1 << 36
# Batch elements (padded rows, varlen documents) the fit prices at each of its thousands of evaluations, at about
# a microsecond each: a line may hold 16 times the shipped grid's largest (256), the grid 9 times its 1,795 in all,
# so that pricing a grid costs at most about twice what pricing the shipped one does.
TIMING_ELEMENTS_MAX = 4_096
GRID_ELEMENTS_MAX = 16_384
# Lines a grid may hold: every evaluation of the fit prices each, so that a fit and its uncertainty end within
# seconds on 2 cores (the shipped grid holds 54, a model's GPU grid about 30).
GRID_TIMINGS_MAX = 512
# Eager PyTorch issues about 1,200 kernels a step for 24 encoder layers (the grid's README): 50 a layer.
# The count is held; the host's time per kernel is fitted, so only their product (the floor) matters.
GRID_KERNELS_PER_LAYER = 50
# FlashAttention's varlen kernels work on 128-token tiles of keys for head sizes up to 128: chosen, not
# fitted (the grid's 64-token documents, slower than its 128-token ones at equal tokens, agree).
VARLEN_TILE_TOKENS = 128
# A held-out timing: a mix of document lengths, or rows whose length is not a multiple of the tile (the
# grid's "new shapes"). The others fit the profile; these test it.
HELD_OUT_RULE = "varlen batches of mixed document lengths and padded rows whose length is not a multiple of 128"

# Fitted fields, each with (lower, upper) bounds and the scale the optimiser sees them in.
FITTED_FIELDS = {
    "linear_flops_per_s": ((1e12, 1e16), 1e15),
    "dense_half_saturation_width": ((0.0, 1e5), 1e3),
    "attention_flops_per_s": ((1e12, 1e16), 1e15),
    "half_saturation_tokens": ((0.0, 1e5), 1e3),
    "host_seconds_per_kernel": ((0.0, 1e-3), 1e-5),
    "varlen_floor_ratio": ((1.0, 3.0), 1.0),  # varlen steps launch at least the padded steps' kernels
    "varlen_causal_attention_fraction": ((0.05, 2.0), 1.0),
    "varlen_causal_half_length_tokens": ((0.0, 1e5), 1e3),
    "varlen_bidirectional_attention_fraction": ((0.05, 2.0), 1.0),
    "varlen_bidirectional_half_length_tokens": ((0.0, 1e5), 1e3),
}
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
          "varlen_bidirectional_attention_fraction": 0.6, "varlen_bidirectional_half_length_tokens": 200.0}


@dataclass(frozen=True)
class GridTiming:
    """One timed configuration of the grid: a model slice, a batch shape and its step times."""

    model: str
    layers: int
    kind: str
    rows: int
    row_length: int
    documents: tuple[int, ...] | None
    first_seconds: float
    median_seconds: float

    @property
    def tokens(self) -> int:
        return self.rows * self.row_length

    @property
    def held_out(self) -> bool:
        if self.kind == "varlen":
            return len(set(self.documents)) > 1
        return self.row_length % VARLEN_TILE_TOKENS != 0

    @property
    def first_sight_seconds(self) -> float:
        """The first step's time beyond the repeated steps' median: what the shape's being new cost, if it was."""
        return self.first_seconds - self.median_seconds

    @property
    def shape_key(self) -> tuple:
        """What makes a shape new to the process that timed it: the slice, the attention path and the tensor
        shape (a varlen batch's documents change only its cumulative lengths, not its shape)."""
        return self.model, self.layers, self.kind, self.rows, self.row_length


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
        return [{"timings": name, "count": len(errors), "median_abs_error": float(np.median(np.abs(errors))),
                 "max_abs_error": float(np.max(np.abs(errors)))} for name, errors in groups.items() if errors]


def load_timing_grid(path: str | Path) -> list[GridTiming]:
    """Read a timing grid (JSON lines); a bad line is an InputError naming the file and line."""
    timings, elements = [], 0
    for line in json_lines(path, "timing grid", GRID_FIELDS):
        if len(timings) == GRID_TIMINGS_MAX:
            raise line.error(f"the timing grid holds more than {GRID_TIMINGS_MAX:,} timings, more than its fit may "
                             "price at every step; split the grid")
        timings.append(_timing_of_line(line))
        elements += timing_elements(timings[-1])
        if elements > GRID_ELEMENTS_MAX:
            raise line.error(f"the timing grid's lines up to here hold {elements:,} padded rows and varlen documents, "
                             f"more than the {GRID_ELEMENTS_MAX:,} its fit may price at every step; split the grid")
    if not timings:
        raise InputError("the timing grid holds no timings", source=str(path))
    return timings


def _timing_of_line(line: JsonLine) -> GridTiming:
    record, bad = line.record, line.error
    if record["model"] not in MODEL_PRESETS:
        raise bad(f"unknown model {record['model']!r} (model presets: {', '.join(MODEL_PRESETS)})")
    if record["kind"] not in KINDS:
        raise bad(f"kind must be one of {', '.join(KINDS)}, found {record['kind']!r}")
    for key in ("layers", "rows", "row_length"):
        value = record[key]
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1 << 24:
            raise bad(f"{key} must be a whole number from 1 to {1 << 24}, found {value!r}")
    for key in ("first_ms", "median_ms"):
        value = record[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not STEP_MS_MIN <= value < 1e7:
            raise bad(f"{key} must be a time in milliseconds from {STEP_MS_MIN:g} (a microsecond: no training "
                      f"step of a layer is shorter) to 1e7, found {value!r}")
    documents = record["documents"]
    if record["kind"] == "varlen":
        if (not isinstance(documents, list) or not documents
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in documents)):
            raise bad("a varlen timing's documents must be a list of whole lengths >= 1")
        if sum(documents) != record["rows"] * record["row_length"] or record["rows"] != 1:
            raise bad(f"a varlen timing is one row whose documents fill it: {sum(documents)} document tokens "
                      f"in {record['rows']} x {record['row_length']}")
        documents = tuple(documents)
    elif documents is not None:
        raise bad("a padded timing has no documents (null)")
    timing = GridTiming(record["model"], record["layers"], record["kind"], record["rows"], record["row_length"],
                        documents, record["first_ms"] / 1e3, record["median_ms"] / 1e3)
    try:
        check_timing_work(timing)
    except InputError as error:
        raise bad(error.message) from None
    return timing


def timing_elements(timing: GridTiming) -> int:
    """The batch elements pricing a timing handles: its padded rows, or its varlen documents."""
    return timing.rows if timing.documents is None else len(timing.documents)


def check_timing_work(timing: GridTiming) -> None:
    """InputError where a timing's dimensions multiply past what a timed step holds (`TIMING_WORK_MAX`) or what
    pricing it at every step of a fit may take (`TIMING_ELEMENTS_MAX`): every reader of timing lines checks
    each line here before any work."""
    width = MODEL_PRESETS[timing.model].hidden
    work = timing.tokens * timing.layers * width
    if work > TIMING_WORK_MAX:
        raise InputError(f"rows x row_length x layers x model width = {timing.rows:,} x {timing.row_length:,} x "
                         f"{timing.layers:,} x {width:,} = {work:,}, more than {TIMING_WORK_MAX:,} (twice the largest "
                         "step a grid times through every layer of the widest model)")
    elements = timing_elements(timing)
    if elements > TIMING_ELEMENTS_MAX:
        what = "rows" if timing.documents is None else "documents"
        raise InputError(f"{elements:,} {what} in one timing, more than {TIMING_ELEMENTS_MAX:,} (the fit prices each "
                         "at every step)")


def slice_model(name: str, layers: int) -> ModelSpec:
    """The grid's slice of a model preset: its layers only (no embeddings, LM head or optimizer step)."""
    # A vocabulary of one makes a decoder's LM head cost nothing: the slice has none.
    return dataclasses.replace(MODEL_PRESETS[name], layers=layers, vocab=1)


def grid_base(base: HardwareProfile | str = "h200") -> dict:
    """The base profile's fields with what a slice's timing holds no trace of switched off: optimizer,
    input transfer, fixed step cost, per-kernel device gaps (absorbed in the rates), small-kernel groups."""
    data = load_hardware(base).model_dump()
    data.update(optimizer_seconds_per_parameter=0.0, step_overhead_seconds=0.0, input_bytes_per_token=0.0,
                kernel_launch_seconds=0.0, kernels_per_layer=GRID_KERNELS_PER_LAYER, shape_change_seconds=0.0,
                unpadded_kernels_per_layer=None,  # the grid's varlen batches are flat: no gathers to launch
                unpadded_flops_fraction=1.0, unpadded_noise_cv=0.0, unpad_group_half_saturation_tokens=0.0,
                varlen_tile_tokens=VARLEN_TILE_TOKENS, calibration=None)
    return data


def predict_grid(profile: HardwareProfile, timings: Sequence[GridTiming]) -> np.ndarray:
    """Each timing's step seconds as `TransformerCostModel` prices it on `profile`: padded rows in PADDED
    mode (one sequence filling each row), varlen batches in UNPADDED mode (their documents, no padding)."""
    predicted = np.empty(len(timings))
    groups: dict[tuple[str, int, str], list[int]] = {}
    for index, timing in enumerate(timings):
        groups.setdefault((timing.model, timing.layers, timing.kind), []).append(index)
    for (model, layers, kind), indices in groups.items():
        cost_model = TransformerCostModel(slice_model(model, layers), profile)
        batch_set = _batch_set([timings[i] for i in indices])
        mode = ExecutionMode.PADDED if kind == "padded" else ExecutionMode.UNPADDED
        predicted[indices] = cost_model.step_costs(batch_set, mode).total_seconds
    return predicted


def _batch_set(timings: Sequence[GridTiming]) -> BatchSet:
    """One batch per timing: padded rows each holding one sequence that fills it, or one row of documents."""
    lengths, sequence_row, row_slots, row_batch = [], [], [], []
    for batch, timing in enumerate(timings):
        first_row = len(row_slots)
        if timing.documents is None:
            lengths += [timing.row_length] * timing.rows
            sequence_row += range(first_row, first_row + timing.rows)
            row_slots += [timing.row_length] * timing.rows
            row_batch += [batch] * timing.rows
        else:
            lengths += timing.documents
            sequence_row += [first_row] * len(timing.documents)
            row_slots.append(timing.row_length)
            row_batch.append(batch)
    return BatchSet(np.array(lengths, dtype=np.int64), np.array(sequence_row, dtype=np.int64),
                    np.array(row_slots, dtype=np.int64), np.array(row_batch, dtype=np.int64), len(timings))


def _profile(base: dict, values: dict[str, float]) -> HardwareProfile:
    from pydantic import ValidationError

    data = {**base, **{k: v for k, v in values.items() if k != "varlen_floor_ratio"}}
    data["varlen_kernels_per_layer"] = round(GRID_KERNELS_PER_LAYER * values["varlen_floor_ratio"])
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as error:  # times far too short for their work: rates past any device's
        problems = "; ".join(f"{'.'.join(map(str, item['loc']))} {item['input']:.4g}: "
                             f"{item['msg'].removeprefix('Value error, ')}" for item in error.errors())
        raise InputError(f"the timing grid's steps fit terms no device has ({problems}); are its times in "
                         "milliseconds?") from None


@dataclass(frozen=True)
class GridPrices:
    """Each timing's step price on a `grid_base` profile as `TransformerCostModel` gives it, written out per timing
    as a function of the fitted terms (FITTED_FIELDS), so that a fit prices every timing at once, at several
    points in one call: microseconds an evaluation, where building a profile and cost models took milliseconds.
    tests/test_gridfit.py holds it equal to `predict_grid`. A step takes the longer of its device time and the
    host's launch floor:

        device = (tokens + half_saturation_tokens) / tokens x (dense + attention)
        dense = linear FLOPs x (width + dense_half_saturation_width) / (width x linear_flops_per_s)
        attention = attention FLOPs / attention_flops_per_s on padded rows; on varlen batches the sum over
                    documents of FLOPs per token^2 x tiled keys x (length + half_length) / (rate x fraction)
        floor = layers x GRID_KERNELS_PER_LAYER x host_seconds_per_kernel (x varlen_floor_ratio if varlen)
    """

    tokens: np.ndarray
    linear_flops: np.ndarray
    linear_flops_per_width: np.ndarray
    attention_flops: np.ndarray  # padded rows' attention (0 for varlen batches)
    varlen_flops: np.ndarray  # a varlen batch's FLOPs per token^2 x sum of tiled keys x length (0 if padded)
    varlen_flops_per_half_length: np.ndarray  # ... x sum of tiled keys: what each token of half-length adds
    floor_kernels: np.ndarray  # layers x GRID_KERNELS_PER_LAYER
    varlen: np.ndarray
    decoder: np.ndarray

    @classmethod
    def of(cls, timings: Sequence[GridTiming]) -> GridPrices:
        columns: dict[str, list] = {name: [] for name in cls.__dataclass_fields__}
        for timing in timings:
            model = slice_model(timing.model, timing.layers)
            linear, attention = float(model.linear_flops_per_token), float(model.attention_flops_per_token_squared)
            varlen = timing.documents is not None
            lengths = np.array(timing.documents if varlen else (), dtype=np.float64)
            keys = np.ceil(lengths / VARLEN_TILE_TOKENS) * VARLEN_TILE_TOKENS
            for name, value in (("tokens", float(timing.tokens)), ("linear_flops", linear * timing.tokens),
                                ("linear_flops_per_width", linear * timing.tokens / model.hidden),
                                ("attention_flops", 0.0 if varlen else attention * timing.rows * timing.row_length**2),
                                ("varlen_flops", attention * float(keys @ lengths)),
                                ("varlen_flops_per_half_length", attention * float(keys.sum())),
                                ("floor_kernels", float(timing.layers * GRID_KERNELS_PER_LAYER)),
                                ("varlen", varlen), ("decoder", model.is_decoder)):
                columns[name].append(value)
        return cls(**{name: np.array(values) for name, values in columns.items()})

    def take(self, indices: np.ndarray) -> GridPrices:
        """The prices of the timings at `indices` (repeats allowed: a bootstrap resample)."""
        return GridPrices(**{name: getattr(self, name)[indices] for name in self.__dataclass_fields__})

    def seconds(self, values: np.ndarray) -> np.ndarray:
        return np.exp(self.log_seconds(values))

    def log_seconds(self, values: np.ndarray) -> np.ndarray:
        """The log of each timing's step seconds at `values` (in FITTED_FIELDS' order); values of shape (terms,
        points) give a row of logs per point."""
        values = np.asarray(values, dtype=np.float64)[..., np.newaxis]
        (linear_rate, half_width, attention_rate, half_tokens, host_seconds, floor_ratio,
         causal_fraction, causal_half, bidirectional_fraction, bidirectional_half) = values
        fraction = np.where(self.decoder, causal_fraction, bidirectional_fraction)
        half_length = np.where(self.decoder, causal_half, bidirectional_half)
        dense = (self.linear_flops + self.linear_flops_per_width * half_width) / linear_rate
        varlen = (self.varlen_flops + self.varlen_flops_per_half_length * half_length) / (attention_rate * fraction)
        device = (self.tokens + half_tokens) / self.tokens * (dense + self.attention_flops / attention_rate + varlen)
        floor = self.floor_kernels * host_seconds * np.where(self.varlen, floor_ratio, 1.0)
        return np.log(np.maximum(device, floor))


@dataclass(frozen=True)
class _Coordinates:
    """The solver's coordinates: each fitted term over its scale, within its bounds; the terms a grid holds no
    evidence for are held at fixed values."""

    scales: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    held: np.ndarray  # True where the term is held at `held_values`
    held_values: np.ndarray
    start: np.ndarray  # the usual start, within the bounds

    @classmethod
    def of(cls, timings: Sequence[GridTiming]) -> _Coordinates:
        names = list(FITTED_FIELDS)
        gpu_scales = np.array([FITTED_FIELDS[name][1] for name in names])
        # The solver's coordinates are a GPU's values over their scales: bounds and start carry over to a slower
        # device with its rates' scales multiplied by how much slower it is.
        rate_scale = _rate_scale(timings)
        scales = gpu_scales * np.array([rate_scale if name in RATE_FIELDS else 1.0 for name in names])
        held: dict[str, float] = {}
        # One width cannot tell a width effect from the rate: the rate takes it all.
        if len({MODEL_PRESETS[t.model].hidden for t in timings}) < 2:
            held["dense_half_saturation_width"] = 0.0
        # A direction of attention the grid never ran varlen keeps dense attention's rate.
        if not any(MODEL_PRESETS[t.model].is_decoder and t.kind == "varlen" for t in timings):
            held.update(varlen_causal_attention_fraction=1.0, varlen_causal_half_length_tokens=0.0)
        if not any(not MODEL_PRESETS[t.model].is_decoder and t.kind == "varlen" for t in timings):
            held.update(varlen_bidirectional_attention_fraction=1.0, varlen_bidirectional_half_length_tokens=0.0)
        lower = np.array([FITTED_FIELDS[name][0][0] for name in names]) / gpu_scales
        upper = np.array([FITTED_FIELDS[name][0][1] for name in names]) / gpu_scales
        start = np.clip(np.array([_START[name] for name in names]) / gpu_scales, lower + 1e-9, upper - 1e-9)
        return cls(scales, lower, upper, np.array([name in held for name in names]),
                   np.array([held.get(name, 0.0) for name in names]), start)

    def values(self, scaled: np.ndarray) -> np.ndarray:
        """The terms' values at the solver's coordinates (terms x points for several points)."""
        shape = (-1,) + (1,) * (np.ndim(scaled) - 1)
        return np.where(self.held.reshape(shape), self.held_values.reshape(shape), scaled * self.scales.reshape(shape))


def _fit_values(timings: Sequence[GridTiming]) -> dict[str, float]:
    """Least squares on log step times (every timing counts by its relative error)."""
    coordinates = _Coordinates.of(timings)
    prices = GridPrices.of(timings)
    measured = np.log([timing.median_seconds for timing in timings])
    # The cost has several local minima (a faster host per kernel against a slower rate, a saturation that
    # trades with the attention rate); which one an adaptive solver reaches from one start differed between
    # machines. Every start of a fixed set is solved to tight tolerances with fixed coordinate scales, and the
    # lowest cost wins (the earliest start on a tie), so the same grid gives the same profile anywhere.
    best = None
    with _one_blas_thread():
        for point in _starts(coordinates.start, coordinates.lower, coordinates.upper):
            for x_scale in FIT_COORDINATE_SCALES:
                solution = _solve(prices, measured, coordinates, point, x_scale)
                if best is None or solution.cost < best.cost * (1 - FIT_TIE_RELATIVE):
                    best = solution
    return dict(zip(FITTED_FIELDS, coordinates.values(best.x).tolist()))


def _one_blas_thread():
    """BLAS on one thread while a fit solves: its small matrices gain nothing from threads, which on a busy
    machine made each step many times slower, and a result should not depend on the thread count."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def _solve(prices: GridPrices, measured_log_seconds: np.ndarray, coordinates: _Coordinates, start: np.ndarray,
           x_scale, evaluations_max: int = FIT_EVALUATIONS_MAX):
    """One start's least squares, in the solver's coordinates."""
    from scipy.optimize import least_squares

    def residuals(scaled: np.ndarray) -> np.ndarray:
        return prices.log_seconds(coordinates.values(scaled)) - measured_log_seconds

    def jacobian(scaled: np.ndarray) -> np.ndarray:
        # Forward differences, as scipy's "2-point" scheme takes them (a step of sqrt(eps) x max(1, |x|), backwards
        # where forwards leaves the bounds), every term's step priced in one call. The cost is not smooth where a
        # step meets its launch floor, and which minimum a start reaches depends on how derivatives are taken:
        # exact ones reach others (on the shipped grid, from one start, one of 3 % lower cost); the shipped
        # profile is the minimum these differences reach.
        steps = _FORWARD_STEP * np.where(scaled >= 0, 1.0, -1.0) * np.maximum(1.0, np.abs(scaled))
        steps = np.where((scaled + steps > coordinates.upper) | (scaled + steps < coordinates.lower), -steps, steps)
        moved = scaled[:, np.newaxis] + np.diag(steps)
        steps = np.diag(moved) - scaled
        base = residuals(scaled)
        return ((prices.log_seconds(coordinates.values(moved)) - measured_log_seconds - base) / steps[:, np.newaxis]).T

    return least_squares(residuals, start, jac=jacobian, bounds=(coordinates.lower, coordinates.upper),
                         x_scale=x_scale, ftol=FIT_TOLERANCE, xtol=FIT_TOLERANCE, gtol=FIT_TOLERANCE,
                         max_nfev=evaluations_max)


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

    return {"first_sight_padded_seconds": median("padded"), "first_sight_varlen_seconds": median("varlen")}


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


def check_evidence(timings: Sequence[GridTiming]) -> None:
    """InputError unless the timings hold at least as many distinct shapes as the fit has terms, and padded
    shapes of more than one token count (else the saturation and the floor cannot be told from the rate): the
    same timing written many times is one piece of evidence, and a fit on it would return its start values."""
    shapes = {(t.model, t.layers, t.kind, t.rows, t.row_length, t.documents) for t in timings}
    if len(shapes) < len(FITTED_FIELDS):
        raise InputError(f"the timing grid has {len(shapes)} distinct shapes to fit {len(FITTED_FIELDS)} terms on "
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
    partial = _profile(base_data, _fit_values(held_in))
    held_out_predicted = predict_grid(partial, held_out) if held_out else np.zeros(0)
    values = _fit_values(timings)
    base_data.update(first_sight_fields(timings))
    profile = _profile(base_data, values)
    return GridFit(profile, timings, predict_grid(profile, timings), held_out_predicted, values)


# Each fitted term's uncertainty: its standard deviation over bootstrap resamples of the grid's lines, drawn within
# each model and attention path (so that every resample holds the kinds of timing each term needs), each refitted
# from the fit's own minimum. 64 resamples state a standard deviation to about 10 % (1 / sqrt(2 x 63)).
BOOTSTRAP_RESAMPLES = 64
BOOTSTRAP_SEED = 0
BOOTSTRAP_EVALUATIONS_MAX = 100
BOOTSTRAP_RULE = (f"one standard deviation over {BOOTSTRAP_RESAMPLES} bootstrap resamples of the grid's lines, drawn "
                  f"within each model and attention path (seed {BOOTSTRAP_SEED}), each refitted from the fit's minimum")
# The shipped grid's uncertainty, which the h200 preset states: written by `python -m simbench.calibrate.gridfit`.
SHIPPED_UNCERTAINTY = SHIPPED_GRID.with_name("grid_uncertainty.json")
# The profile field each fitted term sets, and the factor from the term to the field.
_FIELD_OF_TERM = {"varlen_floor_ratio": ("varlen_kernels_per_layer", GRID_KERNELS_PER_LAYER)}


def fit_uncertainty(fit: GridFit, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, float]:
    """Each fitted profile field's uncertainty (BOOTSTRAP_RULE), in the field's units. A term the timings hold no
    evidence for is left out: one held fixed, or one no timing's price moves with at the fit (a launch floor no
    step reaches), which a resample would leave where it is."""
    timings = fit.timings
    coordinates, prices = _Coordinates.of(timings), GridPrices.of(timings)
    measured = np.log([timing.median_seconds for timing in timings])
    fitted = np.array([fit.values[name] for name in FITTED_FIELDS])
    start = np.clip(np.where(coordinates.held, coordinates.start, fitted / coordinates.scales), coordinates.lower,
                    coordinates.upper)
    groups: dict[tuple[str, str], list[int]] = {}
    for index, timing in enumerate(timings):
        groups.setdefault((timing.model, timing.kind), []).append(index)
    rng = np.random.default_rng(seed)
    draws = []
    with _one_blas_thread():
        for _ in range(resamples):
            lines = np.concatenate([rng.choice(members, len(members)) for members in groups.values()])
            solution = _solve(prices.take(lines), measured[lines], coordinates, start, 1.0, BOOTSTRAP_EVALUATIONS_MAX)
            draws.append(coordinates.values(solution.x))
    spread = np.std(draws, axis=0, ddof=1)
    uncertainty = {}
    for index, name in enumerate(FITTED_FIELDS):
        if coordinates.held[index] or not _moves_a_price(prices, fitted, index, coordinates.scales[index]):
            continue
        field, factor = _FIELD_OF_TERM.get(name, (name, 1))
        # Three digits: a standard deviation of 64 resamples is itself known to about 10 %.
        uncertainty[field] = float(f"{spread[index] * factor:.3g}")
    return uncertainty


def _moves_a_price(prices: GridPrices, values: np.ndarray, index: int, scale: float) -> bool:
    """Whether any timing's price changes with the term at `index` a millionth of its value (or scale) either side
    of `values`."""
    step = max(abs(values[index]), scale) * 1e-6
    moved = np.repeat(values[:, np.newaxis], 2, axis=1)
    moved[index] += (-step, step)
    return bool(np.any(prices.log_seconds(moved) != prices.log_seconds(values)))


def fitted_profile(fit: GridFit, base: HardwareProfile | str, source: str) -> HardwareProfile:
    """The base profile with the grid's fitted terms, marked measured, each with its uncertainty
    (`fit_uncertainty`), and the raw timings kept."""
    fitted = {name: getattr(fit.profile, name) for name in GRID_PROFILE_FIELDS}
    base_profile = load_hardware(base)
    provenance = {**base_profile.provenance, **{name: f"fitted: {source}" for name in GRID_PROFILE_FIELDS}}
    uncertainty = {**{name: value for name, value in base_profile.uncertainty.items() if name not in fitted},
                   **fit_uncertainty(fit)}
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
# The first-sight terms a grid fit gives; the h200 preset takes them from a measurement of its own instead
# (many shapes, each new to a fresh process: `simbench.calibrate.firstsight`).
FIRST_SIGHT_FIELDS = ("first_sight_padded_seconds", "first_sight_varlen_seconds")


def shipped_uncertainty_record() -> dict:
    """What SHIPPED_UNCERTAINTY holds: the shipped grid fit's uncertainty (`fit_uncertainty`) and how it was made."""
    return {"grid": SHIPPED_GRID.name, "rule": BOOTSTRAP_RULE, "written by": "python -m simbench.calibrate.gridfit",
            "uncertainty": fit_uncertainty(shipped_grid_fit())}


if __name__ == "__main__":
    SHIPPED_UNCERTAINTY.write_text(json.dumps(shipped_uncertainty_record(), indent=1) + "\n")
    print(SHIPPED_UNCERTAINTY)
