"""Coupled plans at any cluster size: sorted batching by runs of equal batches, padding exchange by segments.

Sorted batching hands a step's devices consecutive batches of the sorted dataset, and those batches repeat
in runs (a run per length, a batch where two lengths meet): a window of n batches is priced from a few
thousand distinct ones with prefix sums and a range-maximum table. Padding exchange deals a sorted global
batch round-robin: device i takes items i, i + n, i + 2n, ..., so devices between two length boundaries hold
equal batches and a step is priced from at most (lengths + batch size) distinct ones, whatever n.
"""

from __future__ import annotations

import numpy as np

from simbench.costmodels.base import ExecutionMode
from simbench.distinct import sorted_distinct
from simbench.sim.batching import SortedBatchSampler, unpadded_batches
from simbench.sim.engines.vectorized import StepAggregates
from simbench.sim.pricing import SEQUENCES_PER_PART, DeviceCosts, price_batches, price_packs

FIELDS = ("compute_seconds", "padding_seconds", "overhead_seconds", "stall_seconds", "real_tokens", "sequences",
          "masked_attention_seconds")


class SortedWindows:
    """The costs of every window of consecutive sorted batches, from one priced batch per run."""

    def __init__(self, sampler: SortedBatchSampler, cost_model, batch_size: int):
        self.sampler, self.batch_size = sampler, batch_size
        row_ends = sampler.row_ends
        self.batches = max(int(row_ends[-1]) // batch_size, 1)
        firsts = np.arange(self.batches, dtype=np.int64) * batch_size
        first_row = self._rows_at(firsts)
        last_row = self._rows_at(firsts + batch_size - 1)
        uniform = first_row == last_row
        # A run continues while batches hold one and the same row; a batch where rows meet is a run of its own.
        continues = np.zeros(self.batches, dtype=bool)
        continues[1:] = uniform[1:] & uniform[:-1] & (first_row[1:] == first_row[:-1])
        self.run_starts = np.flatnonzero(~continues)
        run_lengths = np.diff(np.append(self.run_starts, self.batches)).astype(np.float64)
        picks = self._rows_at((self.run_starts[:, None] * batch_size + np.arange(batch_size)).reshape(-1))
        costs = price_packs(cost_model, sampler, picks, batch_size, ExecutionMode.SORTED, 1, self.run_starts.size)
        self.run_totals = costs.total_seconds.ravel()
        self.values = {name: getattr(costs, name).ravel() for name in FIELDS}
        self.values["total_seconds"] = self.run_totals
        # Sums over batches 0..run start, per run: the prefix sum at any batch is one step from it.
        self.before_run = {name: np.concatenate([[0.0], np.cumsum(run_lengths * values)])
                           for name, values in self.values.items()}
        self.range_max = _RangeMaximum(self.run_totals)

    def _rows_at(self, positions: np.ndarray) -> np.ndarray:
        return np.minimum(np.searchsorted(self.sampler.row_ends, positions, side="right"),
                          self.sampler.row_ends.size - 1)

    def first_batches(self, rng: np.random.Generator, steps: int) -> np.ndarray:
        """Each step's first batch, drawn as `SortedBatchSampler.batches` draws it."""
        return rng.integers(0, self.batches, size=(steps, 1))[:, 0]

    def aggregates(self, first: np.ndarray, devices: int) -> StepAggregates:
        """Steps whose devices take batches first, first + 1, ..., first + devices - 1 (wrapping around)."""
        laps, rest = divmod(devices, self.batches)
        end = first + rest
        wraps = end > self.batches
        sums = {}
        for name in self.values:
            total = self.before_run[name][-1]
            inside = self._prefix(name, np.minimum(end, self.batches)) - self._prefix(name, first)
            around = np.where(wraps, self._prefix(name, np.where(wraps, end - self.batches, 0)), 0.0)
            sums[name] = laps * total + inside + around
        if laps:
            slowest = np.full(first.size, self.run_totals.max())
        else:
            slowest = self._max(first, np.minimum(end, self.batches))
            slowest = np.where(wraps, np.maximum(slowest, self._max(np.zeros_like(first), end - self.batches)),
                               slowest)
        return StepAggregates(slowest, sums["total_seconds"] / devices,
                              *(sums[name] / devices for name in FIELDS[:4]), sums["real_tokens"], sums["sequences"],
                              sums["masked_attention_seconds"] / devices)

    def _run_of(self, batch: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.run_starts, batch, side="right") - 1

    def _prefix(self, name: str, batch: np.ndarray) -> np.ndarray:
        """Sum over batches 0..batch - 1."""
        run = self._run_of(np.minimum(batch, self.batches - 1))
        inside = np.minimum(batch, self.batches) - self.run_starts[run]
        return self.before_run[name][run] + inside * self.values[name][run]

    def _max(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Largest total over batches start..end - 1 (-inf where empty)."""
        empty = end <= start
        low, high = self._run_of(start), self._run_of(np.maximum(end - 1, start))
        return np.where(empty, -np.inf, self.range_max.query(low, high))


class _RangeMaximum:
    """Maximum over any index range in O(1): maxima of every power-of-two span (a sparse table)."""

    def __init__(self, values: np.ndarray):
        self.levels = [values]
        span = 1
        while 2 * span <= values.size:
            previous = self.levels[-1]
            self.levels.append(np.maximum(previous[:-span], previous[span:]))
            span *= 2

    def query(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """max(values[low..high]) for each pair, inclusive."""
        level = np.floor(np.log2(high - low + 1)).astype(np.int64)
        result = np.empty(low.size)
        for index in np.unique(level):
            chosen = level == index
            table = self.levels[index]
            result[chosen] = np.maximum(table[low[chosen]], table[high[chosen] - (1 << index) + 1])
        return result


def dealt_batches(counts: np.ndarray, lengths: np.ndarray, devices: int, batch_size: int) -> tuple[np.ndarray,
                                                                                                  np.ndarray]:
    """The distinct batches of a sorted global batch (`counts` per length) dealt round-robin to `devices`,
    and how many consecutive devices hold each: np.repeat(batches, devices_each, axis=0) is every device's."""
    ends = np.cumsum(counts)
    # Device i holds the items at i + k devices: it changes batch where a length boundary falls.
    offsets = sorted_distinct(np.concatenate([[0], ends[:-1] % devices]))
    positions = offsets[:, None] + devices * np.arange(batch_size)
    return lengths[np.searchsorted(ends, positions, side="right")], np.diff(np.append(offsets, devices))


def exchange_aggregates(probabilities: np.ndarray, lengths: np.ndarray, devices: int, batch_size: int,
                        steps: int, cost_model, rng: np.random.Generator,
                        sequences_per_part: int = SEQUENCES_PER_PART) -> StepAggregates:
    """Steps of `devices` devices under padding exchange: per step, the sorted global batch as counts per
    length (a multinomial draw, exactly the sorted lengths of devices x batch_size draws), dealt round-robin.

    A step holds up to (lengths + batch size) x batch size distinct sequences, so steps are dealt and priced
    in parts of about `sequences_per_part` sequences: every batch is priced on its own, in the same order,
    and the draws are the same step by step, so the results equal pricing every step at once.
    """
    parts, dealt, held = [], [], 0
    for _ in range(steps):
        dealt.append(dealt_batches(rng.multinomial(devices * batch_size, probabilities), lengths, devices,
                                   batch_size))
        held += dealt[-1][0].size
        if held >= sequences_per_part:
            parts.append(_priced_steps(dealt, devices, cost_model))
            dealt, held = [], 0
    if dealt:
        parts.append(_priced_steps(dealt, devices, cost_model))
    return StepAggregates.concatenate(parts)


def _priced_steps(dealt: list[tuple[np.ndarray, np.ndarray]], devices: int, cost_model) -> StepAggregates:
    """StepAggregates of steps given as their distinct batches and how many devices hold each."""
    steps = len(dealt)
    batch_lengths = np.concatenate([batches for batches, _ in dealt])
    weight = np.concatenate([devices_each for _, devices_each in dealt]).astype(np.float64)
    rows = np.array([devices_each.size for _, devices_each in dealt])
    step_of = np.repeat(np.arange(steps), rows)
    costs = price_batches(cost_model, unpadded_batches(batch_lengths), ExecutionMode.UNPADDED, 1,
                          batch_lengths.shape[0])
    totals = costs.total_seconds.ravel()
    # Every step holds at least one batch, and a step's batches are consecutive.
    slowest = np.maximum.reduceat(totals, np.cumsum(rows) - rows)
    sums = {name: np.bincount(step_of, weights=weight * getattr(costs, name).ravel(), minlength=steps)
            for name in FIELDS}
    total = np.bincount(step_of, weights=weight * totals, minlength=steps)
    return StepAggregates(slowest, total / devices, *(sums[name] / devices for name in FIELDS[:4]),
                          sums["real_tokens"], sums["sequences"], sums["masked_attention_seconds"] / devices)
