"""Length-grouped batching (HF's megabatch sort) at any cluster size, priced per megabatch, not per device.

Step s of n devices trains on batches s x n .. (s + 1) x n - 1 of a stream of sorted megabatches of G
batches each (`length_batching.LengthGroupedStream`). The megabatches wholly inside a step are i.i.d.:
their slowest batch is their first (sorted longest first, and a batch of longer sequences never costs
less), so the step's slowest of q of them is drawn by inversion at U^(1/q) from a pool of first
batches, whose tail is stratified on the megabatch's largest uniform draw (its top B order statistics
drawn directly, exactly); their sums are q times a pool of whole megabatches' mean, with the spread of
a few drawn ones scaled to q. The megabatches a step shares with its neighbours are drawn and priced
whole, as the per-device path draws them, so a step of a million devices costs what one of a few does.
"""

from __future__ import annotations

import numpy as np

from simbench.costmodels.base import ExecutionMode
from simbench.histogram import LengthHistogram
from simbench.sim.batching import SequenceSampler
from simbench.sim.length_batching import padded_batches
from simbench.sim.engines.vectorized import StepAggregates
from simbench.sim.engines.order_statistics import DEEPEST_TAIL_PER_SLOWEST_OF, LEVEL_RATIO, DevicePool
from simbench.sim.pricing import DeviceCosts, price_batches
from simbench.validation import DEVICES_MAX

FIELDS = ("total_seconds", "compute_seconds", "padding_seconds", "overhead_seconds", "stall_seconds",
          "real_tokens", "sequences", "masked_attention_seconds")
# Sequences priced in one call, and at most in each pool: bounds memory and time whatever the batch.
SEQUENCES_PER_CALL = 1 << 20
POOL_SEQUENCES = 1 << 22
# First batches drawn per tail stratum (down to a sixteenth for long batches), each stratum LEVEL_RATIO
# deeper than the last, down to where the largest cluster's U^(1/q) reaches in 1 % of its steps.
FIRST_BATCHES_PER_STRATUM = 2048
FIRST_BATCHES_PER_STRATUM_MIN = 128
# Whole megabatches in the pool of sums (down to a few for large ones: their sums vary little), and drawn
# per step to give its sum a spread.
POOL_MEGABATCHES = 1024
POOL_MEGABATCHES_MIN = 4
MEGABATCHES_DRAWN = 32
# Sequences of shared megabatches drawn afresh per cluster size; beyond, they are taken from the pool.
SHARED_SEQUENCES_MAX = 1 << 23


class MegabatchSteps:
    """Pools of one length-grouped stream, built once and shared by every cluster size."""

    def __init__(self, histogram: LengthHistogram, batch_sequences: int, megabatch_sequences: int, cost_model,
                 rng: np.random.Generator):
        self.sampler = SequenceSampler(histogram)
        self.cost_model = cost_model
        self.batch_sequences, self.megabatch = batch_sequences, megabatch_sequences
        self.batches_per_megabatch = megabatch_sequences // batch_sequences
        self.first_batches = self._first_batch_pool(histogram, rng)
        megabatches = int(np.clip(POOL_SEQUENCES // megabatch_sequences, POOL_MEGABATCHES_MIN, POOL_MEGABATCHES))
        drawn = self._draw_megabatches(rng, megabatches).reshape(-1, batch_sequences)
        # (megabatches, batches per megabatch, fields): each pool megabatch's batches in their sorted order.
        self.pool_batches = _field_values(self._price(drawn)).reshape(megabatches, self.batches_per_megabatch, -1)
        self.megabatch_sums = self.pool_batches.sum(axis=1)
        self.mean_sums = self.megabatch_sums.mean(axis=0)
        # Known exactly: the dataset's mean length times the megabatch's sequences.
        real_tokens = FIELDS.index("real_tokens")
        self.mean_sums[real_tokens] = megabatch_sequences * histogram.real_tokens / histogram.sequences

    def aggregates(self, devices: int, steps: int, rng: np.random.Generator) -> StepAggregates:
        """Per-step aggregates of `steps` steps of `devices` devices dealt the stream round-robin."""
        per_megabatch = self.batches_per_megabatch
        first = np.arange(steps, dtype=np.int64) * devices
        end = first + devices
        whole = np.maximum(0, end // per_megabatch - (-(-first // per_megabatch)))
        # Shared megabatches first: below G devices they are every megabatch, drawn as the per-device path draws.
        part_slowest, part_sums = self._shared_parts(first, end, rng)
        slowest = self._slowest_first_batch(whole, rng)
        sums = self._whole_sums(whole, rng)
        slowest = np.maximum(slowest, part_slowest)
        sums += part_sums
        means = sums[:, 1:5] / devices
        return StepAggregates(slowest, sums[:, 0] / devices, *means.T, sums[:, 5], sums[:, 6], sums[:, 7] / devices)

    def _slowest_first_batch(self, whole: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The slowest of each step's `whole` megabatches' first batches (-inf where none)."""
        uniform = 1.0 - rng.random(whole.size)
        level = -np.expm1(np.log(uniform) / np.maximum(whole, 1))
        pool = self.first_batches
        rank = np.minimum(np.searchsorted(-pool.tail, -level, side="left"), pool.tail.size - 1)
        return np.where(whole > 0, pool.total_seconds[rank], -np.inf)

    def _whole_sums(self, whole: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Sums over each step's `whole` megabatches: drawn from the pool up to MEGABATCHES_DRAWN, beyond
        that many drawn and their deviation from the mean scaled to `whole` (a sum of many i.i.d. terms)."""
        picks = rng.integers(0, self.megabatch_sums.shape[0], size=(whole.size, MEGABATCHES_DRAWN))
        drawn = np.minimum(whole, MEGABATCHES_DRAWN)
        used = (np.arange(MEGABATCHES_DRAWN)[None, :] < drawn[:, None]).astype(np.float64)
        drawn_sums = np.einsum("sd,sdf->sf", used, self.megabatch_sums[picks])
        scale = np.sqrt(whole / np.maximum(drawn, 1))[:, None]
        return whole[:, None] * self.mean_sums + scale * (drawn_sums - drawn[:, None] * self.mean_sums)

    def _shared_parts(self, first: np.ndarray, end: np.ndarray,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Slowest batch and sums over the batches each step holds of megabatches it does not hold whole
        (shared with a neighbouring step, or longer than the step): those megabatches drawn and priced whole,
        or where that would pass SHARED_SEQUENCES_MAX sequences (long batches, many steps), taken from the pool."""
        per_megabatch = self.batches_per_megabatch
        # Each step's batch range cut at megabatch boundaries: a head, whole megabatches, a tail.
        head_end = np.minimum(-(-first // per_megabatch) * per_megabatch, end)
        tail_start = np.maximum(end // per_megabatch * per_megabatch, head_end)
        starts = np.concatenate([first, tail_start])
        stops = np.concatenate([head_end, end])
        steps_of = np.tile(np.arange(first.size), 2)
        partial = (stops > starts) & ((starts % per_megabatch > 0) | (stops - starts < per_megabatch))
        starts, stops, steps_of = starts[partial], stops[partial], steps_of[partial]
        slowest = np.full(first.size, -np.inf)
        sums = np.zeros((first.size, len(FIELDS)))
        if not starts.size:
            return slowest, sums
        megabatch_of = starts // per_megabatch
        drawn, index = np.unique(megabatch_of, return_inverse=True)  # a shared megabatch is one draw
        if drawn.size * self.megabatch <= SHARED_SEQUENCES_MAX:
            batches = self._draw_megabatches(rng, drawn.size).reshape(-1, self.batch_sequences)
            values = _field_values(self._price(batches))  # (batches, fields), megabatch after megabatch
        else:
            values = self.pool_batches[rng.integers(0, self.pool_batches.shape[0], drawn.size)].reshape(-1, len(FIELDS))
        batch_first = index * per_megabatch + starts % per_megabatch
        batch_stop = batch_first + (stops - starts)
        cumulative = np.vstack([np.zeros(len(FIELDS)), np.cumsum(values, axis=0)])
        np.add.at(sums, steps_of, cumulative[batch_stop] - cumulative[batch_first])
        totals = np.append(values[:, 0], -np.inf)  # reduceat needs each segment's end inside the array
        segment_max = np.maximum.reduceat(totals, np.column_stack([batch_first, batch_stop]).ravel())[::2]
        np.maximum.at(slowest, steps_of, segment_max)
        return slowest, sums

    def _draw_megabatches(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """`count` megabatches as the stream draws them: (count, megabatch) lengths, each sorted longest first."""
        drawn = self.sampler.lengths_of(rng, (count, self.megabatch))
        return -np.sort(-drawn, axis=1)

    def _first_batch_pool(self, histogram: LengthHistogram, rng: np.random.Generator) -> DevicePool:
        """First batches of megabatches (their B longest of m draws), deep enough into the tail for the
        largest cluster: DEVICES_MAX devices hold about DEVICES_MAX / G whole megabatches a step."""
        whole = DEVICES_MAX // self.batches_per_megabatch + 1
        strata = stratum_edges(DEEPEST_TAIL_PER_SLOWEST_OF / whole).size - 1
        per_stratum = max(FIRST_BATCHES_PER_STRATUM_MIN,
                          min(FIRST_BATCHES_PER_STRATUM, POOL_SEQUENCES // (strata * self.batch_sequences)))
        above_top, log_weights = stratified_tops(DEEPEST_TAIL_PER_SLOWEST_OF / whole, per_stratum, rng)
        batches = top_order_statistics(histogram, self.megabatch, self.batch_sequences, above_top, rng)
        return DevicePool.from_draws(self._price(batches), log_weights, 0)

    def _price(self, batches: np.ndarray) -> DeviceCosts:
        """(batches, B) sorted lengths priced as padded batches, a bounded number of sequences per call."""
        per_call = max(1, SEQUENCES_PER_CALL // self.batch_sequences)
        parts = [price_batches(self.cost_model, padded_batches(batches[first:first + per_call][None]),
                               ExecutionMode.SORTED, 1, batches[first:first + per_call].shape[0])
                 for first in range(0, batches.shape[0], per_call)]
        return DeviceCosts.concatenate_devices(parts)


def stratum_edges(deepest: float) -> np.ndarray:
    """1, LEVEL_RATIO, LEVEL_RATIO^2, ... down past `deepest`, then 0: edges of the tail strata."""
    edges = [1.0]
    while edges[-1] > deepest:
        edges.append(edges[-1] * LEVEL_RATIO)
    return np.array([*edges, 0.0])


def stratified_tops(deepest: float, per_stratum: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draws of 1 - u^m, u the largest of a megabatch's m uniforms (uniform on (0, 1): P(u^m <= x) = x),
    `per_stratum` in each stratum of `stratum_edges(deepest)`, and their log importance weights (the
    stratum's width over its draws), so that a weighted pool reaches a tail share of `deepest`."""
    edges = stratum_edges(deepest)
    high, low = np.repeat(edges[:-1], per_stratum), np.repeat(edges[1:], per_stratum)
    return low + (high - low) * rng.random(high.size), np.log(high - low) - np.log(per_stratum)


def top_order_statistics(histogram: LengthHistogram, draws: int, count: int, above_top: np.ndarray,
                         rng: np.random.Generator) -> np.ndarray:
    """The `count` largest of `draws` lengths drawn from `histogram`, longest first, one row per value of
    `above_top` (1 - u^draws, u their largest uniform): below u the other uniforms are i.i.d. uniform, so
    each next largest is the last times W^(1/(draws - k)) (W uniform), mapped through the histogram's
    quantile function. Kept as -log u, which keeps its digits near u = 1."""
    top = -np.log1p(-above_top) / draws
    shrink = -np.log(1.0 - rng.random((above_top.size, count - 1))) / (draws - np.arange(1, count))
    minus_log_u = np.cumsum(np.column_stack([top, shrink]), axis=1)
    above = -np.expm1(-minus_log_u)  # 1 - u: the share of the dataset above each draw's quantile
    counts = histogram.counts.astype(np.float64)
    survival = np.append(np.cumsum(counts[::-1])[::-1][1:], 0.0) / counts.sum()  # share above each length
    index = np.minimum(np.searchsorted(-survival, -above, side="left"), counts.size - 1)
    return histogram.lengths[index]


def _field_values(costs: DeviceCosts) -> np.ndarray:
    """(batches, fields): each priced batch's FIELDS."""
    return np.column_stack([getattr(costs, name).ravel() for name in FIELDS])
