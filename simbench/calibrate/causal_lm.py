"""A small causal language model in torch (decoder layers of `decoder.DecoderLayer`) that trains on padded,
packed or un-padded batches, as `encoder.Encoder` does for encoders: what `simbench measure` times for a decoder.

How each batch attends, causal in every case, as the cost model prices its mode: padded rows (one sequence each,
padding after it) and `row` packs over the whole row, no mask; `dense-mask` packs under a dense block-diagonal
causal mask; `block-mask` packs under FlexAttention's document block mask; packed-varlen packs and un-padded
batches within each sequence over its real tokens, with the batch's varlen kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from simbench.calibrate.batches import TorchBatch
from simbench.calibrate.decoder import DecoderLayer
from simbench.calibrate.kernels import document_block_mask
from simbench.costmodels.model import ModelSpec

IGNORED_LABEL = -100  # a sequence's last token has no next token to predict


@dataclass(frozen=True)
class DecoderShape:
    """The decoder timed for `model` (a decoder `ModelSpec`); `vocabulary` is its embedding and LM head's."""

    model: ModelSpec

    @property
    def vocabulary(self) -> int:
        # The model's own: a decoder's LM head runs on every token and the cost model prices it with this size.
        return self.model.vocab

    @property
    def layers(self) -> int:
        return self.model.layers

    def build(self) -> CausalLM:
        return CausalLM(self.model)


class CausalLM(nn.Module):
    """Token embedding, decoder layers, a final RMSNorm and an LM head over every token slot; rotary positions
    are left out, as `DecoderLayer` leaves them (elementwise work, small beside the matrix products)."""

    def __init__(self, model: ModelSpec):
        super().__init__()
        self.spec = model
        self.token_embedding = nn.Embedding(model.vocab, model.hidden)
        self.layers = nn.ModuleList(DecoderLayer(model) for _ in range(model.layers))
        self.final_norm = nn.RMSNorm(model.hidden) if model.norm == "rmsnorm" else nn.LayerNorm(model.hidden)
        self.lm_head = nn.Linear(model.hidden, model.vocab, bias=False)

    def encode(self, batch: TorchBatch) -> torch.Tensor:
        """Hidden states of every slot, flattened to (slots, hidden)."""
        x = self.token_embedding(batch.input_ids)
        if x.dim() == 2:  # un-padded: one row of every token, attention within each sequence
            x = x.unsqueeze(0)
        attention = _attention_arguments(batch)
        for layer in self.layers:
            x = layer(x, **attention)
        return x.reshape(-1, self.spec.hidden)

    def forward(self, batch: TorchBatch) -> torch.Tensor:
        """Logits of every slot, padding included, as a padded training step computes them."""
        return self.lm_head(self.final_norm(self.encode(batch)))

    def loss(self, batch: TorchBatch) -> torch.Tensor:
        """Mean next-token cross-entropy over the real tokens of every sequence."""
        slots = real_token_slots(batch)
        logits = self(batch).index_select(0, slots)
        labels = next_token_labels(batch.input_ids.reshape(-1).index_select(0, slots), batch.sequence_lengths)
        total = F.cross_entropy(logits.float(), labels, ignore_index=IGNORED_LABEL, reduction="sum")
        return total / (labels != IGNORED_LABEL).sum().clamp(min=1)


def _attention_arguments(batch: TorchBatch) -> dict:
    """How `DecoderLayer` attends for this batch (see the module docstring)."""
    if batch.unpadded_attention is not None:  # un-padded and packed-varlen: causal within each sequence
        return {"documents": batch.cumulative_lengths.to(torch.int32), "longest": batch.longest,
                "real_slots": batch.real_slots, "kernel": batch.unpadded_attention}
    if batch.row_mask == "block":
        return {"block_mask": document_block_mask(batch.row_sequence_ids, causal=True)}
    if batch.row_mask == "dense":  # packs, or padded rows under a dense padding mask
        return {"mask": causal_pack_mask(batch.row_sequence_ids)}
    # `row`: plain causal attention over the whole row (one sequence a row with padding after it never sees it)
    return {}


def causal_pack_mask(row_sequence_ids: torch.Tensor) -> torch.Tensor:
    """(rows, 1, length, length) True where a token may attend: earlier tokens of its own sequence. Padding
    (id 0) attends to earlier padding, so no softmax row is empty."""
    length = row_sequence_ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=row_sequence_ids.device).tril()
    same = row_sequence_ids[:, :, None] == row_sequence_ids[:, None, :]
    return (same & causal).unsqueeze(1)


def real_token_slots(batch: TorchBatch) -> torch.Tensor:
    """The flat slot of every real token, sequence after sequence."""
    if batch.real_slots is not None:
        return batch.real_slots
    lengths = batch.sequence_lengths
    starts = torch.cumsum(lengths, 0) - lengths
    offsets = torch.arange(int(lengths.sum()), device=lengths.device) - torch.repeat_interleave(starts, lengths)
    return torch.repeat_interleave(batch.sequence_first_token, lengths) + offsets


def next_token_labels(token_ids: torch.Tensor, sequence_lengths: torch.Tensor) -> torch.Tensor:
    """Each token's label: the next token of its sequence (IGNORED_LABEL for a sequence's last token)."""
    labels = token_ids.roll(-1).clone()
    labels[torch.cumsum(sequence_lengths, 0) - 1] = IGNORED_LABEL
    return labels
