"""Per-device batches for every (step, device) of a run, drawn at once as one `BatchSet`.

Batch `step * devices + device` is the batch device `device` trains on at step `step`; every
draw consumes the generator in that order, so drawing a run in chunks of steps gives the same batches.
"""

from __future__ import annotations

import numpy as np

from simbench.costmodels.base import BatchSet
from simbench.histogram import LengthHistogram
from simbench.strategies.packing import Packing


class InverseCdf:
    """Exact inverse-CDF sampling of indices in proportion to weights, fast for millions of draws.

    A guide table sends each uniform draw close to its answer, a few vectorized steps finish it;
    the result equals `searchsorted(cumsum(weights) / total, u, side="right")`.
    """

    GUIDE_CELLS_PER_WEIGHT = 8

    def __init__(self, weights: np.ndarray):
        cdf = np.cumsum(np.asarray(weights, dtype=np.float64))
        cdf /= cdf[-1]
        cdf[-1] = np.inf  # no draw falls past the last index, whatever the rounding
        self.cdf = cdf
        self.guide = _guide_table(cdf, self.GUIDE_CELLS_PER_WEIGHT * cdf.size)

    def sample(self, rng: np.random.Generator, size) -> np.ndarray:
        return self.at(rng.random(size))

    def at(self, uniform: np.ndarray) -> np.ndarray:
        """The indices the uniform draws `uniform` (any shape, in [0, 1)) select."""
        size = np.shape(uniform)
        uniform = np.asarray(uniform, dtype=np.float64).reshape(-1)
        picks = self.guide[(uniform * self.guide.size).astype(np.int64)]
        behind = np.flatnonzero(self.cdf[picks] <= uniform)
        while behind.size:
            picks[behind] += 1
            behind = behind[self.cdf[picks[behind]] <= uniform[behind]]
        return picks.reshape(size)


def _guide_table(cdf: np.ndarray, cells: int) -> np.ndarray:
    """`searchsorted(cdf, arange(cells) / cells, side="right")` in linear time (the search took 1.8 s for a
    million weights, and every plan and device count builds one): each cdf value counts from the first cell
    whose start (computed as the search computes it) is not below it."""
    first_cell = np.ceil(cdf[:-1] * cells).clip(0, cells).astype(np.int64)
    # The product may round either way: step to the first cell that truly starts at or above the value.
    first_cell -= (first_cell > 0) & ((first_cell - 1) / cells >= cdf[:-1])
    first_cell += (first_cell < cells) & (first_cell / cells < cdf[:-1])
    # The last value is infinite: it counts in no cell.
    return np.cumsum(np.bincount(first_cell, minlength=cells + 1)[:cells])


def draw_in_proportion(weights: np.ndarray, rng: np.random.Generator, shape) -> np.ndarray:
    """Indices drawn in proportion to `weights`, as `InverseCdf(weights).sample` draws them; without its table
    unless there are at least twice as many draws as weights: a few hundred thousand draws from millions of
    weights are cheaper without, 131,072 from 4,000-16,000 weights (a pool's plain draws) 4-6x faster with."""
    weights = np.asarray(weights, dtype=np.float64)
    if 2 * weights.size <= np.prod(shape):
        return InverseCdf(weights).sample(rng, shape)
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    cdf[-1] = np.inf
    return np.searchsorted(cdf, rng.random(shape).reshape(-1), side="right").reshape(shape)


class SequenceSampler:
    """Draws sequence lengths with replacement in proportion to a histogram's counts."""

    def __init__(self, histogram: LengthHistogram):
        self.lengths = histogram.lengths
        self.item_weights = np.asarray(histogram.counts, dtype=np.float64)
        self.inverse_cdf = InverseCdf(histogram.counts)

    def lengths_of(self, rng: np.random.Generator, shape: tuple) -> np.ndarray:
        return self.lengths[self.inverse_cdf.sample(rng, shape)]

    def item_features(self) -> np.ndarray:
        """Per length: what a sequence adds to a batch's linear and attention work."""
        lengths = self.lengths.astype(np.float64)
        return np.column_stack([lengths, lengths**2])


def unpadded_batches(lengths: np.ndarray) -> BatchSet:
    """Each sequence its own row without padding; `lengths` is (..., batch_size), one batch per leading index."""
    batch_size = lengths.shape[-1]
    flat = lengths.reshape(-1).astype(np.int64, copy=False)
    rows = np.arange(flat.size, dtype=np.int64)
    return BatchSet(flat, rows, flat, rows // batch_size, flat.size // batch_size)


def rows_of_batches(lengths: list[np.ndarray], row_slots: np.ndarray) -> BatchSet:
    """Batch i's sequences `lengths[i]`, each its own row of `row_slots[i]` token slots."""
    sizes = np.array([batch.size for batch in lengths], dtype=np.int64)
    flat = np.concatenate(lengths).astype(np.int64, copy=False) if lengths else np.zeros(0, np.int64)
    rows = np.arange(flat.size, dtype=np.int64)
    return BatchSet(flat, rows, np.repeat(np.asarray(row_slots, dtype=np.int64), sizes),
                    np.repeat(np.arange(len(lengths)), sizes), len(lengths))


class PackSampler:
    """Draws rows of a packing in proportion to their repeats (the packed dataset, shuffled).

    It reads the packing's flat form only (`pack_lengths`, `pack_starts`): at long context a pack may hold
    thousands of short sequences beside packs of one long one, and a padded table of the packs would take
    gigabytes where the packs themselves take megabytes.
    """

    def __init__(self, packing: Packing):
        self.packing = packing
        self.inverse_cdf = InverseCdf(packing.repeats)
        self.depths = packing.depths
        # Real lengths of every distinct pack, one after another, so that a drawn pack's sequences are a slice.
        self.flat_lengths = packing.pack_lengths
        self.row_offsets = packing.pack_starts[:-1]
        # Each pack's longest sequence is its first (packs hold their lengths in descending order); 0 if empty.
        filled = self.depths > 0
        self.longest = np.zeros(self.depths.size, dtype=np.int64)
        self.longest[filled] = self.flat_lengths[self.row_offsets[filled]]

    def batches(self, rng: np.random.Generator, steps: int, devices: int, batch_size: int) -> BatchSet:
        """Batches of `steps` x `devices` (step-major), `batch_size` packs each."""
        return self.batches_of(self.picks(rng, steps, devices, batch_size), batch_size)

    def picks(self, rng: np.random.Generator, steps: int, devices: int, batch_size: int) -> np.ndarray:
        """The packs (indices of distinct packs) of `steps` x `devices` batches, `batch_size` consecutive ones each."""
        return self.inverse_cdf.sample(rng, steps * devices * batch_size)

    def batches_of(self, picks: np.ndarray, batch_size: int) -> BatchSet:
        """The batches of given rows of the packing, `batch_size` consecutive picks each."""
        picks = picks.reshape(-1)
        return self._batch_set(picks, self.row_slots(picks, batch_size), batch_size)

    def row_slots(self, picks: np.ndarray, batch_size: int) -> np.ndarray:
        """Token slots of each picked row: the pack's own."""
        return self.packing.slot_lengths[picks].astype(np.int64)

    @property
    def item_weights(self) -> np.ndarray:
        return self.packing.repeats.astype(np.float64)

    def item_features(self) -> np.ndarray:
        """Per distinct pack: its real tokens, their squares (attention) and its sequences (packing overhead)."""
        # Sums of whole numbers below 2^53, exact in int64 and float64 alike.
        tokens = _per_pack_sums(self.flat_lengths, self.packing.pack_starts)
        squares = _per_pack_sums(self.flat_lengths**2, self.packing.pack_starts)
        return np.column_stack([tokens, squares, self.depths]).astype(np.float64)

    def _batch_set(self, picks: np.ndarray, row_slots: np.ndarray, batch_size: int) -> BatchSet:
        rows = np.arange(picks.size, dtype=np.int64)
        row_batch = rows // batch_size
        if self.packing.depth_used == 1:
            lengths = self.flat_lengths[self.row_offsets[picks]]
            return BatchSet(lengths, rows, row_slots, row_batch, picks.size // batch_size)
        depths = self.depths[picks]
        ends = np.cumsum(depths)
        # Sequence k of the batch set is flat_lengths[k + (its row's offset - its row's first k)].
        shift = np.repeat(self.row_offsets[picks] - (ends - depths), depths)
        sequence_lengths = self.flat_lengths[shift + np.arange(ends[-1], dtype=np.int64)]
        return BatchSet(sequence_lengths, np.repeat(rows, depths), row_slots, row_batch, picks.size // batch_size)


class OutlierDelaySampler(PackSampler):
    """WLB-LLM's outlier delay (arXiv 2503.17924, section 4): documents of at least `threshold` tokens wait
    until there are enough of them for every microbatch of a global batch, so a step's packs either all hold
    one such outlier or none does, and no microbatch carries an outlier's attention while the others idle.

    Outlier steps come as the queue releases them, evenly: step s is one when floor((s + 1) x share + phase)
    passes an integer, `share` being the outlier packs' share of all packs (each is still trained once an epoch)
    and the phase drawn once. Unlike a coin per step, this keeps the run's mix of heavy and light steps at the
    dataset's, whose chance swings would otherwise move a 100-step mean by several per cent. All devices of a
    step then draw its kind's packs in proportion to their repeats, so devices do not draw independently.
    The sampler counts the steps it has drawn: drawing a run in chunks of steps gives the same batches.
    """

    def __init__(self, packing: Packing, threshold: int):
        super().__init__(packing)
        outlier = self.longest >= threshold
        repeats = packing.repeats.astype(np.float64)
        self.kinds = (np.flatnonzero(~outlier), np.flatnonzero(outlier))
        self.within_kind = [InverseCdf(repeats[members]) if members.size else None for members in self.kinds]
        self.outlier_share = float(repeats[outlier].sum() / repeats.sum())
        self.phase: float | None = None
        self.steps_drawn = 0

    def picks(self, rng: np.random.Generator, steps: int, devices: int, batch_size: int) -> np.ndarray:
        if self.phase is None:
            self.phase = float(rng.random())
        released = np.floor((self.steps_drawn + np.arange(steps + 1)) * self.outlier_share + self.phase)
        outlier_step = np.diff(released) > 0
        self.steps_drawn += steps
        uniform = rng.random((steps, devices * batch_size))
        picks = np.empty((steps, devices * batch_size), dtype=np.int64)
        for kind, (members, cdf) in enumerate(zip(self.kinds, self.within_kind)):
            chosen = outlier_step == bool(kind)
            if chosen.any():
                picks[chosen] = members[cdf.at(uniform[chosen])]
        return picks.reshape(-1)


class SortedBatchSampler(PackSampler):
    """Draws batches of the length-sorted dataset, longest first, each padded to its longest sequence.

    The sorted dataset is cut into batches of `batch_size`; a step takes `devices` consecutive ones (a
    global batch of similar lengths split across the devices), starting at a random batch, wrapping around.
    """

    def __init__(self, packing: Packing):
        unsorted = PackSampler(packing)
        order = np.argsort(-unsorted.longest, kind="stable")
        depths = unsorted.depths[order]
        starts = np.concatenate([[0], np.cumsum(depths)]).astype(np.int64)
        # Sequence k of the reordered flat form comes from its pack's old start plus its place in the pack.
        taken = np.repeat(unsorted.row_offsets[order] - starts[:-1], depths) + np.arange(starts[-1], dtype=np.int64)
        sorted_packing = Packing(packing.strategy, packing.max_length, packing.max_depth, None, packing.repeats[order],
                                 packing.slot_lengths[order], pack_lengths=unsorted.flat_lengths[taken],
                                 pack_starts=starts)
        super().__init__(sorted_packing)
        self.row_ends = np.cumsum(sorted_packing.repeats)

    def picks(self, rng: np.random.Generator, steps: int, devices: int, batch_size: int) -> np.ndarray:
        whole_batches = max(int(self.row_ends[-1]) // batch_size, 1)
        first = rng.integers(0, whole_batches, size=(steps, 1))
        batch_index = (first + np.arange(devices)) % whole_batches
        positions = (batch_index.reshape(-1, 1) * batch_size + np.arange(batch_size)).reshape(-1)
        return np.minimum(np.searchsorted(self.row_ends, positions, side="right"), self.row_ends.size - 1)

    def row_slots(self, picks: np.ndarray, batch_size: int) -> np.ndarray:
        """Token slots of each picked row: its batch's longest sequence."""
        return np.repeat(self.longest[picks].reshape(-1, batch_size).max(axis=1), batch_size)


def _per_pack_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Sum of `values[starts[i]:starts[i + 1]]` for each pack i (0 for an empty one)."""
    sums = np.concatenate([[0], np.cumsum(values)])
    return sums[starts[1:]] - sums[starts[:-1]]
