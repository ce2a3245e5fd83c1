"""Torch batches in the layouts simbench times: padded rows, packed rows (one attention over the row, a
block-diagonal mask, dense or as FlexAttention's block mask, or attention per sequence) and un-padded tokens.

    >>> import numpy as np
    >>> from simbench.calibrate.batches import packed_batch, random_sequences
    >>> sequences = random_sequences([5, 3, 8], vocabulary=100, rng=np.random.default_rng(0))
    >>> batch = packed_batch(sequences, rows=[[0, 1], [2]], row_length=8)
    >>> batch.row_sequence_ids.tolist(), batch.position_ids.tolist()   # positions restart per sequence
    ([[1, 1, 1, 1, 1, 2, 2, 2], [1, 1, 1, 1, 1, 1, 1, 1]], [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7]])
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from simbench.calibrate.layout import BatchLayout
from simbench.costmodels.base import ExecutionMode
from simbench.errors import InputError


@dataclass(frozen=True)
class TokenSequence:
    """One training sequence: token ids, the masked positions to predict (MLM-like) and a sequence label."""

    token_ids: np.ndarray
    masked_positions: np.ndarray
    masked_labels: np.ndarray
    sequence_label: int

    @property
    def length(self) -> int:
        return int(self.token_ids.size)


@dataclass(frozen=True)
class AttentionGroup:
    """Equal-length sequences attended to in one call (un-padded layout)."""

    token_index: torch.Tensor  # (sequences * length,) positions in the flat token tensor
    sequences: int
    length: int


@dataclass(frozen=True, eq=False)
class TorchBatch:
    """Tensors for one training step; rows of slots, or flat tokens when un-padded."""

    input_ids: torch.Tensor  # (rows, row_length) or (tokens,)
    position_ids: torch.Tensor  # same shape; restart at 0 for every sequence
    row_sequence_ids: torch.Tensor | None  # (rows, row_length): 1..depth per sequence in the row, 0 = padding
    masked_slots: torch.Tensor  # (n_masked,) flat slot of each token the token head predicts
    masked_labels: torch.Tensor  # (n_masked,)
    masked_sequence: torch.Tensor  # (n_masked,) sequence index of each masked token
    sequence_first_token: torch.Tensor  # (n_sequences,) flat slot of each sequence's first token
    sequence_lengths: torch.Tensor  # (n_sequences,)
    sequence_labels: torch.Tensor  # (n_sequences,)
    packed: bool
    has_padding: bool
    row_mask: str = "dense"  # rows: none (one attention over the row), dense (a dense mask) or block (FlexAttention)
    unpadded_attention: str | None = None  # un-padded and packed-varlen layouts: one of UNPADDED_ATTENTION
    groups: tuple[AttentionGroup, ...] = ()  # "grouped": equal-length sequences attended to together
    inverse_group_order: torch.Tensor | None = None  # "grouped": group-ordered tokens -> flat order
    cumulative_lengths: torch.Tensor | None = None  # "jagged", "flash_varlen": sequence offsets, 0 first
    longest: int = 0
    # Packed-varlen: the flat slot (row x row_length + position) of every real token, sequence after sequence;
    # attention runs on these tokens alone, per sequence, and the padding slots get no context.
    real_slots: torch.Tensor | None = None

    @property
    def real_tokens(self) -> int:
        return int(self.sequence_lengths.sum())

    def to(self, device: torch.device | str) -> TorchBatch:
        """The same batch on `device` (tensors copied, the rest shared)."""
        moved = {name: (value.to(device) if isinstance(value, torch.Tensor) else value)
                 for name, value in self.__dict__.items()}
        if self.groups:
            moved["groups"] = tuple(AttentionGroup(group.token_index.to(device), group.sequences, group.length)
                                    for group in self.groups)
        return TorchBatch(**moved)


MASKED_FRACTION = 0.15  # BERT predicts 15 % of the tokens, so the token head runs on those only


def random_sequences(lengths, vocabulary: int, rng: np.random.Generator) -> list[TokenSequence]:
    """Sequences of the given lengths with random token ids, masked positions and labels."""
    sequences = []
    for length in np.asarray(lengths, dtype=np.int64):
        masked = max(1, int(round(MASKED_FRACTION * length)))
        sequences.append(TokenSequence(
            token_ids=rng.integers(0, vocabulary, size=int(length)),
            masked_positions=np.sort(rng.choice(int(length), size=masked, replace=False)),
            masked_labels=rng.integers(0, vocabulary, size=masked),
            sequence_label=int(rng.integers(0, 2))))
    return sequences


def padded_batch(sequences: list[TokenSequence], row_length: int | None = None,
                 row_mask: str = "dense") -> TorchBatch:
    """One sequence per row, padded to `row_length` (default: the longest, as sorted batching does); `row_mask`
    as `packed_batch` takes it (a padding mask where masked)."""
    row_length = row_length or max(sequence.length for sequence in sequences)
    return _row_batch(sequences, [[index] for index in range(len(sequences))], row_length, packed=False,
                      row_mask=row_mask)


def packed_batch(sequences: list[TokenSequence], rows: list[list[int]], row_length: int,
                 row_mask: str = "dense") -> TorchBatch:
    """Several sequences per row (indices into `sequences`), isolated by a block-diagonal mask (`dense`, or
    `block` for FlexAttention's), or attending over the whole row (`none`)."""
    return _row_batch(sequences, rows, row_length, packed=True, row_mask=row_mask)


def _row_batch(sequences: list[TokenSequence], rows: list[list[int]], row_length: int, packed: bool,
               row_mask: str = "dense") -> TorchBatch:
    if row_mask not in ROW_MASK_NAMES:
        raise InputError(f"row_mask must be one of {', '.join(ROW_MASK_NAMES)}, found {row_mask!r}")
    _check_rows(sequences, rows, row_length)
    shape = (len(rows), row_length)
    input_ids = np.zeros(shape, dtype=np.int64)
    position_ids = np.zeros(shape, dtype=np.int64)
    row_sequence_ids = np.zeros(shape, dtype=np.int64)
    order = [index for row in rows for index in row]
    first_token = np.zeros(len(order), dtype=np.int64)
    number = 0
    for row_index, row in enumerate(rows):
        start = 0
        for depth, sequence_index in enumerate(row, start=1):
            sequence = sequences[sequence_index]
            span = slice(start, start + sequence.length)
            input_ids[row_index, span] = sequence.token_ids
            position_ids[row_index, span] = np.arange(sequence.length)
            row_sequence_ids[row_index, span] = depth
            first_token[number] = row_index * row_length + start
            start += sequence.length
            number += 1
    ordered = [sequences[index] for index in order]
    return TorchBatch(
        input_ids=torch.from_numpy(input_ids), position_ids=torch.from_numpy(position_ids),
        row_sequence_ids=torch.from_numpy(row_sequence_ids),
        **_masked_tokens(ordered, first_token),
        sequence_first_token=torch.from_numpy(first_token),
        sequence_lengths=torch.tensor([sequence.length for sequence in ordered]),
        sequence_labels=torch.tensor([sequence.sequence_label for sequence in ordered]),
        packed=packed, has_padding=bool(np.any(row_sequence_ids == 0)), row_mask=row_mask,
        longest=max(sequence.length for sequence in ordered))


ROW_MASK_NAMES = ("none", "dense", "block")


# How un-padded attention runs: one call per distinct length ("grouped", any device), one jagged
# nested-tensor call ("jagged", torch's fused kernels on CUDA), flash-attention's varlen kernel (the
# flash_attn package), or torch's own varlen kernel (torch.nn.attention.varlen, CUDA).
UNPADDED_ATTENTION = ("grouped", "jagged", "flash_varlen", "torch_varlen")


def unpadded_batch(sequences: list[TokenSequence], attention: str = "grouped") -> TorchBatch:
    """All tokens concatenated without padding; `attention` says how attention avoids padding."""
    if not sequences:
        raise InputError("an un-padded batch needs at least one sequence")
    _check_attention(attention)
    lengths = np.array([sequence.length for sequence in sequences], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return TorchBatch(
        input_ids=torch.from_numpy(np.concatenate([sequence.token_ids for sequence in sequences])),
        position_ids=torch.from_numpy(np.concatenate([np.arange(length) for length in lengths])),
        row_sequence_ids=None,
        **_masked_tokens(sequences, starts),
        sequence_first_token=torch.from_numpy(starts),
        sequence_lengths=torch.from_numpy(lengths),
        sequence_labels=torch.tensor([sequence.sequence_label for sequence in sequences]),
        packed=False, has_padding=False, **_per_sequence_attention(lengths, attention))


def packed_varlen_batch(sequences: list[TokenSequence], rows: list[list[int]], row_length: int,
                        attention: str = "grouped") -> TorchBatch:
    """Packs as `packed_batch` lays them out, with attention per sequence instead of a mask: the dense layers
    run over every slot, attention over each sequence's tokens alone (`attention` says how)."""
    _check_attention(attention)
    batch = _row_batch(sequences, rows, row_length, packed=True)
    lengths = batch.sequence_lengths.numpy()
    first = batch.sequence_first_token.numpy()
    real_slots = np.repeat(first - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(lengths.sum())
    return replace(batch, real_slots=torch.from_numpy(real_slots), **_per_sequence_attention(lengths, attention))


def _per_sequence_attention(lengths: np.ndarray, attention: str) -> dict:
    """The fields by which a batch's attention runs per sequence over its tokens laid end to end."""
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    groups, inverse = (), None
    if attention == "grouped":
        groups, inverse = _length_groups(lengths, offsets[:-1])
    return {"unpadded_attention": attention, "groups": groups, "inverse_group_order": inverse,
            "cumulative_lengths": torch.from_numpy(offsets), "longest": int(lengths.max())}


def _check_attention(attention: str) -> None:
    if attention not in UNPADDED_ATTENTION:
        raise InputError(f"un-padded attention must be one of {', '.join(UNPADDED_ATTENTION)}, found {attention!r}")


def _length_groups(lengths: np.ndarray, starts: np.ndarray) -> tuple[tuple[AttentionGroup, ...], torch.Tensor]:
    groups, group_order = [], []
    for length in np.unique(lengths):
        members = np.flatnonzero(lengths == length)
        token_index = (starts[members][:, None] + np.arange(length)[None, :]).reshape(-1)
        groups.append(AttentionGroup(torch.from_numpy(token_index), int(members.size), int(length)))
        group_order.append(token_index)
    inverse = np.empty(int(lengths.sum()), dtype=np.int64)
    inverse[np.concatenate(group_order)] = np.arange(inverse.size)
    return tuple(groups), torch.from_numpy(inverse)


def _masked_tokens(sequences: list[TokenSequence], first_token: np.ndarray) -> dict[str, torch.Tensor]:
    slots = np.concatenate([start + sequence.masked_positions for start, sequence in zip(first_token, sequences)])
    owner = np.repeat(np.arange(len(sequences)), [sequence.masked_positions.size for sequence in sequences])
    return {"masked_slots": torch.from_numpy(slots.astype(np.int64)),
            "masked_labels": torch.from_numpy(np.concatenate([sequence.masked_labels for sequence in sequences])),
            "masked_sequence": torch.from_numpy(owner)}


def _check_rows(sequences: list[TokenSequence], rows: list[list[int]], row_length: int) -> None:
    if not rows or any(not row for row in rows):
        raise InputError("every row of a batch needs at least one sequence")
    for row_index, row in enumerate(rows):
        tokens = sum(sequences[index].length for index in row)
        if tokens > row_length:
            raise InputError(f"row {row_index} holds {tokens} tokens, more than the row length {row_length}")


def batch_for_layout(layout: BatchLayout, vocabulary: int, rng: np.random.Generator,
                     unpadded_attention: str = "grouped") -> TorchBatch:
    """A torch batch with random tokens holding exactly the sequences of `layout`, attending as its mode is priced:
    un-padded and packed-varlen layouts per sequence the `unpadded_attention` way, rows with the mode's mask
    (`kernels.row_mask`: none for padded and sorted rows and `row` packs)."""
    from simbench.calibrate.kernels import row_mask

    sequences = random_sequences(layout.lengths, vocabulary, rng)
    if layout.mode is ExecutionMode.UNPADDED:
        return unpadded_batch(sequences, unpadded_attention)
    starts = np.cumsum([0] + [len(row) for row in layout.rows])
    rows = [list(range(start, stop)) for start, stop in zip(starts[:-1], starts[1:])]
    if layout.mode is ExecutionMode.PACKED_VARLEN:
        return packed_varlen_batch(sequences, rows, max(layout.row_slots), unpadded_attention)
    if layout.max_depth == 1:
        return padded_batch(sequences, row_length=layout.row_slots[0], row_mask=row_mask(layout.mode))
    return packed_batch(sequences, rows, row_length=max(layout.row_slots), row_mask=row_mask(layout.mode))
