"""`nnlshp`: non-negative least-squares histogram packing (Krell et al., arXiv 2107.02027).

Fits how often to use each mix of lengths that fills a pack exactly, then repairs the rounding.

    >>> from simbench.strategies.nnlshp import pack_nnlshp
    >>> from simbench.histogram import LengthHistogram
    >>> pack_nnlshp(LengthHistogram.from_counts([2, 0, 2, 0]), 4, None, None).packs_total
    2
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from simbench.errors import InputError
from simbench.strategies import register
from simbench.strategies.packing import Packing
from simbench.strategies.spfhp import pack_by_free_space, packing_from_groups

PAPER_DEPTH = 3
# Leaving a very short sequence unpacked costs little padding, so the fit may miss those counts
# more cheaply: the paper weights the residual of lengths up to 8 by 0.09.
SHORT_LENGTH = 8
SHORT_LENGTH_WEIGHT = 0.09
# A fitted count this close to a half is a tie that the solve's last bits would decide, and those differ
# between SciPy/BLAS builds: SQuAD at depth 3 fits one strategy 191.5 times, Wikipedia at depth 2 fits
# 139 halves. Their rounding errors stay under 1e-10 even on Wikipedia's counts of millions, while no
# count that is not a tie comes within 1e-4 of a half.
HALF_TIE = 1e-6
# Columns whose gradients lie within this fraction of the largest tie: their difference is the solve's
# rounding (Wikipedia at depth 3 meets a dozen such ties, 1e-13 to 2e-11 apart, and no other pair within
# 1e-6), and which of them enters changes the fit, so the first in the enumeration's order enters: an
# argmax over the raw gradients let the BLAS build pick (8,150,025 to 8,150,038 packs at depth 3).
GRADIENT_TIE = 1e-9
# Depth 4 at length 512 needs 959,631 strategies; depth 5 needs 25 million, beyond a dense fit.
MAX_STRATEGIES = 2_000_000
# The fit's work grows with strategies x lengths: 491M cells (depth 4 at 512) take seconds, while
# depth 3 at 2,048 (716M) took minutes.
MAX_FIT_CELLS = 1 << 29


def exact_fill_strategies(max_length: int, depth: int) -> np.ndarray:
    """All multisets of at most `depth` lengths summing exactly to `max_length`.

    One row per strategy, parts ascending then zero-padded, rows in lexicographic order (the
    order of the paper's recursive enumeration, which fixes the solver's tie-breaking).
    """
    rows = np.zeros((1, 0), dtype=np.int64)
    remaining = np.array([max_length], dtype=np.int64)
    smallest = np.ones(1, dtype=np.int64)  # a part may not be shorter than the one before
    for level in range(depth):
        last_level = level == depth - 1
        open_rows = remaining > 0
        # Options per row: lengths smallest..remaining//2 (more parts follow), then `remaining` itself.
        middle = np.zeros_like(remaining) if last_level else np.maximum(remaining // 2 - smallest + 1, 0)
        closing = (remaining >= smallest).astype(np.int64)
        options = np.where(open_rows, middle + closing, 1)
        parent = np.repeat(np.arange(rows.shape[0]), options)
        offset = np.arange(parent.size) - np.repeat(np.cumsum(options) - options, options)
        is_closing = open_rows[parent] & (offset == middle[parent])
        part = np.where(is_closing, remaining[parent], smallest[parent] + offset)
        part = np.where(open_rows[parent], part, 0)
        rows = np.column_stack([rows[parent], part])
        remaining = remaining[parent] - part
        smallest = np.where(part > 0, part, smallest[parent])
    return rows[remaining == 0]


def count_exact_fill_strategies(max_length: int, depth: int) -> int:
    """How many strategies `exact_fill_strategies` would list, without listing them."""
    counts = list(strategy_counts_by_depth(max_length, depth))
    return counts[-1] if counts else int(max_length == 0)  # no parts: only the empty sum


def strategy_counts_by_depth(max_length: int, depth: int) -> Iterator[int]:
    """`count_exact_fill_strategies` at depths 1, 2, ..., `depth`, each from the one before.

    Partitions of n into at most k parts: ways[k][n] = ways[k-1][n] + ways[k][n-k].
    """
    ways = [1] + [0] * max_length  # at most 0 parts: only the empty sum
    for parts in range(1, depth + 1):
        for total in range(parts, max_length + 1):
            ways[total] += ways[total - parts]
        yield ways[max_length]


def nonnegative_least_squares(matrix: sparse.csc_matrix, target: np.ndarray) -> np.ndarray:
    """argmin ||matrix @ x - target|| subject to x >= 0 (Lawson-Hanson active set).

    The passive set's normal equations are kept as a Cholesky factor grown one column at a
    time, and the gradient is a sparse product, so a 512 x 22,102 fit takes well under a second
    where the dense textbook version takes tens of seconds.
    """
    from scipy.linalg import solve_triangular  # imported here, like every heavy import: `simbench list` stays fast

    rows, columns = matrix.shape
    transposed = matrix.T.tocsr()
    solution = np.zeros(columns)
    passive: list[int] = []
    passive_rows = np.zeros((rows, rows))  # the passive columns of the matrix, one per row
    factor = np.zeros((rows, rows))
    gradient = transposed @ target
    tolerance = 1e-10 * max(1.0, float(np.abs(gradient).max(initial=0.0)))
    blocked = np.zeros(columns, dtype=bool)
    for _ in range(3 * columns):
        candidates = np.where(blocked, -np.inf, gradient)
        candidates[passive] = -np.inf
        entering = _first_of_best(candidates)
        if candidates[entering] <= tolerance or len(passive) == rows:
            break
        column = _dense_column(matrix, entering)
        size = len(passive)
        cross = passive_rows[:size] @ column
        below = solve_triangular(factor[:size, :size], cross, lower=True, check_finite=False) if size else cross
        pivot_squared = column @ column - below @ below
        if pivot_squared <= 1e-12 * (column @ column):
            blocked[entering] = True  # linearly dependent on the passive set: cannot enter
            continue
        passive.append(entering)
        passive_rows[size] = column
        factor[size, :size] = below
        factor[size, size] = np.sqrt(pivot_squared)
        values = _solve_passive(factor, passive_rows, target, len(passive))
        if values[-1] <= 0:
            # Rounding made the entering column useless; undo and try the next best one.
            passive.pop()
            blocked[entering] = True
            continue
        values = _leave_until_positive(solution, passive, passive_rows, factor, target, values)
        solution[:] = 0.0
        solution[passive] = values
        blocked[:] = False
        residual = target - values @ passive_rows[:len(passive)]
        gradient = transposed @ residual
    return solution


def _dense_column(matrix: sparse.csc_matrix, index: int) -> np.ndarray:
    column = np.zeros(matrix.shape[0])
    start, end = matrix.indptr[index], matrix.indptr[index + 1]
    column[matrix.indices[start:end]] = matrix.data[start:end]
    return column


def _solve_passive(factor: np.ndarray, passive_rows: np.ndarray, target: np.ndarray, size: int) -> np.ndarray:
    """The least-squares values of the `size` passive columns, from their Cholesky factor."""
    from scipy.linalg import solve_triangular

    if size == 0:
        return np.zeros(0)
    lower = factor[:size, :size]
    halfway = solve_triangular(lower, passive_rows[:size] @ target, lower=True, check_finite=False)
    return solve_triangular(lower, halfway, lower=True, trans="T", check_finite=False)


def _leave_until_positive(solution: np.ndarray, passive: list[int], passive_rows: np.ndarray, factor: np.ndarray,
                          target: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Lawson-Hanson's inner loop: step from `solution` towards `values` until a passive value reaches zero, drop
    those columns (from `passive`, `passive_rows` and `factor`, in place), solve again, until every value is
    positive; returns those values."""
    while np.any(values <= 0):
        current = solution[passive]
        falling = values <= 0
        step = np.min(current[falling] / (current[falling] - values[falling]))
        current = current + step * (values - current)
        leaving = current <= 1e-12 * max(1.0, current.max())
        current[leaving] = 0.0
        solution[passive] = current
        for position in np.flatnonzero(leaving)[::-1]:
            drop_from_factor(factor, len(passive), int(position))
            passive.pop(position)
        keep = ~leaving
        passive_rows[:len(passive)] = passive_rows[:keep.size][keep]
        values = _solve_passive(factor, passive_rows, target, len(passive))
    return values


def _first_of_best(values: np.ndarray) -> int:
    """The first index whose value ties the largest (within GRADIENT_TIE of it)."""
    top = float(values.max())
    if not np.isfinite(top):
        return int(np.argmax(values))
    return int(np.argmax(values >= top - GRADIENT_TIE * abs(top)))


def drop_from_factor(factor: np.ndarray, size: int, position: int) -> None:
    """Turn the lower Cholesky factor of a Gram matrix into that of the Gram matrix without
    column `position`, in place (the leading size-1 square), by a rank-one update of the tail."""
    update = factor[position + 1:size, position].copy()
    factor[position:size - 1, :size] = factor[position + 1:size, :size]
    factor[:size - 1, position:size - 1] = factor[:size - 1, position + 1:size]
    factor[size - 1, :size] = 0.0
    factor[:size, size - 1] = 0.0
    for index in range(position, size - 1):
        diagonal = factor[index, index]
        radius = np.hypot(diagonal, update[0])
        cosine, sine = radius / diagonal, update[0] / diagonal
        factor[index, index] = radius
        below = factor[index + 1:size - 1, index]
        below += sine * update[1:]
        below /= cosine
        update = cosine * update[1:] - sine * below


def round_fitted_counts(fitted: np.ndarray) -> np.ndarray:
    """The nearest whole counts; a tie (within HALF_TIE of a half) rounds to even whichever side of
    the half the solve landed on, so that the packing does not depend on the solver build."""
    whole = np.floor(fitted)
    tie = np.abs(fitted - whole - 0.5) <= HALF_TIE
    return np.rint(np.where(tie, whole + 0.5, fitted)).astype(np.int64)


def strategy_matrix(strategies: np.ndarray, max_length: int, weights: np.ndarray) -> sparse.csc_matrix:
    """Row l-1 of column j: how many sequences of length l strategy j holds, times the row weight."""
    from scipy import sparse

    column_of_part = np.broadcast_to(np.arange(strategies.shape[0])[:, None], strategies.shape)
    present = strategies > 0
    lengths = strategies[present]
    return sparse.csc_matrix((weights[lengths - 1], (lengths - 1, column_of_part[present])),
                             shape=(max_length, strategies.shape[0]))


def remove_surplus(strategies: np.ndarray, repeats: np.ndarray, surplus: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Take `surplus[l-1]` sequences of each length l out of the packs (they become padding).

    Packs that lose a sequence become a new distinct row; the most used strategies give first.
    """
    rows = [list(row) for row in strategies]
    counts = list(repeats)
    for length in np.flatnonzero(surplus) + 1:
        owed = int(surplus[length - 1])
        while owed > 0:
            holders = [index for index, row in enumerate(rows) if counts[index] > 0 and length in row]
            index = max(holders, key=lambda holder: counts[holder])
            taken = min(owed, counts[index])
            smaller = list(rows[index])
            smaller[smaller.index(length)] = 0
            counts[index] -= taken
            rows.append(smaller)
            counts.append(taken)
            owed -= taken
    return np.array(rows, dtype=np.int64).reshape(-1, strategies.shape[1]), np.array(counts, dtype=np.int64)


def _fitted_depth(max_length: int, max_depth: int | None) -> int:
    # Every sequence takes a token, so no pack holds more than max_length of them; a larger depth
    # would only lengthen the enumeration and widen the rows for nothing.
    return min(PAPER_DEPTH if max_depth is None else max_depth, max_length)


def _fits(strategy_count: int, max_length: int) -> bool:
    return strategy_count <= MAX_STRATEGIES and strategy_count * max_length <= MAX_FIT_CELLS


def check_fit_size(max_length: int, max_depth: int | None) -> None:
    """Refuse, before any work, a fit too large to solve: an InputError about `max_depth` that names the
    largest depth that fits at this length and packers that work there."""
    depth = _fitted_depth(max_length, max_depth)
    # The counts grow with the depth: the first depth that does not fit ends the count, before its
    # numbers grow huge. Depth 1 (one strategy: a pack of max_length) always fits.
    for deepest, strategy_count in enumerate(strategy_counts_by_depth(max_length, depth)):
        if not _fits(strategy_count, max_length):
            break
    else:
        return
    at_least = "" if deepest + 1 == depth else "at least "
    # Depth 1 packs nothing: not worth suggesting.
    shallower = f"max_depth {deepest} or less, or " if deepest > 1 else ""
    raise InputError(f"nnlshp at depth {depth} and max length {max_length:,} would fit {at_least}{strategy_count:,} "
                     f"strategies to {max_length:,} lengths (limits {MAX_STRATEGIES:,} strategies, "
                     f"{MAX_FIT_CELLS:,} cells); use {shallower}a packer that works at this length such as lpfhp, "
                     "spfhp or optimal", parameter="max_depth")


def pack_nnlshp_counts(counts: np.ndarray, max_length: int, max_depth: int | None,
                       leftovers: str = "spfhp") -> tuple[np.ndarray, np.ndarray, dict]:
    """Rows and repeats of an NNLSHP packing, and the first pass's statistics.

    `leftovers` says what happens to the sequences the rounded fit leaves out: "spfhp" packs
    them with `spfhp` at the same depth, first into the room that removed surplus sequences
    left in the fitted packs; "single" gives each its own pack, as the paper does.
    """
    check_fit_size(max_length, max_depth)
    depth = _fitted_depth(max_length, max_depth)
    histogram = np.zeros(max_length, dtype=np.int64)
    histogram[:min(counts.size, max_length)] = counts[:max_length]  # lengths beyond are empty
    strategies = exact_fill_strategies(max_length, depth)
    weights = np.ones(max_length)
    weights[:SHORT_LENGTH] = SHORT_LENGTH_WEIGHT
    fitted = nonnegative_least_squares(strategy_matrix(strategies, max_length, weights), weights * histogram)
    repeats = round_fitted_counts(fitted)
    used = repeats > 0
    strategies, repeats = strategies[used], repeats[used]
    placed = np.zeros(max_length + 1, dtype=np.int64)
    np.add.at(placed, strategies.ravel(), np.repeat(repeats, strategies.shape[1]))
    residual = histogram - placed[1:]
    rows, repeats = remove_surplus(strategies, repeats, np.maximum(-residual, 0))
    left_over = np.maximum(residual, 0)
    details = {"strategies_fitted": int(used.sum()), "sequences_left_over": int(left_over.sum())}
    if leftovers == "single":
        present = np.flatnonzero(left_over)
        extra_rows = np.zeros((present.size, rows.shape[1]), dtype=np.int64)
        extra_rows[:, 0] = present + 1
        extra_repeats = left_over[present]
    elif leftovers == "spfhp":
        fitted_packs = [(int(count), tuple(int(length) for length in row if length))
                        for row, count in zip(rows, repeats) if count]
        groups = pack_by_free_space(left_over, max_length, depth, True, partial_packs=fitted_packs)
        all_rows = np.zeros((len(groups), depth), dtype=np.int64)
        for index, (_, pack) in enumerate(groups):
            all_rows[index, :len(pack)] = pack
        return all_rows, np.array([count for count, _ in groups], dtype=np.int64), details
    else:
        raise ValueError(f"unknown leftover handling {leftovers!r}")
    return np.vstack([rows, extra_rows]), np.concatenate([repeats, extra_repeats]), details


@register("nnlshp", "non-negative least-squares histogram packing (depth 3 unless --max-depth)",
          check_limits=check_fit_size, default_depth=PAPER_DEPTH, slow=True)
def pack_nnlshp(histogram, max_length, max_depth, options) -> Packing:
    rows, repeats, details = pack_nnlshp_counts(histogram.counts, max_length, max_depth)
    depth = _fitted_depth(max_length, max_depth)
    packing = Packing.from_rows("nnlshp", max_length, depth, rows, repeats, details=details)
    # Where few exact fills exist (long contexts, shallow depths) the fit places little and its leftover
    # packer does nearly all the work: nnlshp then returns that packer's own packs of the whole histogram
    # when they are fewer, and says so, so that it is never worse than the packer it relies on.
    leftover = packing_from_groups("nnlshp", max_length, depth,
                                   pack_by_free_space(histogram.counts, max_length, depth, True))
    if leftover.packs_total < packing.packs_total:
        return leftover.replace(details={**details, "fell_back_to": f"spfhp:{depth}",
                                         "fitted_packs": packing.packs_total})
    return packing
