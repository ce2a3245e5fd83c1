"""Measured versus simulated: real training steps per strategy against the cost model's prediction
for exactly the batches that were timed, at first sight of each batch shape and repeated.

The first time a process runs a batch shape it pays for kernel selection and new allocations. measure
times every batch once, strategy after strategy, before anything repeats (its first-sight step where its
shape is new to the process), then in rounds (its repeated step). `compare` sets measured against
predicted speed-ups for both: predicted repeated steps are the cost model's price, predicted first-sight
steps add the profile's first-sight cost to the steps whose shape was new.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from simbench.calibrate.batches import TorchBatch, batch_for_layout
from simbench.calibrate.calibration import MIN_ROW_LENGTH, default_unpadded_attention, timed_shape
from simbench.calibrate.fit import step_seconds_by_term
from simbench.calibrate.layout import BatchLayout
from simbench.calibrate.noisefit import MIN_STEPS as NOISE_MIN_STEPS, NoiseFit, check_measure_repeats, fit_step_noise
from simbench.calibrate.timing import (StepTiming, build_trainer, check_timed_work, load_adjusted, time_batches,
                                       uses_cpu_clock)
from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.hardware import HardwareProfile
from simbench.costmodels.model import ModelSpec
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.strategies import get_strategy
from simbench.validation import check_seed, check_whole_number

STRATEGIES = ("padding", "sort", "lpfhp", "unpadding")
BASELINE = "padding"
ERROR_TARGET = 0.10  # largest |predicted / measured speed-up - 1| a strategy may show


@dataclass(frozen=True)
class MeasureSettings:
    """What `simbench measure` runs: `steps` batches of `batch_size` rows per strategy."""

    model: ModelSpec
    max_length: int
    device: str
    threads: int
    steps: int = 16
    batch_size: int = 16
    repeats: int = 3
    warmup: int = 2
    seed: int = 0
    max_depth: int | None = None
    unpadded_attention: str | None = None  # default: the fastest this device supports
    wall_clock: bool = False  # force wall-clock timing where CPU seconds would be used
    strategies: int = len(STRATEGIES)  # how many strategies are timed, for the work limit

    def __post_init__(self):
        check_whole_number(self.max_length, "max_length", minimum=MIN_ROW_LENGTH)
        for name in ("threads", "steps", "batch_size", "strategies"):
            check_whole_number(getattr(self, name), name, minimum=1)
        check_measure_repeats(self.repeats)
        check_seed(self.seed)
        self._check_work()

    @property
    def passes(self) -> int:
        """Steps each batch takes: the first-sight pass, the repeated rounds, and one for warm-up and load."""
        return self.repeats + 2

    def _check_work(self) -> None:
        """Refuse, before building anything, timings that would take longer than a measurement should."""
        timed_batches = self.strategies * self.steps * self.passes
        flops = timed_batches * self.batch_size * float(self.model.training_flops([self.max_length]))
        check_timed_work(flops, self.device, f"timing {self.strategies} strategies x {self.steps:,} steps x "
                         f"{self.repeats:,} repeats of {self.batch_size:,} rows of {self.max_length:,} tokens",
                         "lower the steps, repeats, batch size or row length", parameter="steps")

    def check_layouts(self, layouts: dict[str, list[BatchLayout]]) -> None:
        """Refuse the batches as built (token budgets and length groups hold more rows than `batch_size`)."""
        flops = self.passes * sum(float(self.model.training_flops(layout.row_slots))
                                  for batches in layouts.values() for layout in batches)
        check_timed_work(flops, self.device, f"timing the {sum(map(len, layouts.values())):,} batches of "
                         f"{len(layouts)} strategies {self.passes} times each",
                         "lower the steps, repeats, batch size or row length, or measure fewer strategies",
                         parameter="steps")

    @property
    def cpu_clock(self) -> bool:
        return uses_cpu_clock(self.device, self.threads, self.wall_clock)


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


def budgeted_passes(layouts: dict[str, list[BatchLayout]], model: ModelSpec, device: str,
                    profile: HardwareProfile | None, calibration_batches: int, seconds: float | None,
                    steps: int | None, repeats: int | None) -> Budget:
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
    per_step, first_sight, source = estimated_step_seconds(layouts, model, device, profile)
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
        "set them"))


def estimated_step_seconds(layouts: dict[str, list[BatchLayout]], model: ModelSpec, device: str,
                           profile: HardwareProfile | None) -> tuple[dict[str, float], float, str]:
    """Each strategy's mean step in seconds, as the profile prices it (on CUDA without one, the h200 preset's),
    else on a CPU its FLOPs at the rate `timing.check_timed_work` assumes; what one step of every strategy at a new
    shape adds (the profile's first-sight costs; 0 without a profile); and where the estimate comes from."""
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
    rate = assumed_flops_per_s(device)
    seconds = {name: float(np.mean([model.training_flops(layout.row_slots) for layout in batches])) / rate
               for name, batches in layouts.items()}
    return seconds, 0.0, f"its FLOPs at {rate:.1e} FLOP/s"


def rescale_histogram(histogram: LengthHistogram, max_length: int) -> LengthHistogram:
    """The histogram with every length scaled by max_length / histogram.max_length (rounded up, so
    no sequence vanishes); unchanged when it already fits."""
    if histogram.max_length <= max_length:
        return histogram
    scaled = np.ceil(histogram.lengths * max_length / histogram.max_length).astype(np.int64)
    counts = np.bincount(scaled, weights=histogram.counts, minlength=max_length + 1)[1:]
    return LengthHistogram(counts.astype(np.int64), name=f"{histogram.name} scaled to {max_length}")


def strategy_layouts(histogram: LengthHistogram, settings: MeasureSettings, rng: np.random.Generator,
                     steps: int | None = None) -> dict[str, list[BatchLayout]]:
    """`steps` batches per strategy (default: the settings'), drawn from the histogram."""
    steps = settings.steps if steps is None else steps
    rows, max_length = settings.batch_size, settings.max_length
    padding_lengths = histogram.sample_lengths(steps * rows, rng).reshape(steps, rows)
    unpadding_lengths = histogram.sample_lengths(steps * rows, rng).reshape(steps, rows)
    sorted_lengths = np.sort(histogram.sample_lengths(steps * rows, rng)).reshape(steps, rows)
    return {
        "padding": [BatchLayout.padded(lengths, max_length) for lengths in padding_lengths],
        "sort": [BatchLayout.padded(lengths, int(lengths.max()), ExecutionMode.SORTED)
                 for lengths in rng.permutation(sorted_lengths)],
        "lpfhp": _packed_layouts(histogram, settings, rng, steps),
        "unpadding": [BatchLayout.unpadded(lengths) for lengths in unpadding_lengths],
    }


def _packed_layouts(histogram: LengthHistogram, settings: MeasureSettings, rng: np.random.Generator,
                    steps: int) -> list[BatchLayout]:
    """Packs made by lpfhp from a pool of sequences, a random choice of them per batch."""
    packs_needed = steps * settings.batch_size
    # The pool must give enough packs; a pack of max_length holds at most max_length sequences.
    pool = histogram.sample_lengths(packs_needed * max(2, int(np.ceil(histogram.theoretical_speedup)) + 1), rng)
    pool_histogram = LengthHistogram.from_lengths(pool, settings.max_length, name=histogram.name)
    packing = get_strategy("lpfhp")(pool_histogram, settings.max_length, settings.max_depth)
    # Each pack by its index into the flat form: a dense table of deep packs may not fit in memory.
    packs = np.repeat(np.arange(packing.strategies_used), packing.repeats)
    if len(packs) < packs_needed:
        raise InputError(f"lpfhp made {len(packs)} packs, fewer than the {packs_needed} needed")
    chosen = packs[rng.permutation(len(packs))[:packs_needed]].reshape(steps, settings.batch_size)
    lengths, starts = packing.pack_lengths, packing.pack_starts
    return [BatchLayout.packed([lengths[starts[pack]:starts[pack + 1]] for pack in batch], settings.max_length)
            for batch in chosen]


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
                    baseline: str = BASELINE) -> tuple[MeasuredSteps, CalibrationSteps]:
    """Time every strategy's batches: a warm-up on shapes none of them has, then each batch once, strategy
    after strategy in the order given (first sight), then rounds over all of them in a random order, so that
    noise from other processes hits every strategy alike (repeated).

    `calibration_batches` (with their `calibration_layouts`) are stepped once after the strategies' and
    timed in the same rounds, so that a profile fitted to them saw the same machine load as the measured
    steps (on a shared machine the load drifts within minutes); their timings come back alongside.
    """
    torch.set_num_threads(settings.threads)
    shape = timed_shape(settings.model)
    rng = np.random.default_rng(settings.seed + 1)
    names = list(layouts)
    attention = settings.unpadded_attention or default_unpadded_attention(settings.device)
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
                           progress=progress, order_rng=np.random.default_rng(settings.seed + 2))
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
                             {name: first.new_shape for name, first in firsts.items()}, baseline, factor)
    return measured, CalibrationSteps(timings[len(interleaved):], adjusted[len(interleaved):], calibration_first)


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

    return {"first_sight_padded_seconds": median(~varlen), "first_sight_varlen_seconds": median(varlen)}


def per_step_speedups(measured: MeasuredSteps) -> pd.DataFrame:
    """Each timed step's real tokens per second over padding's mean, one column per strategy: the
    per-step speed-up samples a Gumbel straggler fit takes (`simbench gumbel --samples`)."""
    baseline = measured.baseline
    if baseline not in measured.layouts:
        raise InputError(f"per-step speed-ups need the {baseline!r} baseline among the strategies")

    def tokens_per_s(name: str) -> np.ndarray:
        return np.array([layout.real_tokens for layout in measured.layouts[name]]) / measured.seconds[name]

    # The reference is padding's overall throughput, as `compare` has it (tokens over seconds, summed).
    padding_tokens_per_s = (sum(layout.real_tokens for layout in measured.layouts[baseline])
                            / measured.seconds[baseline].sum())
    steps = {name: tokens_per_s(name) / padding_tokens_per_s for name in measured.layouts}
    return pd.DataFrame({"step": np.arange(measured.seconds[baseline].size), **steps})


def compare(measured: MeasuredSteps, model: ModelSpec, profile: HardwareProfile) -> pd.DataFrame:
    """One row per strategy: measured and predicted throughput, speed-up over padding, and the
    predicted step seconds split by cost-model term next to the measured step seconds; the same at
    first sight where first steps were timed (NaN where not).

    Repeated: every shape seen (the rounds' medians against the cost model's price). First sight: each step
    whose shape was new to the process when it first ran (`new_shape_steps` of them) at its first step
    (`MeasuredSteps.first_sight_step_seconds`), against the price plus the profile's first-sight cost for the
    step's mode; first sight is never faster than repeated, measured or predicted.

    `speedup_noise` is the relative standard deviation of the speed-up measured round by round (each
    round's load factored out): how far one round's figure strays. A strategy the profile cannot
    price keeps its measured figures and says why in `problem`; the others are compared as usual.
    """
    baseline_name = measured.baseline
    cost_model = TransformerCostModel(model, profile)
    records = []
    for name, layouts in measured.layouts.items():
        real_tokens = sum(layout.real_tokens for layout in layouts)
        measured_seconds = float(measured.seconds[name].sum())
        problem = ""
        try:
            terms = step_seconds_by_term(model, profile, layouts)
        except InputError as error:
            terms, problem = np.full((len(layouts), 3), np.nan), f"cannot predict: {error}"
        predicted_seconds = float(terms.sum())
        first_sight = _first_sight_columns(measured, name, cost_model, predicted_seconds / len(layouts))
        records.append({
            "strategy": name,
            "mode": layouts[0].kind,
            "steps": len(layouts),
            "real_tokens_per_step": real_tokens / len(layouts),
            "token_slots_per_step": sum(layout.slots for layout in layouts) / len(layouts),
            "measured_step_seconds": measured_seconds / len(layouts),
            "predicted_step_seconds": predicted_seconds / len(layouts),
            "predicted_compute_seconds": float(terms[:, 0].mean()),
            "predicted_padding_seconds": float(terms[:, 1].mean()),
            "predicted_overhead_seconds": float(terms[:, 2].mean()),
            "measured_spread_fraction": float(np.median(measured.spread_fractions[name])),
            "measured_tokens_per_s": real_tokens / measured_seconds,
            "predicted_tokens_per_s": real_tokens / predicted_seconds,
            **first_sight,
            "problem": problem,
        })
    table = pd.DataFrame.from_records(records)
    if baseline_name not in set(table["strategy"]):
        raise InputError(f"measuring speed-ups needs the {baseline_name} strategy as the baseline")
    baseline = table.set_index("strategy").loc[baseline_name]
    if baseline["problem"]:
        raise InputError(f"the {baseline_name} baseline: {baseline['problem']}")
    table["measured_speedup"] = table["measured_tokens_per_s"] / baseline["measured_tokens_per_s"]
    table["predicted_speedup"] = table["predicted_tokens_per_s"] / baseline["predicted_tokens_per_s"]
    table["error"] = table["predicted_speedup"] / table["measured_speedup"] - 1
    table["speedup_noise"] = [speedup_noise(measured, name) for name in table["strategy"]]
    table["step_seconds_error"] = table["predicted_step_seconds"] / table["measured_step_seconds"] - 1
    return _with_first_sight_speedups(table, baseline_name)


def _first_sight_columns(measured: MeasuredSteps, name: str, cost_model: TransformerCostModel,
                         predicted_step_seconds: float) -> dict[str, float]:
    """A strategy's steps at new shapes and its mean step at first sight, measured and predicted (NaN where no
    first steps were timed)."""
    if measured.first_seconds is None:
        return {"new_shape_steps": np.nan, "measured_first_sight_step_seconds": np.nan,
                "predicted_first_sight_step_seconds": np.nan}
    new = measured.new_shape[name]
    extra = np.array([cost_model.first_sight_seconds(layout.mode) for layout in measured.layouts[name]])
    return {"new_shape_steps": int(new.sum()),
            "measured_first_sight_step_seconds": measured.first_sight_step_seconds(name),
            # The repeated price plus the extra, so that first sight is never below it by a rounding.
            "predicted_first_sight_step_seconds": predicted_step_seconds + float((new * extra).mean())}


def _with_first_sight_speedups(table: pd.DataFrame, baseline_name: str) -> pd.DataFrame:
    """Speed-ups at first sight: real tokens per first-sight second over the baseline's, as for repeated steps."""
    for side in ("measured", "predicted"):
        tokens_per_s = table["real_tokens_per_step"] / table[f"{side}_first_sight_step_seconds"]
        table[f"{side}_first_sight_speedup"] = tokens_per_s / tokens_per_s[table["strategy"] == baseline_name].iloc[0]
    table["first_sight_error"] = table["predicted_first_sight_speedup"] / table["measured_first_sight_speedup"] - 1
    return table


def speedup_noise(measured: MeasuredSteps, name: str) -> float:
    """Relative standard deviation over rounds of the strategy's speed-up over padding (0 for padding,
    NaN with fewer than two rounds)."""
    if measured.round_seconds is None or measured.round_seconds[name].shape[1] < 2:
        return float("nan")

    def tokens_per_s(strategy: str) -> np.ndarray:
        tokens = sum(layout.real_tokens for layout in measured.layouts[strategy])
        return tokens / measured.round_seconds[strategy].sum(axis=0)

    per_round = tokens_per_s(name) / tokens_per_s(measured.baseline)
    return float(per_round.std(ddof=1) / per_round.mean())


@dataclass(frozen=True)
class Verdict:
    """Whether a measure run's errors mean anything: its noise must stay below the error target."""

    valid: bool
    message: str


# What makes a noisy measurement clean, by device.
CLEAN_RUN_ADVICE = {
    "cpu": "stop other jobs on the machine, time on one thread with the CPU clock (--threads 1, the default clock), "
           "and raise --repeats (5 or more)",
    "cuda": "stop other jobs on the GPU (nvidia-smi lists them), and raise --repeats (5 or more) or --seconds",
}


def judge(table: pd.DataFrame, error_target: float = ERROR_TARGET, baseline: str = BASELINE,
          device: str = "cpu") -> Verdict:
    """Valid when every compared strategy's speed-up noise is at most `error_target`; else the verdict says how
    to get a clean run on `device`."""
    compared = table[(table["strategy"] != baseline) & (table["problem"] == "")]
    noisy = compared[~(compared["speedup_noise"] <= error_target)]
    if noisy.empty:
        worst = compared["speedup_noise"].max() if len(compared) else 0.0
        return Verdict(True, f"valid: timing noise at most {worst:.1%}, within the {error_target:.0%} error target")
    listed = ", ".join(f"{row.strategy} {row.speedup_noise:.1%}" for row in noisy.itertuples())
    return Verdict(False, f"NOT VALID: timing noise ({listed}) exceeds the {error_target:.0%} error target, so "
                          "these errors say more about the machine's load than about the cost model. For a clean "
                          f"run: {CLEAN_RUN_ADVICE['cuda' if device.startswith('cuda') else 'cpu']}")


def fit_unpadded_noise(measured: MeasuredSteps, model: ModelSpec, profile: HardwareProfile,
                       strategy: str | None = None) -> NoiseFit | None:
    """The profile's `unpadded_noise_cv` fitted on the un-padded steps' measured over predicted seconds
    (by default of the first strategy whose batches are un-padded; None when there is none, too few steps
    to fit or the profile cannot price it)."""
    if strategy is None:
        strategy = next((name for name, layouts in measured.layouts.items()
                         if layouts[0].mode is ExecutionMode.UNPADDED), None)
    if strategy not in measured.layouts or len(measured.layouts[strategy]) < NOISE_MIN_STEPS:
        return None
    try:
        predicted = step_seconds_by_term(model, profile, measured.layouts[strategy]).sum(axis=1)
    except InputError:
        return None
    rounds = None if measured.round_seconds is None else measured.round_seconds[strategy]
    if rounds is not None and rounds.shape[1] < 2:
        rounds = None
    return fit_step_noise(measured.seconds[strategy], predicted, rounds)


def deepest_calibrated_pack(profile: HardwareProfile) -> int | None:
    """The most sequences in one row among the profile's calibration timings (None without a record):
    packs deeper than that would extrapolate the fitted packing overhead."""
    timings = (profile.calibration or {}).get("timings") or []
    depths = [len(row) for timing in timings if timing.get("kind") == "packed" for row in timing.get("rows", [])]
    return max(depths, default=None)
