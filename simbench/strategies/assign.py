"""From a histogram packing to data: which sequence of the dataset goes into which pack slot.

    >>> import numpy as np
    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.strategies import get_strategy
    >>> from simbench.strategies.assign import assign_packs, assign_sequences
    >>> lengths = np.array([5, 3, 8, 5, 3])
    >>> packing = get_strategy("spfhp")(LengthHistogram.from_lengths(lengths, max_length=8), 8, 3)
    >>> packs = assign_sequences(packing, lengths, np.random.default_rng(0))
    >>> packs.tolist()   # sequence indices per pack, -1 where a slot is empty
    [[2, -1], [3, 4], [0, 1]]
    >>> lengths[packs[1][packs[1] >= 0]].tolist()   # the lengths of pack 1, as in one of packing.rows
    [5, 3]
    >>> assign_packs(packing, lengths, np.random.default_rng(0)).pack_offsets.tolist()   # ragged layout
    [0, 1, 3, 5]

Works in chunks of packs, so that memory stays near four bytes per sequence however deep the packs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from simbench.errors import InputError
from simbench.strategies.packing import Packing

# Slots filled at once: large enough that numpy's per-call cost vanishes, small enough that the
# sequences a chunk reads stay in the processor's cache (measured fastest from 2**16 to 2**18).
SLOTS_PER_CHUNK = 1 << 18
# Up to this many sequences one permutation of them all is faster than shuffling each length's run
# (measured: 1.8 against 3.1 ms at 100k; even at 1M; 1.1 against 0.43 s at 16M).
WHOLE_PERMUTATION_LIMIT = 1 << 20
# numpy's multivariate hypergeometric sampler is exact only below this many items.
MAX_PACKS_PER_DRAW = 10**9
# Packs drawn at once: this many per distinct pack, up to DRAW_PACKS_LIMIT (a draw takes 40 bytes a pack).
DRAW_PACKS_PER_DISTINCT = 8
DRAW_PACKS_LIMIT = 1 << 24
# A dense (packs x depth) array with more cells than this, and more than DENSE_CELLS_PER_SEQUENCE
# cells per sequence, is mostly empty slots: ask for the ragged layout instead.
DENSE_CELLS_LIMIT = 1 << 28
DENSE_CELLS_PER_SEQUENCE = 4


@dataclass(frozen=True)
class AssignedPacks:
    """Packs as ragged rows: pack i holds `sequence_indices[pack_offsets[i]:pack_offsets[i + 1]]`,
    longest sequence first, as in the packing's rows."""

    pack_offsets: np.ndarray
    sequence_indices: np.ndarray

    @property
    def packs(self) -> int:
        return len(self.pack_offsets) - 1

    @property
    def depths(self) -> np.ndarray:
        return np.diff(self.pack_offsets)


def assign_sequences(packing: Packing, sequence_lengths, rng: np.random.Generator) -> np.ndarray:
    """Per-pack sequence indices: a (packs x depth_used) array, -1 where a slot is empty.

    The same assignment as `assign_packs` with the same generator, laid out densely; refused when
    that layout would be mostly empty slots (deep packs of short sequences).
    """
    depth = packing.depth_used
    cells = packing.packs_total * depth
    if cells > DENSE_CELLS_LIMIT and cells > DENSE_CELLS_PER_SEQUENCE * packing.sequences:
        raise InputError(f"a dense packs x depth array would have {packing.packs_total:,} x {depth} cells "
                         f"({cells * 4 / 2**30:.1f} GiB) for {packing.sequences:,} sequences, mostly empty; "
                         "use the ragged layout (assign_packs, or a .parquet output)")
    chunks = iter_assigned_packs(packing, sequence_lengths, rng)
    assignment = np.full((packing.packs_total, depth), -1, dtype=_index_type(packing.sequences))
    flat = assignment.reshape(-1)
    first_pack = 0
    for chunk in chunks:
        cells = _runs((first_pack + np.arange(chunk.packs)) * depth, chunk.depths)
        flat[cells] = chunk.sequence_indices
        first_pack += chunk.packs
    return assignment


def assign_packs(packing: Packing, sequence_lengths, rng: np.random.Generator) -> AssignedPacks:
    """The whole assignment in the ragged layout (the chunks of `iter_assigned_packs` joined)."""
    chunks = list(iter_assigned_packs(packing, sequence_lengths, rng))
    sizes = [chunk.sequence_indices.size for chunk in chunks]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    offsets = [chunk.pack_offsets[1:] + start for chunk, start in zip(chunks, starts)]
    return AssignedPacks(np.concatenate([np.zeros(1, np.int64), *offsets]),
                         np.concatenate([chunk.sequence_indices for chunk in chunks]
                                        or [np.zeros(0, _index_type(0))]))


def iter_assigned_packs(packing: Packing, sequence_lengths, rng: np.random.Generator,
                        slots_per_chunk: int = SLOTS_PER_CHUNK) -> Iterator[AssignedPacks]:
    """The assignment in consecutive chunks of packs, each in the ragged layout.

    Every assignment consistent with the packing is equally likely, and so is every order of the
    packs: sequences of one length are shuffled, the i-th copy of a distinct pack takes the next
    unused ones of each of its lengths, and copies come out in a random order. The input is
    checked before this returns; the chunks are computed as they are asked for.
    """
    lengths, counts = _validated_lengths(packing, sequence_lengths)
    if packing.packs_total >= MAX_PACKS_PER_DRAW:
        raise InputError(f"{packing.packs_total:,} packs are too many to assign (at most {MAX_PACKS_PER_DRAW - 1:,})")
    index_type = _index_type(lengths.size)
    by_length = _sequences_by_length(lengths, counts, packing.max_length, index_type, rng)
    # Drawing a chunk's mix of distinct packs costs a pass over them, so a chunk has several packs
    # per distinct one where memory allows (group-by-length at 100M: 1.2M distinct one-sequence
    # packs, 83 passes over them took 12 s), at least one.
    distinct = packing.strategies_used
    packs_per_chunk = max(distinct, min(DRAW_PACKS_PER_DISTINCT * distinct, DRAW_PACKS_LIMIT),
                          slots_per_chunk * packing.packs_total // max(packing.sequences, 1), 1)
    # The chunks need neither the lengths nor the packs' contents: a caller that lets go of them
    # frees their memory while the chunks stream.
    return _chunks(packing.pack_starts, packing.repeats, _pair_starts(packing, counts, index_type), by_length, rng,
                   packs_per_chunk, slots_per_chunk)


def _chunks(pack_starts: np.ndarray, repeats: np.ndarray, pair_start: np.ndarray, by_length: np.ndarray,
            rng: np.random.Generator, packs_per_chunk: int, slots_per_chunk: int) -> Iterator[AssignedPacks]:
    depths = np.diff(pack_starts)
    # Slot j of distinct pack r is "pair" first_pair[r] + j; copy c of the pack takes sequence
    # by_length[pair_start[pair] + c] there.
    first_pair = pack_starts[:-1]
    left = repeats
    handed_out = np.zeros(repeats.size, dtype=np.int64)  # untouched until a second draw
    packs_left = int(repeats.sum())
    while packs_left:
        size = min(packs_per_chunk, packs_left)
        # The last draw (for `greedy`, whose packs are nearly all distinct, the only one) takes what is left.
        drawn = left if size == packs_left else rng.multivariate_hypergeometric(left, size)
        packs_left -= size
        present = np.flatnonzero(drawn)
        copies_drawn = drawn[present]
        # One shuffle moves (distinct pack, copy) together: both fit in 32 bits (packs < 10**9).
        # Each pack's first value less its place, repeated, plus every place: built in place,
        # as a draw may hold every pack (every pack of `greedy` is distinct).
        pack = present << 32
        pack += handed_out[present]
        pack -= _exclusive_cumsum(copies_drawn)
        pack = np.repeat(pack, copies_drawn)
        del present, copies_drawn
        pack += np.arange(size, dtype=np.int64)
        if packs_left:
            left = left - drawn  # a new array: the packing's repeats stay as they are
            handed_out += drawn
        rng.shuffle(pack)
        rows = pack >> 32
        copies = np.bitwise_and(pack, 0xFFFFFFFF, out=pack)
        # Fill the draw a chunk of slots at a time.
        slot_ends = depths[rows]
        np.cumsum(slot_ends, out=slot_ends)
        cuts = np.searchsorted(slot_ends, np.arange(slots_per_chunk, slot_ends[-1], slots_per_chunk), side="right")
        for piece_rows, piece_copies in zip(np.split(rows, cuts), np.split(copies, cuts)):
            if piece_rows.size:
                yield _fill(piece_rows, piece_copies, depths, first_pair, pair_start, by_length)


def _fill(pack_row, pack_copy, depths, first_pair, pair_start, by_length) -> AssignedPacks:
    """The sequences in these packs (copy `pack_copy[i]` of distinct pack `pack_row[i]`)."""
    pack_depths = depths[pack_row]
    pair = _runs(first_pair[pack_row], pack_depths)
    copy = _runs(pack_copy, pack_depths, step=0)
    offsets = np.concatenate([[0], np.cumsum(pack_depths)])
    return AssignedPacks(offsets, by_length[pair_start[pair] + copy])


def _pair_starts(packing: Packing, counts: np.ndarray, index_type) -> np.ndarray:
    """Where each (distinct pack, slot) pair's sequences start among the sequences sorted by length:
    pairs of one length take consecutive runs of that length's sequences, in pair order."""
    starts = np.empty(packing.pack_lengths.size, dtype=index_type)

    pack_starts = packing.pack_starts

    def copies(first, stop):  # each pair's copies: the repeats of the distinct packs that hold them
        low, high = np.searchsorted(pack_starts, [first, stop - 1], side="right")
        ends = np.minimum(pack_starts[low:high + 1], stop)
        begins = np.maximum(pack_starts[low - 1:high], first)
        return np.repeat(packing.repeats[low - 1:high], ends - begins)

    for first, order, places in _stable_layout(packing.pack_lengths, copies, counts, packing.max_length):
        starts[first + order] = places
    return starts


def _sequences_by_length(lengths: np.ndarray, counts: np.ndarray, max_length: int, index_type,
                         rng: np.random.Generator, chunk_size: int = SLOTS_PER_CHUNK) -> np.ndarray:
    """Sequence indices sorted by length, in a random order within each length.

    A counting sort done a chunk of the dataset at a time, so that the only large array is the
    result (four bytes per sequence below 2**31 sequences).
    """
    if lengths.size <= WHOLE_PERMUTATION_LIMIT:
        # Few sequences: sorting a random permutation of them beats a shuffle call per length.
        order = rng.permutation(lengths.size).astype(index_type)
        return order[_stable_order_by_length(lengths[order], max_length)]
    by_length = np.empty(lengths.size, dtype=index_type)
    for first, order, places in _stable_layout(lengths, None, counts, max_length, chunk_size):
        by_length[places] = order + first
    run_starts = _exclusive_cumsum(counts)
    # One run at a time keeps each shuffle's random accesses within one length's sequences.
    for length_index in np.flatnonzero(counts > 1):
        start = run_starts[length_index]
        rng.shuffle(by_length[start:start + counts[length_index]])
    return by_length


def _stable_layout(keys: np.ndarray, weights, counts: np.ndarray, max_length: int,
                   chunk_size: int = SLOTS_PER_CHUNK) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """A counting sort by length, a chunk at a time so that no temporary grows with the input.

    Element i takes `weights(first, stop)[i - first]` places (one each when `weights` is None),
    lengths in ascending order after runs of `counts` places each; yields each chunk's first index,
    its elements' order by length (stable) and the place where each of them, in that order, starts.
    """
    next_free = _exclusive_cumsum(counts)
    for first in range(0, keys.size, chunk_size):
        chunk = keys[first:first + chunk_size].astype(np.int64, copy=False)
        order = _stable_order_by_length(chunk, max_length)
        sizes = np.bincount(chunk, minlength=max_length + 1)[1:]
        present = np.flatnonzero(sizes)
        if weights is None:
            before = np.arange(chunk.size, dtype=np.int64)
            total = chunk.size
        else:
            taken = weights(first, first + chunk.size)[order]
            before = _exclusive_cumsum(taken)
            total = before[-1] + taken[-1]
        group_first = before[_exclusive_cumsum(sizes[present])]
        yield first, order, before + _runs(next_free[present] - group_first, sizes[present], step=0)
        next_free[present] += np.diff(np.append(group_first, total))


def _stable_order_by_length(lengths: np.ndarray, max_length: int) -> np.ndarray:
    """Indices that sort `lengths` stably: numpy radix-sorts 16-bit keys in linear time, so longer
    lengths are sorted by their low 16 bits, then by the rest (a two-pass radix sort)."""
    if max_length < 1 << 16:
        return np.argsort(lengths.astype(np.uint16), kind="stable")
    order = np.argsort((lengths & 0xFFFF).astype(np.uint16), kind="stable")
    return order[np.argsort((lengths[order] >> 16).astype(np.uint16), kind="stable")]


def _runs(starts: np.ndarray, run_lengths: np.ndarray, step: int = 1) -> np.ndarray:
    """The runs start, start + step, ... (run_length values each) laid end to end.

    Equal to concatenating aranges (or np.repeat with step 0), in a third of the time: one cumsum
    over steps that jump at each run's head. Every run length must be at least 1.
    """
    steps = np.full(int(run_lengths.sum()), step, dtype=np.int64)
    if steps.size:
        heads = np.cumsum(run_lengths[:-1])
        steps[0] = starts[0]
        steps[heads] = starts[1:] - starts[:-1] - step * (run_lengths[:-1] - 1)
    return np.cumsum(steps, out=steps)


def _exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    sums = np.zeros(len(values), dtype=np.int64)
    np.cumsum(values[:-1], out=sums[1:])
    return sums


def _index_type(sequences: int):
    """int32 while the indices fit, to keep 100M sequences at 400 MB."""
    return np.int32 if sequences <= np.iinfo(np.int32).max else np.int64


def _validated_lengths(packing: Packing, sequence_lengths) -> tuple[np.ndarray, np.ndarray]:
    """The lengths as an integer array, and their histogram (counts of lengths 1..max_length)."""
    lengths = np.asarray(sequence_lengths)
    if lengths.ndim != 1:
        raise InputError(f"sequence lengths must be a 1-D array, found shape {lengths.shape}")
    if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
        raise InputError(f"sequence lengths must be whole numbers, found dtype {lengths.dtype}")
    if lengths.size and (lengths.min() < 1 or lengths.max() > packing.max_length):
        bad = int(np.count_nonzero((lengths < 1) | (lengths > packing.max_length)))
        raise InputError(f"{bad} sequence lengths lie outside 1..{packing.max_length}")
    dataset = np.zeros(packing.max_length + 1, dtype=np.int64)
    # A chunk at a time: bincount would first copy 32-bit lengths to 64 bits, all of them at once.
    for start in range(0, lengths.size, SLOTS_PER_CHUNK):
        dataset += np.bincount(lengths[start:start + SLOTS_PER_CHUNK].astype(np.int64), minlength=dataset.size)
    dataset = dataset[1:]
    placed = packing.placed_histogram().counts
    if np.any(dataset != placed):
        length = int(np.flatnonzero(dataset != placed)[0]) + 1
        raise InputError(f"the sequence lengths do not match the packing's histogram: the dataset has "
                         f"{dataset[length - 1]} sequences of length {length}, the packing places "
                         f"{placed[length - 1]} ({lengths.size} sequences against {packing.sequences})")
    return lengths, dataset
