"""The packing problem as a MIP over every pack that fits (HiGHS), for `optimal` on histograms small enough.

It proves optima the LP bound cannot (where the integer optimum lies above the LP's, rounded up).

    >>> import numpy as np
    >>> from simbench.strategies.optimal.pattern_mip import solve_pattern_mip
    >>> solve_pattern_mip(np.array([3, 5]), np.array([3, 3]), 8, None, time_limit_seconds=10).packs_total
    3
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbench.strategies.highs import silent_highs

# The MIP enumerates every pack; beyond this many it is not built (HiGHS takes about 2 s for 40,000 without
# presolve, which took 10-100 s on such models and overran its time limit while it ran).
PACKS_MAX = 40_000
# ... nor beyond this many (pack, length) cells, the table enumeration builds.
CELLS_MAX = 1 << 22


@dataclass(frozen=True, eq=False)
class PatternMIP:
    """The MIP's best packs (multiplicity rows over the lengths given, and repeats; empty when it found
    none), the lower bound it proved, and whether it proved its packs optimal."""

    patterns: np.ndarray
    repeats: np.ndarray
    lower_bound_packs: int
    optimal: bool

    @property
    def packs_total(self) -> int:
        return int(self.repeats.sum())


def enumerate_packs(lengths: np.ndarray, limits: np.ndarray, max_length: int, max_depth: int | None,
                    most: int) -> np.ndarray | None:
    """Every non-empty pack with at most `limits[i]` sequences of `lengths[i]` (multiplicity rows, int32),
    or None where there are more than `most`. Built level by level: packs of k + 1 sequences are packs
    of k with one more sequence, no longer than their shortest."""
    order = np.argsort(-lengths, kind="stable")
    lengths, limits = lengths[order], limits[order]
    size = lengths.size
    packs = np.zeros((1, size), dtype=np.int32)
    last = np.zeros(1, dtype=np.int64)
    tokens = np.zeros(1, dtype=np.int64)
    levels, total = [], 0
    for _ in range(max_depth or max_length):
        pack, item = np.nonzero((np.arange(size) >= last[:, None]) & (tokens[:, None] + lengths <= max_length)
                                & (packs < limits))
        if pack.size == 0:
            break
        total += pack.size
        if total > most:
            return None
        packs = packs[pack]
        packs[np.arange(pack.size), item] += 1
        last, tokens = item, tokens[pack] + lengths[item]
        levels.append(packs)
    if not levels:
        return np.zeros((0, size), dtype=np.int32)
    enumerated = np.concatenate(levels)
    result = np.empty_like(enumerated)
    result[:, order] = enumerated
    return result


def mip_packs_max(distinct_lengths: int) -> int:
    """The most packs the MIP is built with for this many distinct lengths."""
    return min(PACKS_MAX, CELLS_MAX // max(distinct_lengths, 1))


def solve_pattern_mip(lengths: np.ndarray, demand: np.ndarray, max_length: int, max_depth: int | None,
                      time_limit_seconds: float, incumbent: tuple[np.ndarray, np.ndarray] | None = None,
                      packs: np.ndarray | None = None) -> PatternMIP:
    """The fewest packs of `demand[i]` sequences of `lengths[i]`, one integer repeat count per pack that
    fits (`packs`, else all of them enumerated), within `time_limit_seconds`; `incumbent` (patterns,
    repeats) starts the search from a known packing."""
    import highspy  # imported here: only `optimal`'s hardest inputs get this far

    if packs is None:
        packs = enumerate_packs(lengths, demand, max_length, max_depth, mip_packs_max(lengths.size))
    count = packs.shape[0]
    highs = silent_highs()
    # Presolve is off: on these models it ran for minutes without looking at the time limit.
    highs.setOptionValue("presolve", "off")
    highs.setOptionValue("time_limit", max(float(time_limit_seconds), 0.0))
    # Pack counts are whole: a gap under one pack is no gap.
    highs.setOptionValue("mip_abs_gap", 1.0 - 1e-6)
    highs.setOptionValue("mip_rel_gap", 0.0)
    columns, rows = np.nonzero(packs)
    starts = np.searchsorted(columns, np.arange(count + 1)).astype(np.int32)
    model = highspy.HighsLp()
    model.num_col_, model.num_row_ = count, lengths.size
    model.col_cost_ = np.ones(count)
    model.col_lower_ = np.zeros(count)
    model.col_upper_ = np.full(count, np.inf)
    model.row_lower_ = model.row_upper_ = demand.astype(np.float64)
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.start_ = starts
    model.a_matrix_.index_ = rows.astype(np.int32)
    model.a_matrix_.value_ = packs[columns, rows].astype(np.float64)
    model.integrality_ = [highspy.HighsVarType.kInteger] * count
    highs.passModel(model)
    if incumbent is not None:
        index = {pack.tobytes(): column for column, pack in enumerate(packs.astype(np.int32))}
        incumbent_columns = [index.get(pattern.astype(np.int32).tobytes()) for pattern in incumbent[0]]
        if None not in incumbent_columns:
            values = np.zeros(count)
            np.add.at(values, incumbent_columns, incumbent[1])
            highs.setSolution(count, np.arange(count, dtype=np.int32), values)
    highs.run()
    status = highs.getModelStatus()
    info = highs.getInfo()
    optimal = status == highspy.HighsModelStatus.kOptimal
    values = np.rint(np.asarray(highs.getSolution().col_value)).astype(np.int64) if info.primal_solution_status \
        else np.zeros(count, dtype=np.int64)
    used = values > 0
    found = np.array_equal(values @ packs, demand)
    lower = int(np.ceil(info.mip_dual_bound - 1e-6)) if np.isfinite(info.mip_dual_bound) else 0
    if not found:
        return PatternMIP(np.zeros((0, lengths.size), dtype=np.int64), np.zeros(0, dtype=np.int64), lower, False)
    if optimal:
        lower = int(values.sum())
    return PatternMIP(packs[used].astype(np.int64), values[used], lower, optimal)


