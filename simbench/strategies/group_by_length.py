"""`group-by-length`: Hugging Face Trainer's `group_by_length` (its LengthGroupedSampler megabatch sort).

The dataset is shuffled and cut into megabatches of 50 batches; each megabatch is sorted longest
first and cut into batches of a fixed number of sequences, each padded to its longest. Batches
count sequences, not tokens: simbench takes as many as fill `batch_size x max_length` token slots
at the dataset's mean length, so that a step holds as many real tokens as a packer's on average.

    >>> import numpy as np
    >>> from simbench.strategies.group_by_length import length_grouped_order
    >>> lengths, rng = np.array([5, 1, 4, 2, 3, 6, 8, 7]), np.random.default_rng(0)
    >>> length_grouped_order(lengths, batch_sequences=1, rng=rng).tolist()  # shuffled: 4 3 | 2 8 | 6 5 | 1 7
    [8, 3, 4, 2, 6, 5, 7, 1]
"""

from __future__ import annotations

import numpy as np

from simbench.distinct import distinct_counts
from simbench.histogram import LengthHistogram
from simbench.strategies import register
from simbench.strategies.packing import Packing

# transformers.trainer_pt_utils.get_length_grouped_indices: megabatches of up to 50 batches.
MEGABATCH_BATCHES = 50
# Pairs (length, padded length) are counted with a dense table while it stays this small.
DENSE_PAIR_TABLE_MAX = 1 << 24


def sequences_per_batch(histogram: LengthHistogram, batch_size: int, max_length: int) -> int:
    """Sequences whose mean length fills `batch_size x max_length` token slots (at least one)."""
    if histogram.sequences == 0:
        return 1
    mean_length = histogram.real_tokens / histogram.sequences
    return max(1, round(batch_size * max_length / mean_length))


def megabatch_sequences(dataset_sequences: int, batch_sequences: int) -> int:
    """HF's megabatch size: 50 batches, fewer for a dataset of under 200 batches (at least one)."""
    return max(1, min(dataset_sequences // (batch_sequences * 4), MEGABATCH_BATCHES)) * batch_sequences


def length_grouped_order(lengths: np.ndarray, batch_sequences: int, rng: np.random.Generator) -> np.ndarray:
    """The lengths in the sampler's order: shuffled, then sorted within megabatches (`sort_megabatches`)."""
    return sort_megabatches(rng.permutation(lengths), batch_sequences)


def sort_megabatches(shuffled: np.ndarray, batch_sequences: int) -> np.ndarray:
    """Each megabatch sorted longest first, then the longest sequence of all swapped to the very first
    place (HF does so that running out of memory happens at once)."""
    size = megabatch_sequences(shuffled.size, batch_sequences)
    whole = shuffled.size // size * size
    ordered = np.concatenate([np.sort(shuffled[:whole].reshape(-1, size), axis=1)[:, ::-1].reshape(-1),
                              np.sort(shuffled[whole:])[::-1]])
    if ordered.size:
        longest_first = int(np.argmax(ordered[::size])) * size
        ordered[[0, longest_first]] = ordered[[longest_first, 0]]
    return ordered


def padded_lengths(ordered_lengths: np.ndarray, batch_sequences: int) -> np.ndarray:
    """Each sequence's padded length: the longest of its batch (consecutive runs of batch_sequences)."""
    starts = np.arange(0, ordered_lengths.size, batch_sequences)
    longest = np.maximum.reduceat(ordered_lengths, starts) if ordered_lengths.size else ordered_lengths
    return np.repeat(longest, np.diff(np.append(starts, ordered_lengths.size)))


@register("group-by-length", "HF Trainer group_by_length: shuffled megabatches of 50 batches sorted by length, "
                             "batches of as many sequences as fill batch_size x max_length at the mean length",
          uses_depth=False)
def pack_group_by_length(histogram, max_length, max_depth, options) -> Packing:
    batch_sequences = sequences_per_batch(histogram, options.batch_size, max_length)
    # The shuffle's swaps depend on the number of sequences alone: 16-bit lengths come out in the
    # same order as wider ones, in less memory (100M sequences: 200 MB, not 400). Shuffled in place,
    # as length_grouped_order's permutation without its copy.
    dtype = np.uint16 if max_length < 2**16 else np.int32 if max_length < np.iinfo(np.int32).max else np.int64
    lengths = np.repeat(histogram.lengths.astype(dtype), histogram.counts)
    np.random.default_rng(options.seed).shuffle(lengths)
    ordered = sort_megabatches(lengths, batch_sequences)
    del lengths
    return one_sequence_rows("group-by-length", ordered, padded_lengths(ordered, batch_sequences), max_length)


def one_sequence_rows(name: str, ordered: np.ndarray, slots: np.ndarray, max_length: int) -> Packing:
    """The packing of sequences `ordered`, one to a row of `slots` token slots (their batch's longest)."""
    dense = (max_length + 1) ** 2 <= DENSE_PAIR_TABLE_MAX
    # Keys to sort in 32 bits where they fit (max length < 46,340): 3.5 times faster than in 64.
    # bincount takes 64-bit keys (it would copy narrower ones). Built in place: no temporaries.
    key_type = np.int32 if not dense and (max_length + 1) ** 2 <= np.iinfo(np.int32).max else np.int64
    pair_keys = ordered.astype(key_type)
    pair_keys *= max_length + 1
    pair_keys += slots
    if dense:
        counts = np.bincount(pair_keys, minlength=(max_length + 1) ** 2)
        keys = np.flatnonzero(counts)
        counts = counts[keys]
    else:
        keys, counts = distinct_counts(pair_keys, in_place=True)
        keys = keys.astype(np.int64)
    # Keys are distinct and one sequence per row: the packing as is, without from_rows' merge of millions of rows.
    return Packing(name, max_length, 1, (keys // (max_length + 1))[:, None], counts.astype(np.int64),
                   keys % (max_length + 1))
