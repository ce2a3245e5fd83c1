"""Times a measurement's batches: every batch once, strategy after strategy, before anything repeats (its
first-sight step where its shape is new to the process), then in rounds (its repeated step), with the held-out
calibration batches timed in the same rounds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from simbench.calibrate.batches import TorchBatch, batch_for_layout
from simbench.calibrate.calibration import MIN_ROW_LENGTH, timed_shape
from simbench.calibrate.layout import BatchLayout
from simbench.calibrate.measure import BASELINE, MeasureSettings
from simbench.calibrate.noisefit import MEASURE_REPEATS_MIN
from simbench.calibrate.timing import StepTiming, build_trainer, load_adjusted, time_batches
from simbench.costmodels.base import ExecutionMode

@dataclass(frozen=True)
class MeasuredSteps:
    """Median measured seconds of every timed batch, per strategy, and each round's seconds
    (steps, rounds) with that round's load factored out: their spread is the timing noise.

    `first_seconds` holds each batch's first step (timed before any batch repeats, the pass's load factored
    out as a round's) and `new_shape` whether its shape was new to the process then; None where no first
    steps were timed.
    """

    layouts: dict[str, list[BatchLayout]]
    seconds: dict[str, np.ndarray]
    spread_fractions: dict[str, np.ndarray]
    round_seconds: dict[str, np.ndarray] | None = None
    first_seconds: dict[str, np.ndarray] | None = None
    new_shape: dict[str, np.ndarray] | None = None
    baseline: str = BASELINE
    first_pass_factor: float = 1.0  # how much slower the first pass ran than the median round (factored out)
    repeats: int | None = None  # rounds timed (a deadline may have stopped them early); None: not recorded

    def first_sight_step_seconds(self, name: str) -> float:
        """The strategy's mean step at first sight: its repeated steps, plus what its steps at new shapes took
        beyond their repeated time in all, if more than nothing (a first step costs at least a later one: over
        a strategy's new shapes, less is timing noise)."""
        repeated = self.seconds[name]
        new = self.new_shape[name]
        extra = float((self.first_seconds[name][new] - repeated[new]).sum())
        return float(repeated.mean()) + max(0.0, extra) / repeated.size


@dataclass(frozen=True)
class FirstPass:
    """Each batch's first step, in seconds, and whether its shape was new to the process then."""

    seconds: np.ndarray
    new_shape: np.ndarray


@dataclass(frozen=True)
class CalibrationSteps:
    """The calibration batches timed alongside: raw rounds, load-adjusted seconds and first steps."""

    timings: list[StepTiming]
    seconds: np.ndarray
    first: FirstPass


def warmup_layouts(layouts: Sequence[BatchLayout]) -> list[BatchLayout]:
    """One small batch for each way the layouts attend (no mask, a dense mask, a block mask, per sequence,
    un-padded), of a shape
    none of a measurement's batches has: it loads each kernel path before the first-sight pass, so that a
    first step measures its shape being new, not its code running for the first time in the process."""
    kinds = {layout.shape_key[0] for layout in layouts}
    length = MIN_ROW_LENGTH
    halves = [[length // 2, length // 2]]
    candidates = {"dense": BatchLayout.padded([length], length),
                  "dense mask": BatchLayout.packed(halves, length, ExecutionMode.PACKED_DENSE_MASK),
                  "block mask": BatchLayout.packed(halves, length, ExecutionMode.PACKED_BLOCK_MASK),
                  "per-sequence": BatchLayout.packed(halves, length, ExecutionMode.PACKED_VARLEN),
                  "unpadded": BatchLayout.unpadded([length // 2, length // 2 - 1])}
    return [layout for kind, layout in candidates.items() if kind in kinds]


def first_pass(trainer, batches: Sequence[TorchBatch], layouts: Sequence[BatchLayout], seen: set,
               progress: Callable[[], None] = lambda: None) -> FirstPass:
    """Each batch stepped once, in order, timed; `seen` (the shape keys the process has run) grows as it goes."""
    seconds, new = np.zeros(len(batches)), np.zeros(len(batches), dtype=bool)
    for index, (batch, layout) in enumerate(zip(batches, layouts)):
        new[index] = layout.shape_key not in seen
        seen.add(layout.shape_key)
        seconds[index] = trainer.timed_step_seconds(batch)
        progress()
    return FirstPass(seconds, new)


def time_strategies(layouts: dict[str, list[BatchLayout]], settings: MeasureSettings,
                    progress: Callable[[], None] = lambda: None,
                    calibration_batches: Sequence[TorchBatch] = (),
                    calibration_layouts: Sequence[BatchLayout] = (),
                    baseline: str = BASELINE, deadline: float | None = None) -> tuple[MeasuredSteps, CalibrationSteps]:
    """Time every strategy's batches: a warm-up on shapes none of them has, then each batch once, strategy
    after strategy in the order given (first sight), then rounds over all of them in a random order, so that
    noise from other processes hits every strategy alike (repeated).

    `calibration_batches` (with their `calibration_layouts`) are stepped once after the strategies' and
    timed in the same rounds, so that a profile fitted to them saw the same machine load as the measured
    steps (on a shared machine the load drifts within minutes); their timings come back alongside.

    With a `deadline` (`time.monotonic()` seconds) the rounds stop, after MEASURE_REPEATS_MIN of them, before one
    that would end past it (`timing.time_batches`): a time budget holds where the steps run slower than it was
    sized for. `MeasuredSteps.repeats` says how many ran.
    """
    torch.set_num_threads(settings.threads)
    shape = timed_shape(settings.model)
    rng = np.random.default_rng(settings.seed + 1)
    names = list(layouts)
    attention = settings.attention
    trainer = build_trainer(shape, settings.device, settings.seed, settings.cpu_clock)

    def on_device(batch_layouts: Sequence[BatchLayout]) -> list[TorchBatch]:
        return [batch_for_layout(layout, shape.vocabulary, rng, attention).to(trainer.device)
                for layout in batch_layouts]

    batches = {name: on_device(layouts[name]) for name in names}
    calibration = [batch.to(trainer.device) for batch in calibration_batches]
    warmups = warmup_layouts([layout for name in names for layout in layouts[name]] + list(calibration_layouts))
    time_batches(trainer, on_device(warmups), warmup=settings.warmup, repeats=0, progress=progress)
    seen = {layout.shape_key for layout in warmups}
    firsts = {name: first_pass(trainer, batches[name], layouts[name], seen, progress) for name in names}
    calibration_first = first_pass(trainer, calibration, calibration_layouts, seen, progress)
    interleaved = [batches[name][step] for step in range(settings.steps) for name in names]
    timings = time_batches(trainer, interleaved + calibration, warmup=0, repeats=settings.repeats,
                           progress=progress, order_rng=np.random.default_rng(settings.seed + 2), deadline=deadline,
                           fewest_repeats=MEASURE_REPEATS_MIN)
    # Load factored out over all timed batches, the calibration ones included, on one common scale.
    load = load_adjusted(timings)
    adjusted = load.seconds
    by_round = np.array([timing.samples_seconds for timing in timings]) / load.round_factors[None, :]
    positions = {name: [step * len(names) + index for step in range(settings.steps)]
                 for index, name in enumerate(names)}
    seconds = {name: adjusted[rows] for name, rows in positions.items()}
    spreads = {name: np.array([timings[row].spread_fraction for row in rows]) for name, rows in positions.items()}
    round_seconds = {name: by_round[rows] for name, rows in positions.items()}
    # The first pass's own load, from its steps at shapes seen before (nothing new to pay), factored out.
    factor = first_pass_factor([*firsts.values(), calibration_first],
                               [*(seconds[name] for name in names), adjusted[len(interleaved):]])
    firsts = {name: FirstPass(first.seconds / factor, first.new_shape) for name, first in firsts.items()}
    calibration_first = FirstPass(calibration_first.seconds / factor, calibration_first.new_shape)
    measured = MeasuredSteps(layouts, seconds, spreads, round_seconds,
                             {name: first.seconds for name, first in firsts.items()},
                             {name: first.new_shape for name, first in firsts.items()}, baseline, factor,
                             repeats=len(timings[0].samples_seconds))
    return measured, CalibrationSteps(timings[len(interleaved):], adjusted[len(interleaved):], calibration_first)


def probed_flops_per_s(layout: BatchLayout, settings: MeasureSettings) -> float:
    """The training FLOP/s one step of `layout` runs at on this machine now, in wall-clock seconds (a step after one
    untimed): what a time budget on a device without a profile is sized with, the machine's load included."""
    torch.set_num_threads(settings.threads)
    shape = timed_shape(settings.model)
    trainer = build_trainer(shape, settings.device, settings.seed, cpu_clock=False)
    attention = settings.attention
    batch = batch_for_layout(layout, shape.vocabulary, np.random.default_rng(settings.seed), attention)
    batch = batch.to(trainer.device)
    trainer.step(batch)
    return settings.model.training_flops(layout.row_slots) / trainer.timed_step_seconds(batch)


def first_pass_factor(firsts: Sequence[FirstPass], repeated: Sequence[np.ndarray]) -> float:
    """How much slower the first pass ran than the median round: the median of first over repeated seconds of
    its steps at shapes already seen (1 when it has none)."""
    ratios = np.concatenate([first.seconds[~first.new_shape] / np.asarray(seconds)[~first.new_shape]
                             for first, seconds in zip(firsts, repeated)])
    return float(np.median(ratios)) if ratios.size else 1.0


def measure_steps(settings: MeasureSettings, layouts: dict[str, list[BatchLayout]],
                  calibration_layouts: Sequence[BatchLayout]) -> int:
    """Training steps `time_strategies` takes, for a progress bar."""
    strategy_layouts_ = [layout for batches in layouts.values() for layout in batches]
    warmups = warmup_layouts(strategy_layouts_ + list(calibration_layouts))
    timed = len(strategy_layouts_) + len(calibration_layouts)
    return settings.warmup * len(warmups) + (settings.repeats + 1) * timed


def first_sight_fields(layouts: Sequence[BatchLayout], first: FirstPass, repeated_seconds: np.ndarray
                       ) -> dict[str, float]:
    """The profile's first-sight costs from batches timed at first sight and repeated, once per distinct shape
    (not per layer): per attention path (flat un-padded batches: varlen; rows: padded), the median over the
    batches whose shape was new of (first step - repeated step), at least 0; 0 for a path no new shape showed."""
    extra = first.seconds - np.asarray(repeated_seconds)
    varlen = np.array([layout.mode is ExecutionMode.UNPADDED for layout in layouts], dtype=bool)

    def median(chosen: np.ndarray) -> float:
        picked = extra[first.new_shape & chosen]
        return max(0.0, float(np.median(picked))) if picked.size else 0.0

    # The figures are what showed at these steps, hidden by nothing more.
    return {"first_sight_padded_seconds": median(~varlen), "first_sight_varlen_seconds": median(varlen),
            "first_sight_hidden_seconds": 0.0}
