"""Measured versus simulated: real training steps per strategy against the cost model's prediction
for exactly the batches that were timed, at first sight of each batch shape and repeated.

The first time a process runs a batch shape it pays for kernel selection and new allocations. measure
times every batch once, strategy after strategy, before anything repeats (its first-sight step where its
shape is new to the process), then in rounds (its repeated step: `measure_timing`). `measure_compare.compare`
sets measured against predicted speed-ups for both: predicted repeated steps are the cost model's price,
predicted first-sight steps add the profile's first-sight cost to the steps whose shape was new.

This module holds what a measurement runs: its settings and a histogram's strategies' batches; `measure_budget`
sizes its steps and repeats to a time budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbench.calibrate.calibration import MIN_ROW_LENGTH, default_unpadded_attention
from simbench.calibrate.layout import BatchLayout
from simbench.calibrate.noisefit import check_measure_repeats
from simbench.calibrate.timing import check_timed_work, uses_cpu_clock
from simbench.costmodels.base import ExecutionMode
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
    strategies: int = len(STRATEGIES)  # how many strategies are timed, for the work limit

    def __post_init__(self):
        check_whole_number(self.max_length, "max_length", minimum=MIN_ROW_LENGTH)
        for name in ("threads", "steps", "batch_size", "strategies"):
            check_whole_number(getattr(self, name), name, minimum=1)
        check_measure_repeats(self.repeats)
        check_seed(self.seed)
        self._check_work()

    @property
    def attention(self) -> str:
        """How un-padded batches run attention: as asked, else the fastest this device supports."""
        return self.unpadded_attention or default_unpadded_attention(self.device)

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
