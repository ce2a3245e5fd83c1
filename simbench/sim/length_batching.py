"""Per-device batches of the length-grouping batchers: token-budget buckets and HF's megabatch sort.

Both pad each batch to its longest sequence, and its shape changes from step to step (SORTED mode).
Token-budget batches are fixed once the dataset is bucketed, so each distinct batch is priced once
and steps draw among them; length-grouped batches depend on the shuffle, so they are drawn as the
sampler makes them, one stream of megabatches per cluster size.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.histogram import LengthHistogram
from simbench.sim.batching import InverseCdf, SequenceSampler
from simbench.sim.pricing import DeviceCosts, price_batches
from simbench.strategies.group_by_length import megabatch_sequences
from simbench.strategies.token_budget import BudgetBatches

# Sequences priced in one call: bounds memory whatever the budget or the number of devices.
SEQUENCES_PER_PRICING = 1 << 20


def padded_batches(lengths: np.ndarray) -> BatchSet:
    """(..., sequences) lengths, one batch per leading index, each sequence a row padded to its batch's longest."""
    per_batch = lengths.shape[-1]
    flat = lengths.reshape(-1).astype(np.int64, copy=False)
    rows = np.arange(flat.size, dtype=np.int64)
    longest = np.repeat(lengths.reshape(-1, per_batch).max(axis=1), per_batch)
    return BatchSet(flat, rows, longest, rows // per_batch, flat.size // per_batch)


class BudgetBatchDraws:
    """Steps draw token-budget batches in proportion to how many of each the bucketing made (a shuffled epoch)."""

    def __init__(self, batches: BudgetBatches, cost_model):
        self.weights = batches.repeats.astype(np.float64)
        self.sampler = InverseCdf(batches.repeats)
        self.costs = _price_kinds(batches, cost_model)  # (1, kinds)

    def draw(self, rng: np.random.Generator, steps: int, devices: int) -> DeviceCosts:
        return self.of_kinds(self.sampler.sample(rng, (steps, devices)))

    def of_kinds(self, kinds: np.ndarray) -> DeviceCosts:
        """The costs of batch kinds `kinds`, in their shape (steps, devices)."""
        return DeviceCosts(*(getattr(self.costs, name)[0, kinds] for name in COST_FIELDS))


COST_FIELDS = tuple(field.name for field in fields(DeviceCosts))


def _price_kinds(batches: BudgetBatches, cost_model) -> DeviceCosts:
    """Every batch kind priced once, as one step of `kinds` devices, a bounded number of sequences at a time."""
    sequences = np.add.reduceat(batches.run_counts, batches.run_offsets[:-1]) if batches.kinds else np.zeros(0)
    kind_ends = np.cumsum(sequences)
    parts = []
    first = 0
    while first < batches.kinds:
        # As many kinds as fit in one pricing call, at least one.
        last = max(first + 1, int(np.searchsorted(kind_ends, kind_ends[first] - sequences[first]
                                                  + SEQUENCES_PER_PRICING, side="right")))
        parts.append(_price_kind_range(batches, cost_model, first, last))
        first = last
    if not parts:
        return DeviceCosts(*(np.zeros((1, 0)) for _ in COST_FIELDS))
    return DeviceCosts(*(np.concatenate([getattr(part, name) for part in parts], axis=1) for name in COST_FIELDS))


def _price_kind_range(batches: BudgetBatches, cost_model, first: int, last: int) -> DeviceCosts:
    runs = slice(batches.run_offsets[first], batches.run_offsets[last])
    run_kind = np.repeat(np.arange(last - first), np.diff(batches.run_offsets[first:last + 1]))
    counts = batches.run_counts[runs]
    lengths = np.repeat(batches.run_lengths[runs], counts)
    rows = np.arange(lengths.size, dtype=np.int64)
    sequence_kind = np.repeat(run_kind, counts)
    batch_set = BatchSet(lengths, rows, batches.padded_lengths[first:last][sequence_kind], sequence_kind, last - first)
    return price_batches(cost_model, batch_set, ExecutionMode.SORTED, 1, last - first)


class LengthGroupedStream:
    """One cluster's stream of HF length-grouped batches: shuffled megabatches of 50 batches, each sorted
    longest first; batch k of the stream is device k mod n's batch at step k div n (round-robin dealing)."""

    def __init__(self, histogram: LengthHistogram, batch_sequences: int, rng: np.random.Generator):
        self.sampler = SequenceSampler(histogram)
        self.batch_sequences = batch_sequences
        self.megabatch = megabatch_sequences(histogram.sequences, batch_sequences)
        self.rng = rng
        self.pending = np.zeros((0, batch_sequences), dtype=np.int64)  # sorted batches not dealt yet

    def batches(self, count: int) -> np.ndarray:
        """The next `count` batches, (count, batch_sequences) lengths."""
        missing = count - self.pending.shape[0]
        if missing > 0:
            megabatches = -(-missing * self.batch_sequences // self.megabatch)
            drawn = self.sampler.lengths_of(self.rng, (megabatches, self.megabatch))
            ordered = -np.sort(-drawn, axis=1)
            self.pending = np.concatenate([self.pending, ordered.reshape(-1, self.batch_sequences)])
        taken, self.pending = self.pending[:count], self.pending[count:]
        return taken

    def priced(self, cost_model, steps: int, devices: int) -> DeviceCosts:
        """Costs of the next `steps` steps of `devices` devices."""
        steps_per_call = max(1, SEQUENCES_PER_PRICING // (devices * self.batch_sequences))
        chunks = []
        for first in range(0, steps, steps_per_call):
            count = min(steps_per_call, steps - first)
            lengths = self.batches(count * devices).reshape(count, devices, self.batch_sequences)
            chunks.append(price_batches(cost_model, padded_batches(lengths), ExecutionMode.SORTED, count, devices))
        return DeviceCosts.concatenate(chunks)
