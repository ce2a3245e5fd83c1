"""The LP lower bound on packs: the relaxation of histogram packing, solved by column generation.

Its optimum is a certified lower bound on the packs any packer needs; `optimal` rounds it.

    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.strategies.lp_bound import lp_lower_bound
    >>> histogram = LengthHistogram.from_counts([0, 1, 2, 3, 4, 5, 6, 7])  # i - 1 sequences of length i
    >>> bound = lp_lower_bound(histogram, 8, max_depth=3)
    >>> round(bound.value, 6), bound.lower_bound_packs
    (23.5, 24)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simbench.histogram import LengthHistogram
from simbench.stored_results import StoredResults, counts_digest
from simbench.strategies.highs import silent_highs
from simbench.validation import check_pack_limits

# A pattern prices out (improves the LP) when its dual value exceeds 1 by more than this.
PRICING_TOLERANCE = 1e-9
# Patterns added to the master LP per pricing round: one per best "first length" candidate.
COLUMNS_PER_ROUND = 200
# Knapsack table cells computed at once: bounds the pricing's memory for long contexts.
DP_CELLS_PER_CHUNK = 2**21
# The master keeps about this many columns per length present; the rest go when it grows past.
COLUMNS_KEPT_PER_ROW = 8
# Only columns this far from pricing out are dropped.
DROP_REDUCED_COST = 0.05
# Safety cap on pricing rounds; the reported bound stays valid (Farley) if it is ever reached.
MAX_PRICING_ROUNDS = 2000

# Raise it with any change that may change a bound: stored bounds of another version are never read.
ALGORITHM_VERSION = 1
# Bounds computed in less are not worth a file in the user cache (`simbench pack` on a small sample).
STORE_SECONDS = 1.0
STORED_BOUNDS = StoredResults("lp_lower_bound", ALGORITHM_VERSION)

# Column generation prices patterns with a knapsack over (distinct lengths x max length) cells
# each round, and its master LP has a row per distinct length: beyond this many cells (Wikipedia
# 512 has 262k) the bound is computed on coarsened lengths instead.
EXACT_CELLS = 1 << 18
# `simbench pack` computes the bound unasked only below this many cells (well under a second).
CHEAP_CELLS = 1 << 15
# The coarse grid: lengths rounded down to multiples of max_length / COARSE_UNITS tokens. Any pack
# of the real lengths still fits once they are rounded down, so the coarse LP stays a lower bound.
COARSE_UNITS = 512
# Without a depth limit, sequences shorter than this many grid units become fluid tokens that fill
# whatever room a pack has left (a relaxation too), so rounding them costs nothing.
FLUID_UNITS = 16


@dataclass(frozen=True, eq=False)
class LPBound:
    """A certified lower bound on the packs of one (histogram, max_length, max_depth).

    `value` is a lower bound on the LP relaxation's optimum (Farley's bound: the dual value of the
    last master LP scaled by 1 / (largest pattern price)), equal to it once no pattern prices out
    (`converged`); `lower_bound_packs` is its ceiling. `primal_value` is the restricted master's
    optimum, an upper bound on the LP. `patterns` holds the packs the LP uses (lengths, descending,
    zero-padded, like `Packing.rows`) and `weights` their fractional repeat counts. `method` says
    how it was computed ("column generation" on the lengths themselves, or "counting" where that
    would take too long); `seconds` is how long it took here: computing it, or when `cached`, reading
    it from the bounds shipped with the package or the user cache (`simbench.stored_results`).
    """

    value: float
    lower_bound_packs: int
    primal_value: float
    converged: bool
    pricing_rounds: int
    patterns: np.ndarray
    weights: np.ndarray
    method: str = "column generation"
    seconds: float = 0.0
    cached: bool = False

    def stored(self) -> dict:
        """The bound as JSON values (floats as Python writes them, so they read back bit for bit)."""
        return {"value": self.value, "lower_bound_packs": self.lower_bound_packs, "primal_value": self.primal_value,
                "converged": self.converged, "pricing_rounds": self.pricing_rounds,
                "patterns": self.patterns.tolist(), "pattern_width": int(self.patterns.shape[1]),
                "weights": self.weights.tolist(), "method": self.method}

    @classmethod
    def from_stored(cls, entry: dict, seconds: float) -> LPBound:
        patterns = np.array(entry["patterns"], dtype=np.int64).reshape(-1, int(entry["pattern_width"]))
        return cls(float(entry["value"]), int(entry["lower_bound_packs"]), float(entry["primal_value"]),
                   bool(entry["converged"]), int(entry["pricing_rounds"]), patterns,
                   np.array(entry["weights"], dtype=np.float64).reshape(-1), str(entry["method"]), seconds,
                   cached=True)


def trivial_lower_bound(histogram: LengthHistogram, max_length: int, max_depth: int | None = None) -> int:
    """The counting bounds: every token needs a slot, every sequence a place in a pack of max_depth."""
    bound = -(-histogram.real_tokens // max_length)
    if max_depth is not None:
        bound = max(bound, -(-histogram.sequences // max_depth))
    return int(bound)


def long_sequence_bound(counts: np.ndarray, max_length: int) -> int:
    """Martello and Toth's L2: sequences longer than half a pack need a pack each, and the shorter
    ones that cannot join them (at least K tokens long where a long one leaves less room) fill more.

    Valid for any packing; the maximum over all thresholds K in 0..max_length/2, in one pass.
    """
    lengths = np.arange(1, counts.size + 1, dtype=np.int64)
    by_length = np.zeros(max_length + 1, dtype=np.int64)
    by_length[1:counts.size + 1] = counts
    tokens = np.zeros(max_length + 1, dtype=np.int64)
    tokens[1:counts.size + 1] = counts * lengths
    sequences_up_to = np.cumsum(by_length)
    tokens_up_to = np.cumsum(tokens)
    half = max_length // 2
    threshold = np.arange(0, half + 1)
    beyond = sequences_up_to[-1] - sequences_up_to[max_length - threshold]  # longer than max_length - K
    long_ones = sequences_up_to[max_length - threshold] - sequences_up_to[half]  # half < l <= max_length - K
    room_beside_long = long_ones * max_length - (tokens_up_to[max_length - threshold] - tokens_up_to[half])
    middle_tokens = tokens_up_to[half] - tokens_up_to[np.maximum(threshold - 1, 0)]  # K <= l <= half
    extra = np.maximum(0, -(-(middle_tokens - room_beside_long) // max_length))
    return int((beyond + long_ones + extra).max(initial=0))


def exact_bound_cells(histogram: LengthHistogram, max_length: int) -> int:
    """The size of one pricing knapsack of the exact column generation."""
    return int(np.count_nonzero(histogram.counts)) * int(max_length)


def bound_is_cheap(histogram: LengthHistogram, max_length: int, max_depth: int | None = None) -> bool:
    """Whether the LP bound takes well under a second, so a command may compute it unasked."""
    return exact_bound_cells(histogram, max_length) <= CHEAP_CELLS


def lp_lower_bound(histogram: LengthHistogram, max_length: int, max_depth: int | None = None) -> LPBound:
    """The LP lower bound on packs for `histogram` at `max_length` (and `max_depth` sequences per pack).

    Computed once per process for each histogram content and limits (a cache keyed by the
    counts), so asking again for each strategy costs nothing; `seconds` keeps the first cost. A bound
    stored for the same counts, limits and ALGORITHM_VERSION (shipped for the bundled histograms, or
    in the user cache) is read instead of computed, and says so (`cached`).
    """
    max_length = check_pack_limits(histogram, max_length, max_depth)
    depth = None if max_depth is None else int(max_depth)
    return _cached_lp_lower_bound(histogram.counts.tobytes(), max_length, depth)


def clear_cache() -> None:
    """Forget every computed bound (benchmarks time a fresh process this way)."""
    _cached_lp_lower_bound.cache_clear()


def stored_lp_lower_bound(histogram: LengthHistogram, max_length: int, max_depth: int | None = None
                          ) -> LPBound | None:
    """The bound if it is stored (shipped or in the user cache), else None: nothing is computed."""
    return _stored_bound(histogram.counts, int(max_length), None if max_depth is None else int(max_depth))


def _stored_bound(counts: np.ndarray, max_length: int, max_depth: int | None) -> LPBound | None:
    start = time.perf_counter()
    entry = STORED_BOUNDS.find(_stored_inputs(counts, max_length, max_depth))
    if entry is None:
        return None
    try:
        return LPBound.from_stored(entry, time.perf_counter() - start)
    except (KeyError, TypeError, ValueError):  # an entry of the wrong shape is computed again
        return None


def _stored_inputs(counts: np.ndarray, max_length: int, max_depth: int | None) -> dict:
    return {"counts_sha256": counts_digest(counts), "max_length": max_length, "max_depth": max_depth}


@functools.lru_cache(maxsize=64)
def _cached_lp_lower_bound(counts_bytes: bytes, max_length: int, max_depth: int | None) -> LPBound:
    counts = np.frombuffer(counts_bytes, dtype=np.int64)
    stored = _stored_bound(counts, max_length, max_depth)
    if stored is not None:
        return stored
    bound = computed_lp_lower_bound(counts, max_length, max_depth)
    if bound.seconds >= STORE_SECONDS:
        STORED_BOUNDS.keep(_stored_inputs(counts, max_length, max_depth), bound.stored())
    return bound


def computed_lp_lower_bound(counts: np.ndarray, max_length: int, max_depth: int | None) -> LPBound:
    """The bound computed afresh, never read from a store (checked limits assumed)."""
    start = time.perf_counter()
    if np.count_nonzero(counts) * max_length <= EXACT_CELLS:
        bound = _exact_bound(counts, max_length, max_depth)
    else:
        bound = _coarse_bound(counts, max_length, max_depth)
    return dataclasses.replace(bound, seconds=time.perf_counter() - start)


def _exact_bound(counts: np.ndarray, max_length: int, max_depth: int | None) -> LPBound:
    items = LengthItems.from_counts(counts, max_length, max_depth)
    master = MasterLP(items.demand)
    master.add_patterns(items.starting_patterns())
    solution = column_generation(master, items, items.demand, whole_packs_only=True)
    used = solution.weights > 0
    patterns = items.rows(master.matrix[:used.size][used])
    return LPBound(solution.bound, _robust_ceil(solution.bound), solution.primal_value, solution.converged,
                   solution.pricing_rounds, patterns, solution.weights[used])


def _coarse_bound(counts: np.ndarray, max_length: int, max_depth: int | None) -> LPBound:
    """The LP bound of a coarsened histogram, which no packing of the real one can beat.

    Each sequence is split into whole grid units (`COARSE_UNITS` per pack), its solid part, and
    the tokens left over, which join a fluid that fills whatever room a pack has left: every real
    pack stays a pack of its parts, so the coarse LP is a relaxation, and it keeps every token.
    Without a depth limit, sequences under `FLUID_UNITS` units are all fluid; with one, only those
    under one unit are (the counting bounds still count them as sequences).
    """
    unit = -(-max_length // COARSE_UNITS)
    lengths = np.arange(1, counts.size + 1, dtype=np.int64)
    units = lengths // unit
    solid = (units >= (FLUID_UNITS if max_depth is None else 1)) & (counts > 0)
    fluid_tokens = int(counts @ lengths - counts[solid] @ (unit * units[solid]))
    coarse_counts = np.bincount(units[solid], weights=counts[solid], minlength=max_length // unit + 1)[1:]
    items = _FluidItems(LengthItems.from_counts(np.rint(coarse_counts).astype(np.int64), max_length // unit,
                                                max_depth), unit, max_length)
    demand = np.append(items.solid.demand, fluid_tokens)
    master = MasterLP(demand, open_rows=np.arange(demand.size) == items.lengths.size)
    master.add_patterns(items.starting_patterns())
    solution = column_generation(master, items, demand, whole_packs_only=True)
    counting = _counting_bound(counts, max_length, max_depth).lower_bound_packs
    packs = max(_robust_ceil(solution.bound), counting)
    return LPBound(max(solution.bound, float(counting)), packs, solution.primal_value, solution.converged,
                   solution.pricing_rounds, np.zeros((0, 1), dtype=np.int64), np.zeros(0), method="coarse grid")


class _FluidItems:
    """Coarse lengths plus fluid tokens: a pack of coarse lengths is topped up with fluid to max_length.

    The master's last row asks for at least the fluid tokens; a pack's worth is its lengths' prices
    plus the fluid price times the room they leave, so the knapsack prices each length net of the
    fluid it displaces.
    """

    def __init__(self, solid: LengthItems, unit: int, max_length: int):
        self.solid = solid
        self.lengths = solid.lengths
        self.unit = unit
        self.max_length = max_length

    def _with_fluid(self, patterns) -> list[np.ndarray]:
        return [np.append(pattern, self.max_length - self.unit * int(pattern @ self.lengths)) for pattern in patterns]

    def starting_patterns(self) -> list[np.ndarray]:
        only_fluid = np.zeros(self.lengths.size + 1, dtype=np.int64)
        only_fluid[-1] = self.max_length
        return [only_fluid, *self._with_fluid(self.solid.starting_patterns())]

    def dual_prices(self, row_duals: np.ndarray) -> np.ndarray:
        # The fluid row is a covering row: its price is never negative at an optimum; clipping
        # guards the bound against a solver's rounding of that sign.
        return np.append(row_duals[:-1], max(float(row_duals[-1]), 0.0))

    def price(self, values: np.ndarray) -> tuple[float, list[np.ndarray]]:
        fluid_price = values[-1]
        net = values[:-1] - fluid_price * self.unit * self.lengths
        best, patterns = self.solid.price(net, empty_pack_value=fluid_price * self.max_length)
        return best, self._with_fluid(patterns)


def _counting_bound(counts: np.ndarray, max_length: int, max_depth: int | None) -> LPBound:
    histogram = LengthHistogram(counts)
    packs = max(trivial_lower_bound(histogram, max_length, max_depth), long_sequence_bound(counts, max_length))
    return LPBound(float(packs), packs, math.inf, False, 0, np.zeros((0, 1), dtype=np.int64), np.zeros(0),
                   method="counting")


def _robust_ceil(value: float) -> int:
    """Ceil that forgives float rounding: at ~8M packs one ulp is already ~1e-9 packs."""
    return int(math.ceil(value - 1e-9 * max(1.0, abs(value))))


@dataclass(frozen=True, eq=False)
class LengthItems:
    """The distinct lengths present (ascending) and how many sequences have each."""

    lengths: np.ndarray
    demand: np.ndarray
    max_length: int
    max_depth: int | None

    @classmethod
    def from_counts(cls, counts: np.ndarray, max_length: int, max_depth: int | None) -> LengthItems:
        present = np.flatnonzero(counts)
        lengths = (present + 1).astype(np.int64)
        # A depth limit the capacity already enforces only slows the pricing down.
        if max_depth is not None and lengths.size and max_depth >= max_length // lengths[0]:
            max_depth = None
        return cls(lengths, counts[present].astype(np.int64), max_length, max_depth)

    def starting_patterns(self) -> list[np.ndarray]:
        """Single-sequence packs (so any demand is feasible) and packs of one length repeated."""
        fill = self.max_length // self.lengths
        if self.max_depth is not None:
            fill = np.minimum(fill, self.max_depth)
        patterns = []
        for item, repeat in enumerate(fill):
            for copies in {1, int(repeat)}:
                pattern = np.zeros(self.lengths.size, dtype=np.int64)
                pattern[item] = copies
                patterns.append(pattern)
        return patterns

    def multiplicities(self, rows: np.ndarray) -> np.ndarray:
        """Per-item multiplicities of packs given as rows of lengths (the inverse of `rows`)."""
        result = np.zeros((rows.shape[0], self.lengths.size), dtype=np.int64)
        for pattern, row in zip(result, rows):
            np.add.at(pattern, np.searchsorted(self.lengths, row[row > 0]), 1)
        return result

    def rows(self, multiplicities: np.ndarray) -> np.ndarray:
        """Pack contents as lengths, descending and zero-padded, from per-item multiplicities."""
        if multiplicities.shape[0] == 0:
            return np.zeros((0, 1), dtype=np.int64)
        width = max(int(multiplicities.sum(axis=1).max()), 1)
        rows = np.zeros((multiplicities.shape[0], width), dtype=np.int64)
        for row, pattern in zip(rows, multiplicities):
            values = np.repeat(self.lengths, pattern)[::-1]
            row[:values.size] = values
        return rows

    def dual_prices(self, row_duals: np.ndarray) -> np.ndarray:
        """The master's row duals as prices of one item each (every row is an equality here)."""
        return row_duals

    def price(self, values: np.ndarray, empty_pack_value: float = 0.0) -> tuple[float, list[np.ndarray]]:
        """The largest dual value a pack can hold, and the best packs found (as multiplicities)."""
        if self.max_depth is None:
            table = _UnboundedKnapsack(self.lengths, values, self.max_length)
        else:
            table = _CardinalityKnapsack(self.lengths, values, self.max_length, self.max_depth)
        # Best pack that starts with each length: the top ones make this round's new columns.
        with_item = empty_pack_value + values + table.best_after_taking(self.lengths)
        candidates = np.argsort(-with_item, kind="stable")[:COLUMNS_PER_ROUND]
        candidates = candidates[with_item[candidates] > 1.0 + PRICING_TOLERANCE]
        patterns = []
        for item in candidates:
            pattern = table.backtrack_after_taking(int(item))
            pattern[item] += 1
            patterns.append(pattern)
        return empty_pack_value + table.best_value, patterns


def _best_extension(best: np.ndarray, lengths: np.ndarray, values: np.ndarray,
                    capacities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each capacity c: the most `best[c - length] + value` over the lengths that fit, and which.

    Works through the lengths in chunks so long contexts (8k lengths x 8k capacities) stay small.
    """
    top_value = np.full(capacities.size, -np.inf)
    top_item = np.full(capacities.size, -1, dtype=np.int64)
    chunk = max(1, DP_CELLS_PER_CHUNK // capacities.size)
    for first in range(0, lengths.size, chunk):
        before = capacities[None, :] - lengths[first:first + chunk, None]
        candidate = np.where(before >= 0, best[np.maximum(before, 0)] + values[first:first + chunk, None], -np.inf)
        item = candidate.argmax(axis=0)
        value = candidate[item, np.arange(capacities.size)]
        better = value > top_value
        top_value = np.where(better, value, top_value)
        top_item = np.where(better, item + first, top_item)
    return top_value, top_item


class _UnboundedKnapsack:
    """Integer knapsack over capacity with unlimited copies of each length (no depth limit)."""

    def __init__(self, lengths: np.ndarray, values: np.ndarray, capacity: int):
        self.lengths = lengths
        self.capacity = capacity
        best = np.zeros(capacity + 1)
        choice = np.full(capacity + 1, -1, dtype=np.int64)
        # Every length is >= the shortest, so a block of that many capacities only reads earlier blocks.
        step = int(lengths[0]) if lengths.size else capacity + 1
        for start in range(step, capacity + 1, step):
            capacities = np.arange(start, min(start + step, capacity + 1))
            value, item = _best_extension(best, lengths, values, capacities)
            running = np.maximum.accumulate(np.concatenate([[best[start - 1]], value]))[1:]
            best[capacities] = running
            choice[capacities] = np.where(value >= running, item, -1)
        self.best = best
        self.choice = choice

    @property
    def best_value(self) -> float:
        return float(self.best[self.capacity])

    def best_after_taking(self, lengths: np.ndarray) -> np.ndarray:
        return self.best[self.capacity - lengths]

    def backtrack_after_taking(self, item: int) -> np.ndarray:
        pattern = np.zeros(self.lengths.size, dtype=np.int64)
        capacity = self.capacity - int(self.lengths[item])
        while capacity > 0:
            chosen = self.choice[capacity]
            if chosen < 0:
                capacity -= 1
            else:
                pattern[chosen] += 1
                capacity -= int(self.lengths[chosen])
        return pattern


class _CardinalityKnapsack:
    """Integer knapsack over (sequences, capacity): at most `depth` sequences per pack."""

    def __init__(self, lengths: np.ndarray, values: np.ndarray, capacity: int, depth: int):
        self.lengths = lengths
        self.capacity = capacity
        self.depth = depth
        capacities = np.arange(capacity + 1)
        best = np.zeros((depth + 1, capacity + 1))
        choice = np.full((depth + 1, capacity + 1), -1, dtype=np.int64)
        for count in range(1, depth + 1):
            value, item = _best_extension(best[count - 1], lengths, values, capacities)
            take = value >= best[count - 1]
            best[count] = np.where(take, value, best[count - 1])
            choice[count] = np.where(take, item, -1)
        self.best = best
        self.choice = choice

    @property
    def best_value(self) -> float:
        return float(self.best[self.depth, self.capacity])

    def best_after_taking(self, lengths: np.ndarray) -> np.ndarray:
        return self.best[self.depth - 1, self.capacity - lengths]

    def backtrack_after_taking(self, item: int) -> np.ndarray:
        pattern = np.zeros(self.lengths.size, dtype=np.int64)
        count, capacity = self.depth - 1, self.capacity - int(self.lengths[item])
        while count > 0 and capacity > 0:
            chosen = self.choice[count, capacity]
            if chosen >= 0:
                pattern[chosen] += 1
                capacity -= int(self.lengths[chosen])
            count -= 1
        return pattern


class MasterLP:
    """The restricted master LP, kept live in HiGHS so new columns reuse the last basis.

    Rows are equalities (each length's count placed exactly) except `open_rows`, which need at
    least their demand (the fluid tokens of a coarsened histogram). `matrix` holds the columns.
    """

    def __init__(self, demand: np.ndarray, open_rows: np.ndarray | None = None):
        import highspy  # imported here: a command that never solves an LP should not pay for it

        self.highs = silent_highs()
        self.optimal_status = highspy.HighsModelStatus.kOptimal
        self.highs.setOptionValue("output_flag", False)
        self.highs.setOptionValue("solver", "simplex")
        # New columns keep the basis primal feasible, so primal simplex resumes where it stopped.
        self.highs.setOptionValue("simplex_strategy", 4)
        rows = demand.size
        self.open_rows = np.zeros(rows, dtype=bool) if open_rows is None else open_rows
        lower, upper = self._bounds(demand)
        self.highs.addRows(rows, lower, upper, 0, np.zeros(rows, dtype=np.int32), np.zeros(0, dtype=np.int32),
                           np.zeros(0))
        self._store = np.zeros((1024, rows), dtype=np.int32)
        self._columns = 0
        self.known: set[bytes] = set()

    def _bounds(self, demand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lower = demand.astype(np.float64)
        return lower, np.where(self.open_rows, np.inf, lower)

    @property
    def matrix(self) -> np.ndarray:
        """The columns in the LP, one pattern (sequences of each length) per row."""
        return self._store[:self._columns]

    def add_patterns(self, patterns) -> int:
        """Add the patterns not already in the LP; returns how many were new."""
        fresh = []
        for pattern in patterns:
            key = pattern.astype(np.int32).tobytes()
            if key not in self.known:
                self.known.add(key)
                fresh.append(pattern)
        if not fresh:
            return 0
        block = np.stack(fresh).astype(np.int32)
        columns, rows = np.nonzero(block)
        starts = np.searchsorted(columns, np.arange(len(fresh))).astype(np.int32)
        count = len(fresh)
        self.highs.addCols(count, np.ones(count), np.zeros(count), np.full(count, np.inf), int(rows.size), starts,
                           rows.astype(np.int32), block[columns, rows].astype(np.float64))
        if self._columns + count > self._store.shape[0]:
            # Room grows by doubling, so a round's new columns rarely copy the whole store.
            grown = np.zeros((2 * (self._columns + count), self._store.shape[1]), dtype=np.int32)
            grown[:self._columns] = self.matrix
            self._store = grown
        self._store[self._columns:self._columns + count] = block
        self._columns += count
        return count

    def drop_unpromising(self, reduced_costs: np.ndarray, keep: int) -> np.ndarray:
        """Delete all but `keep` columns, highest reduced costs first; returns which columns stayed.

        Every simplex iteration prices every column, so a master that only grows slows down;
        columns far from pricing out are the least likely to be wanted again. Basic columns
        have zero reduced cost and stay, so the basis survives.
        """
        order = np.argsort(-reduced_costs, kind="stable")
        drop = np.sort(order[:max(0, self._columns - keep)])
        # Single-sequence packs stay: they keep every residual of the rounding feasible.
        single = self.matrix[drop].sum(axis=1) == 1
        drop = drop[(reduced_costs[drop] > DROP_REDUCED_COST) & ~single]
        kept = np.ones(self._columns, dtype=bool)
        kept[drop] = False
        self.keep_columns(kept)
        return kept

    def keep_columns(self, kept: np.ndarray) -> None:
        """Delete the columns where `kept` is False (later rounds may add them again)."""
        drop = np.flatnonzero(~kept)
        if drop.size == 0:
            return
        self.highs.deleteCols(int(drop.size), drop.astype(np.int32))
        self.known.difference_update(row.tobytes() for row in self.matrix[drop])
        remaining = self.matrix[kept]
        self._store[:remaining.shape[0]] = remaining
        self._columns = remaining.shape[0]

    def set_demand(self, demand: np.ndarray) -> None:
        lower, upper = self._bounds(demand)
        self.highs.changeRowsBounds(demand.size, np.arange(demand.size, dtype=np.int32), lower, upper)

    def solve(self) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """The LP optimum, the column values, the row duals (prices of one sequence of each length)
        and the columns' reduced costs."""
        self.highs.run()
        status = self.highs.getModelStatus()
        if status != self.optimal_status:
            raise RuntimeError(f"HiGHS did not solve the packing LP: {self.highs.modelStatusToString(status)}")
        solution = self.highs.getSolution()
        value = self.highs.getInfo().objective_function_value
        return value, np.asarray(solution.col_value), np.asarray(solution.row_dual), np.asarray(solution.col_dual)


@dataclass(frozen=True, eq=False)
class _LPSolution:
    bound: float
    primal_value: float
    converged: bool
    pricing_rounds: int
    weights: np.ndarray


def column_generation(master: MasterLP, items: LengthItems, demand: np.ndarray,
                      whole_packs_only: bool = False) -> _LPSolution:
    """Price patterns into the master until none improves it; track the best Farley bound.

    With `whole_packs_only`, stop as soon as the bound's ceiling meets the master's: the number of
    whole packs it certifies can no longer rise (the LP's own value is then known only to lie between).
    """
    master.set_demand(demand)
    if demand.sum() == 0:
        return _LPSolution(0.0, 0.0, True, 0, np.zeros(master.matrix.shape[0]))
    best_bound = 0.0
    converged = False
    rounds = 0
    while True:
        primal_value, weights, row_duals, reduced_costs = master.solve()
        # Negative prices (equality rows) keep their sign: a pack filled with such lengths is worth
        # less, and the knapsack leaves them out. prices / max(1, best_price) is dual feasible for
        # the LP over all patterns, so its dual value is a certified bound at every round.
        prices = items.dual_prices(row_duals)
        best_price, patterns = items.price(prices)
        best_bound = max(best_bound, float(demand @ prices) / max(1.0, best_price))
        rounds += 1
        if best_price <= 1.0 + PRICING_TOLERANCE:
            converged = True
            break
        if whole_packs_only and _robust_ceil(best_bound) >= _robust_ceil(primal_value):
            break  # the LP lies between the two: more rounds cannot raise the bound on whole packs
        if master.matrix.shape[0] > COLUMNS_KEPT_PER_ROW * demand.size + COLUMNS_PER_ROUND:
            weights = weights[master.drop_unpromising(reduced_costs, COLUMNS_KEPT_PER_ROW * demand.size)]
        if master.add_patterns(patterns) == 0 or rounds >= MAX_PRICING_ROUNDS:
            break
    return _LPSolution(min(best_bound, primal_value), primal_value, converged, rounds, weights)


# The depths the bundled scenarios bound the bundled histograms at (packing.csv's bound_depth): their bounds
# ship with the package. None: no depth limit.
SHIPPED_DEPTHS = (1, 2, 3, 4, 8, None)


def write_shipped_bounds() -> Path:
    """Compute the bounds of every bundled histogram at its max length and SHIPPED_DEPTHS, and write them
    where the package ships them (`python -m simbench.strategies.lp_bound` does; minutes)."""
    import json

    from simbench.atomic import atomic_file
    from simbench.histogram import bundled_histograms, load_histogram
    from simbench.stored_results import shipped_path

    entries = {}
    for name in bundled_histograms():
        histogram = load_histogram(name)
        for depth in SHIPPED_DEPTHS:
            max_length = check_pack_limits(histogram, histogram.max_length, depth)
            bound = computed_lp_lower_bound(histogram.counts, max_length, depth)
            inputs = _stored_inputs(histogram.counts, max_length, depth)
            entries[STORED_BOUNDS.key(inputs)] = bound.stored()
            print(f"{name} at depth {'max' if depth is None else depth}: {bound.lower_bound_packs:,} packs "
                  f"({bound.seconds:.1f} s)", file=sys.stderr)
    path = shipped_path(STORED_BOUNDS.function)
    with atomic_file(path) as temporary:
        temporary.write_text(json.dumps({"function": STORED_BOUNDS.function, "version": ALGORITHM_VERSION,
                                         "entries": entries}, separators=(",", ":"), sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    print(write_shipped_bounds())
