"""From a histogram packing to data: which sequence of the dataset goes into which pack slot.

    >>> import numpy as np
    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.strategies import get_strategy
    >>> from simbench.strategies.assign import assign_sequences
    >>> lengths = np.array([5, 3, 8, 5, 3])
    >>> packing = get_strategy("spfhp")(LengthHistogram.from_lengths(lengths, max_length=8), 8, 3)
    >>> packs = assign_sequences(packing, lengths, np.random.default_rng(0))
    >>> packs.tolist()   # sequence indices per pack, -1 where a slot is empty
    [[3, 4], [2, -1], [0, 1]]
    >>> lengths[packs[0][packs[0] >= 0]].tolist()   # the lengths of pack 0, as in one of packing.rows
    [5, 3]
"""

from __future__ import annotations

import numpy as np

from simbench.errors import InputError
from simbench.strategies.packing import Packing


def assign_sequences(packing: Packing, sequence_lengths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per-pack sequence indices: a (packs x depth_used) array, -1 where a slot is empty.

    Sequences of one length are handed out in a random order and packs come in a random order, so
    every assignment consistent with the packing is equally likely. Index i refers to
    `sequence_lengths[i]`; rows follow the pack contents of `packing.rows` (longest first). The
    array is int32 while the indices fit, to keep 16M sequences well under a gigabyte.
    """
    sequence_lengths, counts = _validated_lengths(packing, sequence_lengths)
    index_type = np.int32 if sequence_lengths.size < np.iinfo(np.int32).max else np.int64
    by_length, next_of_length = _indices_by_length_shuffled(sequence_lengths, counts, rng)
    repeats = packing.repeats
    first_pack = np.concatenate([[0], np.cumsum(repeats)])
    pack_positions = rng.permutation(packing.packs_total)
    depth = packing.depth_used
    assignment = np.full((packing.packs_total, depth), -1, dtype=index_type)
    # One copy per (distinct pack, slot) into that pack's random positions: a few thousand copies.
    for row, (lengths, count) in enumerate(zip(packing.rows[:, :depth], repeats)):
        positions = pack_positions[first_pack[row]:first_pack[row + 1]]
        for slot, length in enumerate(lengths[lengths > 0]):
            start = next_of_length[length]
            assignment[positions, slot] = by_length[start:start + count]
            next_of_length[length] = start + count
    return assignment


def _indices_by_length_shuffled(sequence_lengths: np.ndarray, counts: np.ndarray,
                                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Sequence indices ordered by length, in random order within each length, and where each
    length's run starts (indexed by length)."""
    # A stable sort of 16-bit keys is a radix sort: linear time on 16M sequences.
    by_length = np.argsort(sequence_lengths.astype(np.uint16), kind="stable")
    starts = np.concatenate([[0, 0], np.cumsum(counts)])
    # Shuffling each length's run in place keeps the random accesses inside one run at a time.
    for length in np.flatnonzero(counts) + 1:
        rng.shuffle(by_length[starts[length]:starts[length + 1]])
    return by_length, starts


def _validated_lengths(packing: Packing, sequence_lengths) -> tuple[np.ndarray, np.ndarray]:
    """The lengths as an array, and their histogram (counts of lengths 1..max_length)."""
    lengths = np.asarray(sequence_lengths)
    if lengths.ndim != 1:
        raise InputError(f"sequence lengths must be a 1-D array, found shape {lengths.shape}")
    if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
        raise InputError(f"sequence lengths must be whole numbers, found dtype {lengths.dtype}")
    if lengths.size and (lengths.min() < 1 or lengths.max() > packing.max_length):
        bad = int(np.count_nonzero((lengths < 1) | (lengths > packing.max_length)))
        raise InputError(f"{bad} sequence lengths lie outside 1..{packing.max_length}")
    if packing.max_length >= 2**16:
        raise InputError(f"max_length {packing.max_length} is too long to assign (at most 65535)")
    dataset = np.bincount(lengths.astype(np.int64, copy=False), minlength=packing.max_length + 1)[1:]
    placed = packing.placed_histogram().counts
    if np.any(dataset != placed):
        length = int(np.flatnonzero(dataset != placed)[0]) + 1
        raise InputError(f"the sequence lengths do not match the packing's histogram: the dataset has "
                         f"{dataset[length - 1]} sequences of length {length}, the packing places "
                         f"{placed[length - 1]} ({lengths.size} sequences against {packing.sequences})")
    return lengths, dataset
