"""The contract between strategies' batches and the cost models that price them.

A `BatchSet` holds many per-device batches at once (ragged, flat arrays) so that pricing
hundreds of thousands of batches is a handful of numpy calls, not a Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import numpy as np


class ExecutionMode(str, Enum):
    """How a device executes the rows of a batch."""

    PADDED = "padded"  # fixed-shape rows; attention over the whole row (padding or packs with a block-diagonal mask)
    SORTED = "sorted"  # rows padded to the batch's longest; the shape changes from batch to batch
    PACKED_VARLEN = "packed_varlen"  # fixed-shape packs, attention per sequence (flash-attention varlen)
    UNPADDED = "unpadded"  # no padding at all; kernels grouped by length (NVIDIA/Baidu un-padding)


@dataclass(frozen=True, eq=False)
class BatchSet:
    """Many per-device batches, flattened.

    Rows are packs or padded slots; each row belongs to one batch, each sequence to one row.
    `row_batch` and `sequence_row` are non-decreasing (batches and rows are contiguous).
    """

    sequence_lengths: np.ndarray  # (n_sequences,) real tokens of each sequence
    sequence_row: np.ndarray  # (n_sequences,) row index of each sequence
    row_slots: np.ndarray  # (n_rows,) token slots of each row (padding included)
    row_batch: np.ndarray  # (n_rows,) batch index of each row
    batches: int  # number of batches

    @property
    def sequence_batch(self) -> np.ndarray:
        return self.row_batch[self.sequence_row]

    def per_batch(self, row_or_sequence_values: np.ndarray, *, of: str) -> np.ndarray:
        """Sum a per-row (`of="rows"`) or per-sequence (`of="sequences"`) array within each batch."""
        index = self.row_batch if of == "rows" else self.sequence_batch
        return np.bincount(index, weights=row_or_sequence_values, minlength=self.batches)


@dataclass(frozen=True, eq=False)
class StepCosts:
    """Seconds one device spends on each batch of a `BatchSet`, split by cause (arrays of n_batches)."""

    compute_seconds: np.ndarray  # useful work on real tokens
    padding_seconds: np.ndarray  # work spent on padding tokens (their dense layers and attention)
    overhead_seconds: np.ndarray  # masks, loss unpacking, kernel launches, shape changes, host transfer
    # Attention between different sequences of one row, computed and then masked out (a block-diagonal mask
    # on dense kernels): no padding token is involved, yet no real work is done.
    masked_attention_seconds: np.ndarray | None = None
    # Seconds a device waits inside its own step: a replica's pipeline bubbles and stalls, its slowest
    # context-parallel rank (None: none, one device computing alone).
    stall_seconds: np.ndarray | None = None

    def __post_init__(self):
        for name in ("masked_attention_seconds", "stall_seconds"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.zeros(np.shape(self.compute_seconds)))

    @property
    def total_seconds(self) -> np.ndarray:
        return (self.compute_seconds + self.padding_seconds + self.masked_attention_seconds + self.overhead_seconds
                + self.stall_seconds)


class CostModel(Protocol):
    """Prices batches on one device, and the communication between devices.

    Optionally `ideal_sequence_seconds(lengths)`: the least device time of each sequence alone (no padding,
    no fixed cost); with it, reports draw the ideal speed-up (simbench.costmodels.ideal), else the ratio of
    padded slots to real tokens.
    """

    def step_costs(self, batches: BatchSet, mode: ExecutionMode) -> StepCosts:
        """Per-batch device time for a forward + backward + optimizer step."""

    def allreduce_seconds(self, devices: int) -> float:
        """Time of the gradient all-reduce across `devices` data-parallel devices (0 for one)."""

    def vts_stage_seconds(self, sequence_lengths: np.ndarray, stages: int) -> np.ndarray:
        """Per-stage time of each sample in a VTS pipeline of `stages` stages: a + b * length."""
