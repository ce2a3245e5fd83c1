"""A small BERT-like encoder in torch that trains on padded, packed or un-padded batches.

Packing's model changes live here: block-diagonal attention from per-token sequence ids (or attention
per sequence over the packs' real tokens, packed-varlen), position ids reset per sequence (given by the
batch) and per-sequence losses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from simbench.calibrate.batches import TorchBatch
from simbench.calibrate.kernels import document_block_mask, flex_attention


@dataclass(frozen=True)
class EncoderShape:
    """Dimensions of the encoder; `max_length` bounds the position embedding."""

    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocabulary: int
    max_length: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def build(self) -> Encoder:
        return Encoder(self)


class EncoderLayer(nn.Module):
    """Post-layer-norm transformer layer (as in BERT)."""

    def __init__(self, shape: EncoderShape):
        super().__init__()
        self.heads = shape.heads
        self.qkv = nn.Linear(shape.hidden, 3 * shape.hidden)
        self.attention_out = nn.Linear(shape.hidden, shape.hidden)
        self.attention_norm = nn.LayerNorm(shape.hidden)
        self.ffn_in = nn.Linear(shape.hidden, shape.intermediate)
        self.ffn_out = nn.Linear(shape.intermediate, shape.hidden)
        self.ffn_norm = nn.LayerNorm(shape.hidden)

    def forward(self, x: torch.Tensor, batch: TorchBatch, mask: torch.Tensor | None) -> torch.Tensor:
        context = self._attention(self.qkv(x), batch, mask)
        x = self.attention_norm(x + self.attention_out(context))
        return self.ffn_norm(x + self.ffn_out(F.gelu(self.ffn_in(x))))

    def _attention(self, qkv: torch.Tensor, batch: TorchBatch, mask: torch.Tensor | None) -> torch.Tensor:
        if batch.unpadded_attention is None:
            rows, length, _ = qkv.shape
            q, k, v = qkv.view(rows, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            if batch.row_mask == "block":
                context = flex_attention(q, k, v, block_mask=mask)
            else:
                context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return context.transpose(1, 2).reshape(rows, length, -1)
        if batch.real_slots is None:
            return per_sequence_attention(qkv, batch, self.heads)
        # Packs with attention per sequence: the real tokens' q, k, v out of the slots, their context back in.
        rows, length, width = qkv.shape
        real = qkv.reshape(rows * length, width).index_select(0, batch.real_slots)
        context = per_sequence_attention(real, batch, self.heads)
        slots = context.new_zeros(rows * length, context.shape[-1]).index_copy(0, batch.real_slots, context)
        return slots.view(rows, length, -1)


def per_sequence_attention(qkv: torch.Tensor, batch: TorchBatch, heads: int) -> torch.Tensor:
    """Attention within each sequence of tokens laid end to end, (tokens, 3 x hidden) -> (tokens, hidden),
    the batch's `unpadded_attention` way."""
    if batch.unpadded_attention == "flash_varlen":
        return _flash_varlen_attention(qkv, batch, heads)
    if batch.unpadded_attention == "torch_varlen":
        return _torch_varlen_attention(qkv, batch, heads)
    if batch.unpadded_attention == "jagged":
        return _jagged_attention(qkv, batch, heads)
    return _grouped_attention(qkv, batch, heads)


def _grouped_attention(qkv: torch.Tensor, batch: TorchBatch, heads: int) -> torch.Tensor:
    """One attention call per group of equal-length sequences: no padding, one launch per group."""
    outputs = []
    for group in batch.groups:
        grouped = qkv.index_select(0, group.token_index).view(group.sequences, group.length, 3, heads, -1)
        q, k, v = grouped.permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(q, k, v)
        outputs.append(context.transpose(1, 2).reshape(group.sequences * group.length, -1))
    return torch.cat(outputs).index_select(0, batch.inverse_group_order)


def _jagged_attention(qkv: torch.Tensor, batch: TorchBatch, heads: int) -> torch.Tensor:
    """One call on jagged nested tensors (sequences of different lengths, no padding)."""
    tokens = qkv.shape[0]
    # Jagged SDPA needs each of q, k, v contiguous as (tokens, heads, head_dim) before the transpose.
    q, k, v = (torch.nested.nested_tensor_from_jagged(part.contiguous(), batch.cumulative_lengths).transpose(1, 2)
               for part in qkv.view(tokens, 3, heads, -1).unbind(1))
    context = F.scaled_dot_product_attention(q, k, v)
    return context.transpose(1, 2).values().reshape(tokens, -1)


def _flash_varlen_attention(qkv: torch.Tensor, batch: TorchBatch, heads: int) -> torch.Tensor:
    """flash-attention's varlen kernel (CUDA, half precision): one launch for the whole batch."""
    from flash_attn import flash_attn_varlen_qkvpacked_func

    tokens = qkv.shape[0]
    cumulative = batch.cumulative_lengths.to(torch.int32)
    context = flash_attn_varlen_qkvpacked_func(qkv.view(tokens, 3, heads, -1), cumulative, batch.longest)
    return context.reshape(tokens, -1)


def _torch_varlen_attention(qkv: torch.Tensor, batch: TorchBatch, heads: int) -> torch.Tensor:
    """torch's own varlen kernel (torch.nn.attention.varlen, CUDA, half precision): one launch for the batch."""
    from torch.nn.attention.varlen import varlen_attn

    tokens = qkv.shape[0]
    q, k, v = qkv.view(tokens, 3, heads, -1).unbind(1)
    cumulative = batch.cumulative_lengths.to(torch.int32)
    context = varlen_attn(q, k, v, cumulative, cumulative, batch.longest, batch.longest)
    return context.reshape(tokens, -1)


class Encoder(nn.Module):
    """Embeddings, transformer layers, a per-token (MLM-like) head and a per-sequence (NSP-like) head."""

    def __init__(self, shape: EncoderShape):
        super().__init__()
        self.shape = shape
        self.token_embedding = nn.Embedding(shape.vocabulary, shape.hidden)
        self.position_embedding = nn.Embedding(shape.max_length, shape.hidden)
        self.embedding_norm = nn.LayerNorm(shape.hidden)
        self.layers = nn.ModuleList(EncoderLayer(shape) for _ in range(shape.layers))
        self.token_head = nn.Linear(shape.hidden, shape.vocabulary)
        self.sequence_head = nn.Linear(shape.hidden, 2)

    def encode(self, batch: TorchBatch) -> torch.Tensor:
        """Hidden states of every slot, flattened to (slots, hidden)."""
        x = self.embedding_norm(self.token_embedding(batch.input_ids) + self.position_embedding(batch.position_ids))
        mask = attention_mask(batch)
        for layer in self.layers:
            x = layer(x, batch, mask)
        return x.reshape(-1, self.shape.hidden)

    def forward(self, batch: TorchBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits of the masked tokens and of each sequence (from its first token)."""
        hidden = self.encode(batch)
        return (self.token_head(hidden.index_select(0, batch.masked_slots)),
                self.sequence_head(hidden.index_select(0, batch.sequence_first_token)))

    def loss(self, batch: TorchBatch) -> torch.Tensor:
        return training_loss(self, batch)


def attention_mask(batch: TorchBatch):
    """Boolean mask for scaled_dot_product_attention (True = may attend), FlexAttention's block mask, or None.

    Rows under a dense mask: packed rows get the block-diagonal mask of the packing paper (a token sees only
    tokens of its own sequence; padding tokens (id 0) see each other, so no softmax row is empty), padded rows
    a padding mask. Rows under a block mask get FlexAttention's document mask; rows without one (`row`) none.
    """
    if batch.row_sequence_ids is None or batch.unpadded_attention is not None:
        return None  # un-padded and packed-varlen batches attend per sequence: no mask
    if batch.row_mask == "block":
        return document_block_mask(batch.row_sequence_ids, causal=False)
    if batch.row_mask == "none":
        return None
    ids = batch.row_sequence_ids
    if batch.packed:
        return (ids[:, :, None] == ids[:, None, :]).unsqueeze(1)
    if batch.has_padding:
        return (ids != 0)[:, None, None, :]
    return None


def per_sequence_losses(batch: TorchBatch, token_logits: torch.Tensor, sequence_logits: torch.Tensor) -> torch.Tensor:
    """Each sequence's loss: the mean cross-entropy of its masked tokens plus its sequence-level one.

    Token losses are unpacked per sequence in one scatter (index_add), vectorized over every
    sequence of the batch whatever the packing depth.
    """
    token_losses = F.cross_entropy(token_logits, batch.masked_labels, reduction="none")
    sequences = batch.sequence_lengths.shape[0]
    sums = token_losses.new_zeros(sequences).index_add_(0, batch.masked_sequence, token_losses)
    counts = torch.bincount(batch.masked_sequence, minlength=sequences).to(token_losses.dtype)
    token_means = sums / counts
    return token_means + F.cross_entropy(sequence_logits, batch.sequence_labels, reduction="none")


def training_loss(model: Encoder, batch: TorchBatch) -> torch.Tensor:
    """Mean of the per-sequence losses: every sequence weighs the same, however it is batched."""
    token_logits, sequence_logits = model(batch)
    return per_sequence_losses(batch, token_logits, sequence_logits).mean()
