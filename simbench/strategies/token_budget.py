"""`token-budget`: length-sorted batches filled up to a token budget per device (fairseq's `--max-tokens`).

The dataset is sorted by length and cut, shortest first, into batches whose padded size (sequences x
the batch's longest) stays within the budget; the batches are then shuffled. Short sequences come
many to a batch, long ones few: every batch holds about the same number of token slots, with
little padding, but a different shape each step. The budget is `batch_size x max_length` slots by
default, the tokens of a packer's batch of `batch_size` packs, so the two compare at equal tokens per
step; `PackOptions.budget_tokens` sets another.

    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.strategies.token_budget import token_budget_batches
    >>> batches = token_budget_batches(LengthHistogram.from_counts([1, 0, 3]), budget_tokens=6)
    >>> batches.run_lengths.tolist(), batches.padded_lengths.tolist(), batches.repeats.tolist()
    ([1, 3, 3], [3, 3], [1, 1])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.strategies import register
from simbench.strategies.packing import Packing


@dataclass(frozen=True, eq=False)
class BudgetBatches:
    """Distinct batches of a token-budget batching and how many of each there are.

    Batch kind k holds `run_counts[j]` sequences of length `run_lengths[j]` for j in
    `run_offsets[k]:run_offsets[k + 1]`, each padded to `padded_lengths[k]`; `repeats[k]` such batches exist.
    """

    run_lengths: np.ndarray
    run_counts: np.ndarray
    run_offsets: np.ndarray
    padded_lengths: np.ndarray
    repeats: np.ndarray

    @property
    def kinds(self) -> int:
        return int(self.repeats.size)

    @property
    def run_kind(self) -> np.ndarray:
        """The batch kind each run belongs to."""
        return np.repeat(np.arange(self.kinds), np.diff(self.run_offsets))

    def sequences_per_kind(self) -> np.ndarray:
        return np.add.reduceat(self.run_counts, self.run_offsets[:-1]) if self.kinds else np.zeros(0, np.int64)


def token_budget_batches(histogram: LengthHistogram, budget_tokens: int) -> BudgetBatches:
    """Fill batches shortest first; a batch closes when one more sequence would take its padded size over the budget."""
    present = np.flatnonzero(histogram.counts)
    if present.size and budget_tokens < present[-1] + 1:
        raise InputError(f"a token budget of {budget_tokens} cannot hold a sequence of {present[-1] + 1} tokens")
    run_lengths, run_counts, offsets, padded, repeats = [], [], [0], [], []
    open_lengths: list[int] = []
    open_counts: list[int] = []
    open_sequences = 0

    def emit(lengths, counts, padded_length, times):
        run_lengths.extend(lengths)
        run_counts.extend(counts)
        offsets.append(len(run_lengths))
        padded.append(padded_length)
        repeats.append(times)

    for length, count in zip((present + 1).tolist(), histogram.counts[present].tolist()):
        capacity = budget_tokens // length
        if open_sequences:
            room = capacity - open_sequences
            taken = min(count, max(room, 0))
            if taken:
                open_lengths.append(length)
                open_counts.append(taken)
                open_sequences += taken
                count -= taken
            if count or open_sequences == capacity:
                # Full, or the next sequence would not fit: the open batch closes at its longest.
                emit(open_lengths, open_counts, open_lengths[-1], 1)
                open_lengths, open_counts, open_sequences = [], [], 0
        full, rest = divmod(count, capacity)
        if full:
            emit([length], [capacity], length, full)
        if rest:
            open_lengths, open_counts, open_sequences = [length], [rest], rest
    if open_sequences:
        emit(open_lengths, open_counts, open_lengths[-1], 1)
    as_array = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
    return BudgetBatches(as_array(run_lengths), as_array(run_counts), as_array(offsets), as_array(padded),
                         as_array(repeats))


@register("token-budget", "length-sorted batches filled up to batch_size x max_length token slots, or "
                          "budget_tokens (fairseq --max-tokens), each padded to its longest", uses_depth=False)
def pack_token_budget(histogram, max_length, max_depth, options) -> Packing:
    budget_tokens = options.budget_tokens or options.batch_size * max_length
    batches = token_budget_batches(histogram, budget_tokens)
    run_kind = batches.run_kind
    # Its efficiency is of the budget each batch is given, as a packer's is of its rows.
    return Packing.from_rows("token-budget", max_length, 1, batches.run_lengths,
                             batches.run_counts * batches.repeats[run_kind],
                             slot_lengths=batches.padded_lengths[run_kind],
                             details={"budget_tokens": budget_tokens, "batches": int(batches.repeats.sum())})
