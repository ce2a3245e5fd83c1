"""The result every strategy returns: distinct packs with repeat counts, and their metrics.

    >>> from simbench.strategies.packing import Packing
    >>> p = Packing.from_rows("demo", 8, None, [[5, 3], [8, 0]], repeats=[2, 1])
    >>> p.packs_total, p.sequences, p.efficiency
    (3, 5, 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simbench.histogram import LengthHistogram
from simbench.validation import check_seed, check_whole_number


@dataclass(frozen=True)
class PackOptions:
    """Options every strategy accepts; a strategy ignores those it has no use for."""

    seed: int = 0
    batch_size: int = 32  # sequences per batch, for batchers such as `sort`

    def __post_init__(self):
        # Checked here, once, so that no strategy meets numpy's traceback for a negative seed.
        check_seed(self.seed)
        check_whole_number(self.batch_size, "batch_size", minimum=1)


@dataclass(frozen=True, eq=False)
class Packing:
    """Distinct packs ("strategies" in the packing paper) and how often each is used.

    `rows[i]` holds the lengths of pack i in descending order, zero-padded to the widest pack;
    `repeats[i]` is how many packs of that content exist; `slot_lengths[i]` is the number of token
    slots the pack occupies (max_length for fixed-shape packs; the batch's longest for `sort`).
    """

    strategy: str
    max_length: int
    max_depth: int | None
    rows: np.ndarray
    repeats: np.ndarray
    slot_lengths: np.ndarray
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    @classmethod
    def from_rows(cls, strategy: str, max_length: int, max_depth: int | None, rows, repeats,
                  slot_lengths=None, seconds: float = 0.0, details: dict | None = None) -> Packing:
        """Build a packing, merging identical rows and dropping unused ones."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim == 1:
            rows = rows[:, None]
        repeats = np.asarray(repeats, dtype=np.int64)
        slots = (np.full(rows.shape[0], max_length, dtype=np.int64) if slot_lengths is None
                 else np.asarray(slot_lengths, dtype=np.int64))
        rows = -np.sort(-rows, axis=1)
        keep = repeats > 0
        rows, repeats, slots = rows[keep], repeats[keep], slots[keep]
        width = int(np.count_nonzero(rows, axis=1).max()) if rows.size else 1
        rows = rows[:, :max(width, 1)]
        keys = np.column_stack([rows, slots])
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        merged = np.bincount(inverse.ravel(), weights=repeats, minlength=len(unique)).astype(np.int64)
        return cls(strategy, max_length, max_depth, unique[:, :-1].copy(), merged, unique[:, -1].copy(),
                   seconds, details or {})

    @property
    def depths(self) -> np.ndarray:
        """Sequences in each distinct pack."""
        return np.count_nonzero(self.rows, axis=1)

    @property
    def packs_total(self) -> int:
        return int(self.repeats.sum())

    @property
    def sequences(self) -> int:
        return int(self.repeats @ self.depths)

    @property
    def real_tokens(self) -> int:
        return int(self.repeats @ self.rows.sum(axis=1))

    @property
    def tokens(self) -> int:
        """All token slots, padding included."""
        return int(self.repeats @ self.slot_lengths)

    @property
    def padding_tokens(self) -> int:
        return self.tokens - self.real_tokens

    @property
    def efficiency(self) -> float:
        return self.real_tokens / self.tokens if self.tokens else 1.0

    @property
    def packing_factor(self) -> float:
        return self.sequences / self.packs_total if self.packs_total else 0.0

    @property
    def strategies_used(self) -> int:
        return int(self.rows.shape[0])

    @property
    def depth_used(self) -> int:
        return int(self.depths.max()) if self.rows.size else 0

    def placed_histogram(self) -> LengthHistogram:
        """How many sequences of each length the packing placed (must equal the input's)."""
        counts = np.zeros(self.max_length + 1, dtype=np.int64)
        weights = np.broadcast_to(self.repeats[:, None], self.rows.shape)
        np.add.at(counts, self.rows.ravel(), weights.ravel())
        return LengthHistogram(counts[1:])

    def metrics(self, lower_bound_packs: float | None = None) -> dict:
        """The paper's metrics, with the key names of the `simbench pack --json` contract."""
        result = {
            "strategy": self.strategy,
            "max_depth": self.max_depth,
            "sequences": self.sequences,
            "packs": self.packs_total,
            "tokens": self.tokens,
            "padding_tokens": self.padding_tokens,
            "efficiency": self.efficiency,
            "packing_factor": self.packing_factor,
            "strategies_used": self.strategies_used,
            "depth_used": self.depth_used,
            "seconds": self.seconds,
            "lower_bound_packs": lower_bound_packs,
        }
        if lower_bound_packs:
            result["gap_to_bound"] = self.packs_total / lower_bound_packs - 1.0
        return result
