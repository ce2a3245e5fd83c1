"""Measured versus simulated: real training steps per strategy against the cost model's prediction
for exactly the batches that were timed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from simbench.calibrate.batches import TorchBatch, batch_for_layout
from simbench.calibrate.calibration import MIN_ROW_LENGTH, default_unpadded_attention, encoder_shape
from simbench.calibrate.fit import step_seconds_by_term
from simbench.calibrate.layout import BatchLayout
from simbench.calibrate.noisefit import NoiseFit, fit_step_noise
from simbench.calibrate.timing import (StepTiming, build_trainer, check_timed_work, load_adjusted, time_batches,
                                       uses_cpu_clock)
from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.hardware import HardwareProfile
from simbench.costmodels.model import ModelSpec
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

    def __post_init__(self):
        check_whole_number(self.max_length, "max_length", minimum=MIN_ROW_LENGTH)
        for name in ("threads", "steps", "batch_size", "repeats"):
            check_whole_number(getattr(self, name), name, minimum=1)
        check_seed(self.seed)
        self._check_work()

    def _check_work(self) -> None:
        """Refuse, before building anything, timings that would take longer than a measurement should."""
        timed_batches = len(STRATEGIES) * self.steps * (self.repeats + 1)  # + 1: the warm-up and load rounds
        flops = timed_batches * self.batch_size * float(self.model.training_flops([self.max_length]))
        check_timed_work(flops, self.device, f"timing {len(STRATEGIES)} strategies x {self.steps:,} steps x "
                         f"{self.repeats:,} repeats of {self.batch_size:,} rows of {self.max_length:,} tokens",
                         "lower the steps, repeats, batch size or row length", parameter="steps")

    @property
    def cpu_clock(self) -> bool:
        return uses_cpu_clock(self.device, self.threads, self.wall_clock)


def rescale_histogram(histogram: LengthHistogram, max_length: int) -> LengthHistogram:
    """The histogram with every length scaled by max_length / histogram.max_length (rounded up, so
    no sequence vanishes); unchanged when it already fits."""
    if histogram.max_length <= max_length:
        return histogram
    scaled = np.ceil(histogram.lengths * max_length / histogram.max_length).astype(np.int64)
    counts = np.bincount(scaled, weights=histogram.counts, minlength=max_length + 1)[1:]
    return LengthHistogram(counts.astype(np.int64), name=f"{histogram.name} scaled to {max_length}")


def strategy_layouts(histogram: LengthHistogram, settings: MeasureSettings,
                     rng: np.random.Generator) -> dict[str, list[BatchLayout]]:
    """`steps` batches per strategy, drawn from the histogram."""
    steps, rows, max_length = settings.steps, settings.batch_size, settings.max_length
    padding_lengths = histogram.sample_lengths(steps * rows, rng).reshape(steps, rows)
    unpadding_lengths = histogram.sample_lengths(steps * rows, rng).reshape(steps, rows)
    sorted_lengths = np.sort(histogram.sample_lengths(steps * rows, rng)).reshape(steps, rows)
    return {
        "padding": [BatchLayout.padded(lengths, max_length) for lengths in padding_lengths],
        "sort": [BatchLayout.padded(lengths, int(lengths.max()), ExecutionMode.SORTED)
                 for lengths in rng.permutation(sorted_lengths)],
        "lpfhp": _packed_layouts(histogram, settings, rng),
        "unpadding": [BatchLayout.unpadded(lengths) for lengths in unpadding_lengths],
    }


def _packed_layouts(histogram: LengthHistogram, settings: MeasureSettings,
                    rng: np.random.Generator) -> list[BatchLayout]:
    """Packs made by lpfhp from a pool of sequences, a random choice of them per batch."""
    packs_needed = settings.steps * settings.batch_size
    # The pool must give enough packs; a pack of max_length holds at most max_length sequences.
    pool = histogram.sample_lengths(packs_needed * max(2, int(np.ceil(histogram.theoretical_speedup)) + 1), rng)
    pool_histogram = LengthHistogram.from_lengths(pool, settings.max_length, name=histogram.name)
    packing = get_strategy("lpfhp")(pool_histogram, settings.max_length, settings.max_depth)
    # Each pack by its index into the flat form: a dense table of deep packs may not fit in memory.
    packs = np.repeat(np.arange(packing.strategies_used), packing.repeats)
    if len(packs) < packs_needed:
        raise InputError(f"lpfhp made {len(packs)} packs, fewer than the {packs_needed} needed")
    chosen = packs[rng.permutation(len(packs))[:packs_needed]].reshape(settings.steps, settings.batch_size)
    lengths, starts = packing.pack_lengths, packing.pack_starts
    return [BatchLayout.packed([lengths[starts[pack]:starts[pack + 1]] for pack in batch], settings.max_length)
            for batch in chosen]


@dataclass(frozen=True)
class MeasuredSteps:
    """Median measured seconds of every timed batch, per strategy, and each round's seconds
    (steps, rounds) with that round's load factored out: their spread is the timing noise."""

    layouts: dict[str, list[BatchLayout]]
    seconds: dict[str, np.ndarray]
    spread_fractions: dict[str, np.ndarray]
    round_seconds: dict[str, np.ndarray] | None = None


def time_strategies(layouts: dict[str, list[BatchLayout]], settings: MeasureSettings,
                    progress: Callable[[], None] = lambda: None,
                    calibration_batches: Sequence[TorchBatch] = ()
                    ) -> tuple[MeasuredSteps, list[StepTiming], np.ndarray]:
    """Time every strategy's batches, all in each round in a random order, so that noise from other
    processes hits every strategy alike.

    `calibration_batches` are timed in the same rounds, so that a profile fitted to them saw the
    same machine load as the measured steps (on a shared machine the load drifts within minutes);
    their raw timings and load-adjusted seconds come back alongside.
    """
    torch.set_num_threads(settings.threads)
    shape = encoder_shape(settings.model)
    rng = np.random.default_rng(settings.seed + 1)
    names = list(layouts)
    attention = settings.unpadded_attention or default_unpadded_attention(settings.device)
    batches = {name: [batch_for_layout(layout, shape.vocabulary, rng, attention) for layout in layouts[name]]
               for name in names}
    trainer = build_trainer(shape, settings.device, settings.seed, settings.cpu_clock)
    warmup_batches = [batches[name][0] for name in names] + list(calibration_batches[:1])
    time_batches(trainer, warmup_batches, warmup=settings.warmup, repeats=0, progress=progress)
    interleaved = [batches[name][step] for step in range(settings.steps) for name in names]
    timings = time_batches(trainer, interleaved + list(calibration_batches), warmup=0, repeats=settings.repeats,
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
    return (MeasuredSteps(layouts, seconds, spreads, round_seconds), timings[len(interleaved):],
            adjusted[len(interleaved):])


def measure_steps(settings: MeasureSettings, strategies: int, calibration_batches: int) -> int:
    """Training steps `time_strategies` takes, for a progress bar."""
    warmup = settings.warmup * (strategies + min(calibration_batches, 1))
    return warmup + settings.repeats * (settings.steps * strategies + calibration_batches)


def per_step_speedups(measured: MeasuredSteps) -> pd.DataFrame:
    """Each timed step's real tokens per second over padding's mean, one column per strategy: the
    per-step speed-up samples a Gumbel straggler fit takes (`simbench gumbel --samples`)."""
    if BASELINE not in measured.layouts:
        raise InputError(f"per-step speed-ups need the {BASELINE!r} baseline among the strategies")

    def tokens_per_s(name: str) -> np.ndarray:
        return np.array([layout.real_tokens for layout in measured.layouts[name]]) / measured.seconds[name]

    # The reference is padding's overall throughput, as `compare` has it (tokens over seconds, summed).
    padding_tokens_per_s = (sum(layout.real_tokens for layout in measured.layouts[BASELINE])
                            / measured.seconds[BASELINE].sum())
    steps = {name: tokens_per_s(name) / padding_tokens_per_s for name in measured.layouts}
    return pd.DataFrame({"step": np.arange(measured.seconds[BASELINE].size), **steps})


def compare(measured: MeasuredSteps, model: ModelSpec, profile: HardwareProfile) -> pd.DataFrame:
    """One row per strategy: measured and predicted throughput, speed-up over padding, and the
    predicted step seconds split by cost-model term next to the measured step seconds.

    `speedup_noise` is the relative standard deviation of the speed-up measured round by round (each
    round's load factored out): how far one round's figure strays. A strategy the profile cannot
    price keeps its measured figures and says why in `problem`; the others are compared as usual.
    """
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
            "problem": problem,
        })
    table = pd.DataFrame.from_records(records)
    if BASELINE not in set(table["strategy"]):
        raise InputError(f"measuring speed-ups needs the {BASELINE} strategy as the baseline")
    baseline = table.set_index("strategy").loc[BASELINE]
    if baseline["problem"]:
        raise InputError(f"the {BASELINE} baseline: {baseline['problem']}")
    table["measured_speedup"] = table["measured_tokens_per_s"] / baseline["measured_tokens_per_s"]
    table["predicted_speedup"] = table["predicted_tokens_per_s"] / baseline["predicted_tokens_per_s"]
    table["error"] = table["predicted_speedup"] / table["measured_speedup"] - 1
    table["speedup_noise"] = [speedup_noise(measured, name) for name in table["strategy"]]
    table["step_seconds_error"] = table["predicted_step_seconds"] / table["measured_step_seconds"] - 1
    return table


def speedup_noise(measured: MeasuredSteps, name: str) -> float:
    """Relative standard deviation over rounds of the strategy's speed-up over padding (0 for padding,
    NaN with fewer than two rounds)."""
    if measured.round_seconds is None or measured.round_seconds[name].shape[1] < 2:
        return float("nan")

    def tokens_per_s(strategy: str) -> np.ndarray:
        tokens = sum(layout.real_tokens for layout in measured.layouts[strategy])
        return tokens / measured.round_seconds[strategy].sum(axis=0)

    per_round = tokens_per_s(name) / tokens_per_s(BASELINE)
    return float(per_round.std(ddof=1) / per_round.mean())


@dataclass(frozen=True)
class Verdict:
    """Whether a measure run's errors mean anything: its noise must stay below the error target."""

    valid: bool
    message: str


def judge(table: pd.DataFrame, error_target: float = ERROR_TARGET) -> Verdict:
    """Valid when every compared strategy's speed-up noise is at most `error_target`."""
    compared = table[(table["strategy"] != BASELINE) & (table["problem"] == "")]
    noisy = compared[~(compared["speedup_noise"] <= error_target)]
    if noisy.empty:
        worst = compared["speedup_noise"].max() if len(compared) else 0.0
        return Verdict(True, f"valid: timing noise at most {worst:.1%}, within the {error_target:.0%} error target")
    listed = ", ".join(f"{row.strategy} {row.speedup_noise:.1%}" for row in noisy.itertuples())
    return Verdict(False, f"NOT VALID: timing noise ({listed}) exceeds the {error_target:.0%} error target, so "
                          "these errors say more about the machine's load than about the cost model. For a clean "
                          "run: stop other jobs on the machine, time on one thread with the CPU clock (--threads 1, "
                          "the default clock), and raise --repeats (5 or more)")


def fit_unpadded_noise(measured: MeasuredSteps, model: ModelSpec, profile: HardwareProfile,
                       strategy: str = "unpadding") -> NoiseFit | None:
    """The profile's `unpadded_noise_cv` fitted on the un-padded steps' measured over predicted seconds
    (None when the strategy was not timed or the profile cannot price it)."""
    if strategy not in measured.layouts:
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
