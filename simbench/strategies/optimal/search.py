"""The integer packing problem for `optimal`: a dive through the LP that fixes whole packs, then a MIP.

Packs as few as a lower bound are proven optimal; where the search cannot close the gap it says why.

    >>> import numpy as np
    >>> from simbench.strategies.optimal.search import SEARCH_CLOCK, dive
    >>> from simbench.strategies.lp_bound import LengthItems
    >>> items = LengthItems.from_counts(np.array([0, 0, 3, 0, 3, 0, 0, 0]), 8, None)   # three 3s, three 5s
    >>> found = dive(items, target=3, deadline_seconds=SEARCH_CLOCK() + 10)
    >>> found.packs_total, found.lower_bound_packs, found.stopped
    (3, 3, None)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from simbench.strategies.lp_bound import PRICING_TOLERANCE, LengthItems, MasterLP, _robust_ceil, column_generation
from simbench.strategies.optimal.pattern_mip import enumerate_packs, mip_packs_max, solve_pattern_mip

# The search's time limit counts this process's CPU seconds: wall-clock seconds gave a busy machine fewer nodes,
# and so other packs (optimal:3 on Wikipedia stopped at 8,143,831 packs instead of 8,143,829 at a load of 6 on
# 2 cores); CPU seconds differ between machines far less than wall seconds between quiet and busy ones.
SEARCH_CLOCK = time.process_time
# Children of a node: its LP's whole packs fixed at once, then one pack of each of its heaviest few columns.
DIVE_BRANCHES = 3
# Nodes one dive may visit: Wikipedia takes 9-13 at depth 3 or none, samples of 20-60 of its sequences 1-16;
# one that finds nothing in this many costs 0.3-0.4 s on such a sample before the MIP takes over.
DIVE_NODES = 30
# Columns priced into the master per round: the best packs of the few best (sequences, tokens) cells.
COLUMNS_PER_ROUND = 8
# LP weights this close to a whole number count as whole (HiGHS's feasibility tolerance is 1e-7).
WHOLE_TOLERANCE = 1e-6


@dataclass(frozen=True, eq=False)
class Search:
    """What the exact search proved: packs fewer than the packing it started from (multiplicity rows of
    `LengthItems.lengths` and repeats; empty when it found none), the largest lower bound it proved and
    by what ("LP bound", "LP bound within counts": packs holding no more of a length than there is,
    "MIP"), why it could not prove its best packing optimal (None where it did), and its dive nodes."""

    patterns: np.ndarray
    repeats: np.ndarray
    lower_bound_packs: int
    proven_by: str
    stopped: str | None
    nodes: int

    @property
    def packs_total(self) -> int:
        return int(self.repeats.sum())


def search_optimum(items: LengthItems, lower_bound_packs: int, incumbent_packs: int, time_limit_seconds: float,
                   start_patterns: np.ndarray | None = None, incumbent=None) -> Search:
    """Fewer packs than `incumbent_packs`, down to a proven optimum, within `time_limit_seconds`.

    Dives first for packs as few as the bound (the LP's rounded-up optimum is the integer optimum on every
    Wikipedia sample tried), then for one pack fewer than the best so far while that succeeds; what gap is
    left goes to the MIP over every pack, where there are few enough packs to enumerate. `incumbent`, a
    function returning the starting packing as (multiplicity rows, repeats), seeds the MIP.
    """
    deadline = SEARCH_CLOCK() + time_limit_seconds
    lower, proven_by = lower_bound_packs, "LP bound"
    best = incumbent_packs
    found = (np.zeros((0, items.lengths.size), dtype=np.int64), np.zeros(0, dtype=np.int64))
    nodes = 0
    stopped = None
    target = lower
    while best > lower:
        if SEARCH_CLOCK() > deadline:
            stopped = "time limit"
            break
        result = dive(items, max(target, lower), deadline, start_patterns)
        nodes += result.nodes
        if result.lower_bound_packs > lower:
            lower, proven_by = result.lower_bound_packs, "LP bound within counts"
        if result.stopped is None:
            found, best = (result.patterns, result.repeats), result.packs_total
            target = best - 1
        elif result.stopped == "time limit":
            stopped = "time limit"
            break
        elif target < best - 1:
            target = best - 1  # none as few as the bound: one fewer than the best may still be found
        else:
            break
    if best > lower and stopped is None:
        packs = enumerate_packs(items.lengths, items.demand, items.max_length, items.max_depth,
                                mip_packs_max(items.lengths.size))
        if packs is None:
            stopped = f"over {mip_packs_max(items.lengths.size):,} packs for the MIP"
        else:
            start = found if found[1].size else (incumbent() if incumbent is not None else None)
            mip = solve_pattern_mip(items.lengths, items.demand, items.max_length, items.max_depth,
                                    deadline - SEARCH_CLOCK(), start, packs)
            if mip.lower_bound_packs > lower:
                lower, proven_by = mip.lower_bound_packs, "MIP"
            if mip.repeats.size and mip.packs_total < best:
                found, best = (mip.patterns, mip.repeats), mip.packs_total
            if mip.optimal:
                proven_by = "MIP"
            else:
                stopped = "time limit"
    return Search(found[0], found[1], lower, proven_by, None if best <= lower else stopped, nodes)


@dataclass(frozen=True, eq=False)
class Dive:
    """What a dive found: packs (multiplicities of `LengthItems.lengths`) and their repeats, empty when it
    found none within its target; the lower bound its root LP proved (each pack holding at most the
    sequences there are, so at least the plain LP bound); the nodes it visited; and why it stopped
    without packs: "node limit", "time limit" or "exhausted" (no child left within the target); None
    when it found them."""

    patterns: np.ndarray
    repeats: np.ndarray
    lower_bound_packs: int
    nodes: int
    stopped: str | None

    @property
    def packs_total(self) -> int:
        return int(self.repeats.sum())


def dive(items: LengthItems, target: int, deadline_seconds: float, start_patterns: np.ndarray | None = None,
         node_limit: int = DIVE_NODES) -> Dive:
    """Packs of `items` in at most `target` packs, by depth-first search over the LP's whole packs.

    Each node solves the LP of the sequences still unplaced (column generation with packs of at most
    the sequences left, so that its columns can be fixed), is cut off when its bound rounded up
    exceeds the target, ends the search when its LP is whole, and otherwise has as children: its
    LP's whole repeats fixed (or where it has none, one pack of each column of weight at least a half),
    then one pack of each of its `DIVE_BRANCHES` heaviest columns fixed.
    `start_patterns` (multiplicity rows, e.g. the LP bound's) seed the master; `deadline_seconds`
    is a `SEARCH_CLOCK()` reading past which no node starts.
    """
    master = MasterLP(items.demand)
    if start_patterns is not None:
        master.add_patterns(list(start_patterns))
    empty = np.zeros((0, items.lengths.size), dtype=np.int64)
    root_bound = 0
    # A node: (sequences left, packs fixed so far, the fixed packs as a chain (patterns, repeats, parent)).
    stack = [(items.demand.astype(np.int64), 0, None)]
    nodes = 0
    stopped = "exhausted"
    while stack:
        if nodes >= node_limit:
            stopped = "node limit"
            break
        if SEARCH_CLOCK() > deadline_seconds:
            stopped = "time limit"
            break
        residual, fixed, chain = stack.pop()
        nodes += 1
        if not residual.any():
            return Dive(*_unchain(chain, items.lengths.size), max(root_bound, fixed), nodes, None)
        bound, weights, columns = _node_lp(master, items, residual)
        if nodes == 1:
            root_bound = bound
        if fixed + bound > target:
            continue
        whole = np.rint(weights).astype(np.int64)
        if fixed + whole.sum() <= target and np.array_equal(whole @ columns, residual):
            chain = (columns[whole > 0], whole[whole > 0], chain)
            return Dive(*_unchain(chain, items.lengths.size), root_bound, nodes, None)
        children = _children(weights, columns, residual)
        # Pushed last-first, so the floored LP is tried first, then the heaviest column.
        for child in reversed(children):
            used = child > 0
            stack.append((residual - child @ columns, fixed + int(child.sum()), (columns[used], child[used], chain)))
    return Dive(empty, np.zeros(0, dtype=np.int64), root_bound, nodes, stopped)


def _children(weights: np.ndarray, columns: np.ndarray, residual: np.ndarray) -> list[np.ndarray]:
    """A node's children, as repeats of its LP's columns to fix: its LP's whole repeats (or where it has none,
    one pack of each column of weight at least a half), then one pack of each of its heaviest columns."""
    children = []
    floored = np.floor(weights + WHOLE_TOLERANCE).astype(np.int64)
    if np.any(floored @ columns > residual):
        floored = np.floor(weights).astype(np.int64)
    if floored.any():
        children.append(floored)
    else:
        rounded = round_up_greedily(weights, columns, residual)
        if rounded.sum() > 1:
            children.append(rounded)
    for column in np.argsort(-weights, kind="stable")[:DIVE_BRANCHES]:
        if np.all(columns[column] <= residual):
            one = np.zeros(weights.size, dtype=np.int64)
            one[column] = 1
            children.append(one)
    return children


def _node_lp(master: MasterLP, items: LengthItems, residual: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """The node's LP over packs of the sequences left: its bound rounded up, and its columns in use with
    their weights (columns as multiplicity rows, int64)."""
    # Columns holding more of a length than is left can never be fixed here, nor below: out of the master.
    master.keep_columns(np.all(master.matrix <= residual, axis=1))
    singles = np.diag(np.minimum(residual, 1)).astype(np.int64)
    master.add_patterns([single for single in singles if single.any()])
    pricing = BoundedItems(items.lengths, residual, items.max_length, items.max_depth)
    solution = column_generation(master, pricing, residual, whole_packs_only=True)
    used = np.flatnonzero(solution.weights > WHOLE_TOLERANCE)
    columns = master.matrix[used].astype(np.int64)
    return _robust_ceil(solution.bound), solution.weights[used], columns


def round_up_greedily(weights: np.ndarray, columns: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """One pack of each column with LP weight of at least a half, heaviest first, while they fit (the exact
    search's step down a dive, and `optimal`'s rounding of the LP)."""
    whole = np.zeros(weights.size, dtype=np.int64)
    left = residual.copy()
    for column in np.argsort(-weights, kind="stable"):
        if weights[column] < 0.5:
            break
        if np.all(columns[column] <= left):
            whole[column] = 1
            left -= columns[column]
    return whole


def _unchain(chain, width: int) -> tuple[np.ndarray, np.ndarray]:
    patterns, repeats = [np.zeros((0, width), dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    while chain is not None:
        fixed_patterns, fixed_repeats, chain = chain
        patterns.append(fixed_patterns)
        repeats.append(fixed_repeats)
    return np.concatenate(patterns), np.concatenate(repeats)


class BoundedItems:
    """Pricing for packs with at most `limits[i]` sequences of length `lengths[i]` (what is left to place).

    Column generation's interface, like `LengthItems`: a bounded knapsack over (sequences, tokens),
    solved as a 0/1 knapsack of binary-split copies (1, 2, 4, ... sequences of a length at once).
    """

    def __init__(self, lengths: np.ndarray, limits: np.ndarray, max_length: int, max_depth: int | None):
        self.lengths = lengths
        self.limits = limits
        self.max_length = max_length
        self.max_depth = max_depth

    def dual_prices(self, row_duals: np.ndarray) -> np.ndarray:
        return row_duals

    def price(self, values: np.ndarray) -> tuple[float, list[np.ndarray]]:
        """The largest dual value a pack can hold, and the best packs found (as multiplicities)."""
        capacity, depth = self.max_length, self.max_depth
        item_of, copies_of = [], []
        # Lengths of no value never improve a pack; those with none left cannot be in one.
        for item in np.flatnonzero((values > 0) & (self.limits > 0)).tolist():
            copies = min(int(self.limits[item]), capacity // int(self.lengths[item]), depth or capacity)
            piece = 1
            while copies > 0:
                item_of.append(item)
                copies_of.append(min(piece, copies))
                copies -= piece
                piece *= 2
        # best[k, c]: the most value in exactly k sequences (any number without a depth limit) of at most c tokens.
        levels = 1 if depth is None else depth + 1
        best = np.full((levels, capacity + 1), -np.inf)
        best[0] = 0.0
        taken = np.zeros((len(item_of), levels, capacity + 1), dtype=bool)
        for piece, (item, copies) in enumerate(zip(item_of, copies_of)):
            tokens = copies * int(self.lengths[item])
            shift = 0 if depth is None else copies
            if shift >= levels:
                continue
            candidate = np.full_like(best, -np.inf)
            candidate[shift:, tokens:] = best[:levels - shift, :capacity + 1 - tokens] + copies * float(values[item])
            taken[piece] = candidate > best
            np.maximum(best, candidate, out=best)
        top = float(best.max())
        patterns = []
        for cell in np.argsort(-best, axis=None, kind="stable")[:COLUMNS_PER_ROUND]:
            level, tokens = np.unravel_index(int(cell), best.shape)
            if best[level, tokens] <= 1.0 + PRICING_TOLERANCE:
                break
            pattern = np.zeros(self.lengths.size, dtype=np.int64)
            for piece in range(len(item_of) - 1, -1, -1):
                if taken[piece, level, tokens]:
                    item, copies = item_of[piece], copies_of[piece]
                    pattern[item] += copies
                    tokens -= copies * int(self.lengths[item])
                    if depth is not None:
                        level -= copies
            patterns.append(pattern)
        return top, patterns
