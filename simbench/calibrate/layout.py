"""What a timed batch holds, in plain numbers: the one description from which both the torch batch
that is timed and the cost model's `BatchSet` that prices it are built, so both see the same batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.errors import InputError


@dataclass(frozen=True)
class BatchLayout:
    """Rows of sequence lengths, each row's token slots, and how the device runs them.

    Un-padded batches have one sequence per row and no padding (slots equal lengths). Packed-varlen
    batches are packs whose attention runs per sequence (dense layers over every slot).
    """

    mode: ExecutionMode
    rows: tuple[tuple[int, ...], ...]
    row_slots: tuple[int, ...]

    def __post_init__(self):
        if not self.rows or len(self.rows) != len(self.row_slots):
            raise InputError("a batch layout needs one slot count per row and at least one row")
        for row, slots in zip(self.rows, self.row_slots):
            if not row or min(row) < 1 or sum(row) > slots:
                raise InputError(f"row {list(row)} does not fit its {slots} slots")

    @classmethod
    def padded(cls, lengths: Sequence[int], row_length: int, mode: ExecutionMode = ExecutionMode.PADDED):
        return cls(ExecutionMode(mode), tuple((int(length),) for length in lengths), (int(row_length),) * len(lengths))

    @classmethod
    def packed(cls, rows: Sequence[Sequence[int]], row_length: int, mode: ExecutionMode = ExecutionMode.PADDED):
        return cls(ExecutionMode(mode), tuple(tuple(int(length) for length in row) for row in rows),
                   (int(row_length),) * len(rows))

    @classmethod
    def unpadded(cls, lengths: Sequence[int]):
        return cls(ExecutionMode.UNPADDED, tuple((int(length),) for length in lengths),
                   tuple(int(length) for length in lengths))

    @property
    def lengths(self) -> np.ndarray:
        return np.array([length for row in self.rows for length in row], dtype=np.int64)

    @property
    def real_tokens(self) -> int:
        return int(self.lengths.sum())

    @property
    def slots(self) -> int:
        return int(sum(self.row_slots))

    @property
    def max_depth(self) -> int:
        return max(len(row) for row in self.rows)

    @property
    def kind(self) -> str:
        """padded, sorted, packed, packed_varlen or unpadded: the label timings are reported under."""
        if self.mode is ExecutionMode.PADDED and self.max_depth > 1:
            return "packed"
        return self.mode.value

    @property
    def shape_key(self) -> tuple:
        """What the device sees of the batch's shape: a flat token count (un-padded), or rows x row length
        with how attention runs over them (ATTENTION_OF_MODE: no mask, a dense mask, a block mask, per
        sequence). Two batches with one key run the same kernels on the same tensor shapes."""
        if self.mode is ExecutionMode.UNPADDED:
            return ("unpadded", self.real_tokens)
        return (ATTENTION_OF_MODE[self.mode], len(self.rows), max(self.row_slots))


# How a layout's rows attend, by mode, as `shape_key` names it.
ATTENTION_OF_MODE = {ExecutionMode.PADDED: "dense", ExecutionMode.SORTED: "dense",
                     ExecutionMode.PACKED_DENSE_MASK: "dense mask", ExecutionMode.PACKED_BLOCK_MASK: "block mask",
                     ExecutionMode.PACKED_VARLEN: "per-sequence"}


def batch_set(layouts: Sequence[BatchLayout]) -> BatchSet:
    """All layouts as one `BatchSet`, batch i being layouts[i]."""
    lengths = np.concatenate([layout.lengths for layout in layouts])
    depths = np.concatenate([[len(row) for row in layout.rows] for layout in layouts])
    row_slots = np.concatenate([layout.row_slots for layout in layouts]).astype(np.int64)
    row_batch = np.repeat(np.arange(len(layouts)), [len(layout.rows) for layout in layouts])
    return BatchSet(sequence_lengths=lengths, sequence_row=np.repeat(np.arange(row_slots.size), depths),
                    row_slots=row_slots, row_batch=row_batch, batches=len(layouts))
