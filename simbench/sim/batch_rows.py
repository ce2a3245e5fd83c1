"""Bookkeeping over a BatchSet's rows for the replica cost model: each row's microbatch, keys equal for rows
that hold the same documents, the distinct rows of an array and a range of batches renumbered from 0."""

from __future__ import annotations

import numpy as np

from simbench.costmodels.base import BatchSet


def _microbatch_of_row(batches: BatchSet, microbatches: int) -> np.ndarray:
    """Each row's microbatch (batch x microbatches + k): a batch's rows in order, cut where their token slots
    cross each k / microbatches of the batch's (equal rows: the first batch_size rows, the next, ...)."""
    slots = batches.row_slots.astype(np.float64)
    total = np.bincount(batches.row_batch, weights=slots, minlength=batches.batches)
    before = np.cumsum(slots) - slots
    first = np.concatenate([[0.0], np.cumsum(total)[:-1]])
    middle = before - first[batches.row_batch] + slots / 2
    share = middle / np.where(total > 0, total, 1.0)[batches.row_batch]
    k = np.minimum((share * microbatches).astype(np.int64), microbatches - 1)
    return batches.row_batch * microbatches + k


def _distinct_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a 2-D array and each row's index among them, found by a fixed random projection
    (sorting one number a row, not whole rows); distinct rows project alike only by a coincidence of doubles."""
    weights = np.random.default_rng(0).random(values.shape[1]) + 1.0
    _, first, inverse = np.unique(values @ weights, return_index=True, return_inverse=True)
    return values[first], inverse.ravel()


def _row_keys(batches: BatchSet) -> np.ndarray:
    """(rows, 4) keys equal for rows that hold the same documents in the same order in as many slots: their
    slots, document count and two sums of each document's length times a fixed random weight of its place.
    Rows that differ share keys only by a coincidence of random doubles."""
    rows = batches.row_slots.size
    first_of_row = np.searchsorted(batches.sequence_row, np.arange(rows))
    place = np.arange(batches.sequence_row.size) - first_of_row[batches.sequence_row]
    weights = np.random.default_rng(0).random((2, int(place.max(initial=0)) + 1)) + 1.0
    lengths = batches.sequence_lengths.astype(np.float64)
    return np.column_stack([batches.row_slots.astype(np.float64),
                            np.bincount(batches.sequence_row, minlength=rows).astype(np.float64),
                            *(np.bincount(batches.sequence_row, weights=lengths * weight[place], minlength=rows)
                              for weight in weights)])


def _batches_between(batches: BatchSet, first: int, last: int) -> BatchSet:
    """Batches first..last - 1 of a BatchSet, renumbered from 0."""
    if first == 0 and last == batches.batches:
        return batches
    row_first, row_last = np.searchsorted(batches.row_batch, [first, last])
    seq_first, seq_last = np.searchsorted(batches.sequence_row, [row_first, row_last])
    return BatchSet(batches.sequence_lengths[seq_first:seq_last], batches.sequence_row[seq_first:seq_last] - row_first,
                    batches.row_slots[row_first:row_last], batches.row_batch[row_first:row_last] - first, last - first)
