"""`optimal`: the fewest packs simbench can find, proven optimal where it can be, else its gap and why.

The best of the fast heuristics (bfd, ffd, lpfhp, spfhp); where none meets the LP bound, an exact search
(`exact`: a dive through the LP fixing whole packs, then a MIP) within `PackOptions.time_limit_seconds`,
and where that cannot prove its packs optimal, the LP rounded to whole packs: never worse than any.

    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.strategies import get_strategy
    >>> from simbench.strategies.lp_bound import lp_lower_bound
    >>> histogram = LengthHistogram.from_counts([0, 1, 2, 3, 4, 5, 6, 7])  # i - 1 sequences of length i
    >>> bound = lp_lower_bound(histogram, 8, max_depth=3)
    >>> packing = get_strategy("optimal")(histogram, 8, 3)
    >>> round(bound.value, 6), bound.lower_bound_packs, packing.packs_total, packing.details["proof"]
    (23.5, 24, 24, 'proven optimal (LP bound)')
"""

from __future__ import annotations

import time

import numpy as np

from simbench.histogram import LengthHistogram
from simbench.strategies import get_strategy, register
from simbench.strategies.classic import pack_decreasing
from simbench.strategies.optimal.search import Search, round_up_greedily, search_optimum
from simbench.strategies import lp_bound
from simbench.strategies.lp_bound import (COARSE_UNITS, FLUID_UNITS, LPBound, LengthItems, MasterLP, column_generation,
                                          lp_lower_bound, trivial_lower_bound)
from simbench.strategies.packing import PackOptions, Packing
from simbench.strategies.spfhp import pack_by_free_space

# Importers of the bound from here keep working: it lived in this module first.
__all__ = ["LPBound", "lp_lower_bound", "pack_optimal", "trivial_lower_bound"]

# The fast packers `optimal` also runs; it keeps whichever packing needs the fewest packs.
HEURISTICS = ("bfd", "ffd", "lpfhp", "spfhp")

# Where the LP is priced on a coarse grid, the heuristics' gap to the bound above which `optimal`
# also rounds the LP of the long sequences rounded up to that grid (whose packs fit the real ones).
GRID_ROUNDING_GAP = 1e-3
# ... unless shorter sequences must be fitted into more packs than this (one by one, in Python).
GRID_ROUNDING_MAX_PACKS = 1_000_000

# Roundings of the residual LP before the last few sequences go to best-fit decreasing.
ROUNDING_PASSES = 6


# `slow`: a run packs it in a worker beside the other slow packers. Its exact search counts CPU seconds, not wall
# seconds (`search.SEARCH_CLOCK`), so a core shared with other work gives it the same nodes and the same packs.
@register("optimal", "fewest packs: proven optimal by its bound or a MIP where it can be, else states its gap",
          slow=True)
def pack_optimal(histogram: LengthHistogram, max_length: int, max_depth: int | None,
                 options: PackOptions) -> Packing:
    """The best heuristic, or fewer packs from the exact search where it can, or failing that the LP rounding.

    The heuristics run first, best first: one that meets the bound is optimal and ends the search.
    Its details say whether the packs are proven optimal (`proven_optimal`), how or why not (`proof`).
    """
    start = time.perf_counter()
    bound = lp_lower_bound(histogram, max_length, max_depth)
    # A bound another caller already paid for is part of this packer's cost all the same.
    reused_bound_seconds = max(0.0, bound.seconds - (time.perf_counter() - start))
    candidates = {}
    for name in HEURISTICS:
        candidates[name] = get_strategy(name).pack_function(histogram, max_length, max_depth, options)
        if candidates[name].packs_total <= bound.lower_bound_packs:
            break  # proven optimal: no packer can do better
    fewest = min(packing.packs_total for packing in candidates.values())
    search = None
    if fewest > bound.lower_bound_packs and bound.method == "column generation":
        search_start = time.perf_counter()
        search = _search(histogram, max_length, max_depth, bound, candidates, options.time_limit_seconds)
        search_seconds = time.perf_counter() - search_start
        if search.repeats.size:
            candidates = {"exact search": _search_packing(search, histogram, max_length, max_depth), **candidates}
            fewest = search.packs_total
    lower_bound = bound.lower_bound_packs if search is None else search.lower_bound_packs
    if fewest > lower_bound and bound.method == "column generation":
        # First in the dict, so it wins ties: the LP's packs as before heuristics joined in.
        candidates = {"lp rounding": _round_lp(histogram, max_length, max_depth, bound), **candidates}
    elif fewest > (1 + GRID_ROUNDING_GAP) * bound.lower_bound_packs:
        on_grid = _round_on_grid(histogram, max_length, max_depth)
        if on_grid is not None:
            candidates["lp rounding on a grid"] = on_grid
    chosen = min(candidates, key=lambda name: candidates[name].packs_total)
    packs = candidates[chosen].packs_total
    details = {**candidates[chosen].details, "lp_value": bound.value, "lower_bound_packs": bound.lower_bound_packs,
               "lp_converged": bound.converged, "bound_method": bound.method, "chosen": chosen,
               "reused_bound_seconds": reused_bound_seconds, "proven_lower_bound_packs": lower_bound,
               "proven_optimal": packs <= lower_bound,
               "proof": _proof(packs, lower_bound, search, histogram, max_length, options.time_limit_seconds)}
    if search is not None:
        details |= {"search_nodes": search.nodes, "search_seconds": search_seconds}
    return candidates[chosen].replace(strategy="optimal", details=details)


def _search(histogram: LengthHistogram, max_length: int, max_depth: int | None, bound: LPBound,
            candidates: dict[str, Packing], time_limit_seconds: float) -> Search:
    """The exact search from the best candidate so far, its LP seeded with the bound's packs."""
    items = LengthItems.from_counts(histogram.counts, max_length, max_depth)
    best = min(candidates.values(), key=lambda packing: packing.packs_total)
    return search_optimum(items, bound.lower_bound_packs, best.packs_total, time_limit_seconds,
                          items.multiplicities(bound.patterns), lambda: (items.multiplicities(best.rows), best.repeats))


def _search_packing(search: Search, histogram: LengthHistogram, max_length: int, max_depth: int | None) -> Packing:
    items = LengthItems.from_counts(histogram.counts, max_length, max_depth)
    return Packing.from_rows("optimal", max_length, max_depth, items.rows(search.patterns), search.repeats)


def _proof(packs: int, lower_bound: int, search: Search | None, histogram: LengthHistogram, max_length: int,
           time_limit_seconds: float) -> str:
    """How the packs are proven optimal, or how many packs they may be over the optimum and why the gap stays."""
    if packs <= lower_bound:
        return f"proven optimal ({'LP bound' if search is None else search.proven_by})"
    gap = f"open: {packs - lower_bound:,} pack{'s' if packs - lower_bound > 1 else ''} over the bound"
    if search is None:
        cells = int(np.count_nonzero(histogram.counts)) * max_length
        return f"{gap} (too large to search: {cells:,} length x token cells, over {lp_bound.EXACT_CELLS:,})"
    if search.stopped == "time limit":
        return f"{gap} (time limit of {time_limit_seconds:g} s)"
    return f"{gap} ({search.stopped})"


def _round_lp(histogram: LengthHistogram, max_length: int, max_depth: int | None, bound: LPBound) -> Packing:
    """Floor the LP solution (or round up its heaviest columns when flooring places nothing),
    re-solve the LP on what is left a few times, and best-fit the last few sequences."""
    items = LengthItems.from_counts(histogram.counts, max_length, max_depth)
    master = MasterLP(items.demand)
    master.add_patterns(items.starting_patterns())
    master.add_patterns(list(items.multiplicities(bound.patterns)))
    residual = items.demand.copy()
    packs = np.zeros((0, items.lengths.size), dtype=np.int64)
    repeats = np.zeros(0, dtype=np.int64)
    passes = 0
    while passes < ROUNDING_PASSES and residual.any():
        if repeats.sum() + _best_fit_decreasing(items, residual)[1].sum() <= bound.lower_bound_packs:
            break  # best fit finishes what is left in the fewest packs possible
        solution = column_generation(master, items, residual, whole_packs_only=True)
        columns = master.matrix[:solution.weights.size]
        whole = _floor_within(solution.weights, columns, residual)
        if not whole.any():
            whole = round_up_greedily(solution.weights, columns, residual)
        passes += 1
        if not whole.any():
            break
        used = whole > 0
        packs = np.concatenate([packs, columns[used]])
        repeats = np.concatenate([repeats, whole[used]])
        residual = residual - whole @ columns
    leftover, leftover_repeats = _best_fit_decreasing(items, residual)
    rows = items.rows(np.concatenate([packs, leftover]))
    details = {"rounding_passes": passes, "best_fit_packs": int(leftover_repeats.sum())}
    return Packing.from_rows("optimal", max_length, max_depth, rows,
                             np.concatenate([repeats, leftover_repeats]), details=details)


def _round_on_grid(histogram: LengthHistogram, max_length: int, max_depth: int | None) -> Packing | None:
    """Sequences of at least `FLUID_UNITS` grid units rounded up to whole units and packed by the
    LP rounding (a pack of rounded-up lengths fits the real ones), the shorter ones then placed by
    best fit into the room left; None where that would mean filling too many packs one by one."""
    unit = -(-max_length // COARSE_UNITS)
    capacity = max_length // unit
    counts = histogram.counts[:max_length]
    lengths = np.arange(1, counts.size + 1, dtype=np.int64)
    units = -(-lengths // unit)
    # Where units do not divide max_length, the longest may not fit a grid pack: best fit takes them.
    long_ones = (units >= FLUID_UNITS) & (units <= capacity) & (counts > 0)
    coarse = LengthHistogram(np.bincount(units[long_ones], weights=counts[long_ones],
                                         minlength=capacity + 1)[1:].astype(np.int64))
    if coarse.sequences == 0:
        return None
    coarse_bound = lp_lower_bound(coarse, capacity, max_depth)
    short_ones = bool(np.any(counts[~long_ones]))
    # The bound already says whether the grid packs would be too many to fill one by one.
    if short_ones and coarse_bound.lower_bound_packs > GRID_ROUNDING_MAX_PACKS:
        return None
    grid = _round_lp(coarse, capacity, max_depth, coarse_bound)
    if short_ones and grid.packs_total > GRID_ROUNDING_MAX_PACKS:
        return None
    filled, depths, repeats = fill_grid_packs(grid, lengths[long_ones][::-1], counts[long_ones][::-1])
    details = {"grid_unit_tokens": unit, "rounding_passes": grid.details["rounding_passes"]}
    if not short_ones:
        rows = np.zeros((depths.size, int(depths.max())), dtype=np.int64)
        rows[np.arange(depths.size).repeat(depths), _positions_in_packs(depths)] = filled
        return Packing.from_rows("optimal", max_length, max_depth, rows, repeats, details=details)
    partial: dict[tuple, int] = {}
    for pack, repeat in zip(np.split(filled, np.cumsum(depths)[:-1]), repeats.tolist()):
        key = tuple(pack.tolist())
        partial[key] = partial.get(key, 0) + repeat
    short = np.where(long_ones, 0, counts)
    groups = pack_by_free_space(short, max_length, max_depth, shortest_pack_first=False,
                                partial_packs=[(count, pack) for pack, count in partial.items()])
    return Packing.from_groups("optimal", max_length, max_depth, groups, details=details)


def fill_grid_packs(grid: Packing, real_lengths: np.ndarray, real_counts: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The real packs of a grid packing: its packs laid out copy after copy, their slots taken in
    order of grid units (largest first, then by pack and slot) by the real lengths, longest first
    (`real_counts[i]` sequences of `real_lengths[i]`, descending, as many as the grid has slots).

    Consecutive copies of a grid pack get equal real packs until some slot's share of the real
    lengths crosses from one length to the next, and each of the real lengths' boundaries lies in
    one (grid pack, unit) group of slots: so the real packs come as at most (grid packs + 2 x
    distinct lengths) runs of equal packs, computed without a table of every pack or slot.
    Returns the runs in layout order: their lengths (flat, each descending), depths and repeats.
    """
    depths, repeats = grid.depths, grid.repeats
    slot_units = grid.pack_lengths
    pack_of_slot = np.arange(depths.size).repeat(depths)
    # A group: the slots of one unit in one grid pack (adjacent, units being descending).
    group_head = np.ones(slot_units.size, dtype=bool)
    group_head[1:] = (slot_units[1:] != slot_units[:-1]) | (pack_of_slot[1:] != pack_of_slot[:-1])
    group_first = np.flatnonzero(group_head)
    group_pack = pack_of_slot[group_first]
    group_size = np.diff(np.append(group_first, slot_units.size))
    # Copy c of the group's pack takes real lengths group_start + c * group_size onwards.
    order = np.lexsort((group_pack, -slot_units[group_first]))
    group_start = np.empty(group_first.size, dtype=np.int64)
    group_start[order] = _exclusive_cumsum((group_size * repeats[group_pack])[order])
    # Where a new real length begins, the copy holding it starts a new run, and so does the
    # next copy when the boundary falls inside a copy rather than at its first slot.
    boundaries = np.cumsum(real_counts)[:-1]
    group = order[np.searchsorted(group_start[order], boundaries, side="right") - 1]
    copy, inside = np.divmod(boundaries - group_start[group], group_size[group])
    breaks_pack = np.concatenate([np.arange(depths.size), group_pack[group], group_pack[group][inside > 0]])
    breaks_copy = np.concatenate([np.zeros(depths.size, dtype=np.int64), copy, copy[inside > 0] + 1])
    keep = breaks_copy < repeats[breaks_pack]
    run_pack, run_copy = _distinct_pairs(breaks_pack[keep], breaks_copy[keep])
    run_end = np.append(run_copy[1:], 0)
    last = np.append(run_pack[1:] != run_pack[:-1], True)
    run_end[last] = repeats[run_pack[last]]
    # The first copy of each run, slot by slot.
    run_depths = depths[run_pack]
    slot = _positions_in_packs(run_depths) + grid.pack_starts[run_pack].repeat(run_depths)
    slot_group = np.searchsorted(group_first, slot, side="right") - 1
    taken = (group_start[slot_group] + run_copy.repeat(run_depths) * group_size[slot_group]
             + slot - group_first[slot_group])
    filled = real_lengths[np.searchsorted(np.cumsum(real_counts), taken, side="right")]
    return filled, run_depths, run_end - run_copy


def _distinct_pairs(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (first, second) pairs, sorted by first, then second."""
    order = np.lexsort((second, first))
    first, second = first[order], second[order]
    new = np.ones(first.size, dtype=bool)
    new[1:] = (first[1:] != first[:-1]) | (second[1:] != second[:-1])
    return first[new], second[new]


def _positions_in_packs(depths: np.ndarray) -> np.ndarray:
    """0, 1, ..., depth - 1 for each pack, laid end to end."""
    return np.arange(int(depths.sum())) - np.repeat(np.cumsum(depths) - depths, depths)


def _exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    sums = np.zeros(values.size, dtype=np.int64)
    np.cumsum(values[:-1], out=sums[1:])
    return sums


def _floor_within(weights: np.ndarray, columns: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """Whole packs from LP weights; 2.9999999 counts as 3 unless that overshoots the counts."""
    whole = np.floor(weights + 1e-7).astype(np.int64)
    if np.any(whole @ columns > residual):
        whole = np.floor(weights).astype(np.int64)
    return whole


def _best_fit_decreasing(items: LengthItems, residual: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pack the few sequences rounding left over with `bfd`; patterns as multiplicities, and repeats."""
    counts = np.zeros(items.max_length, dtype=np.int64)
    counts[items.lengths - 1] = residual
    groups = pack_decreasing(counts, items.max_length, items.max_depth, best_fit=True)
    patterns = np.zeros((len(groups), items.lengths.size), dtype=np.int64)
    for pattern, contents in zip(patterns, groups):
        for length, copies in zip(contents[0::2], contents[1::2]):
            pattern[np.searchsorted(items.lengths, length)] += copies
    return patterns, np.array(list(groups.values()), dtype=np.int64)
