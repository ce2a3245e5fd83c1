"""Transformer encoder dimensions and the training FLOPs and parameters they imply.

    >>> from simbench.costmodels.model import get_model
    >>> bert = get_model("bert-large")
    >>> round(bert.training_flops([512]) / 1e12, 3), round(bert.parameters / 1e6)
    (1.005, 336)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np

from simbench.errors import InputError

FLOPS_PER_MULTIPLY_ACCUMULATE = 2
# Backward computes gradients for both the activations and the weights: twice the forward work.
FORWARD_BACKWARD_FACTOR = 3


@dataclass(frozen=True)
class ModelSpec:
    """A BERT-style encoder: `layers` blocks of self-attention plus a feed-forward network.

    FLOPs cover the encoder layers only: the embedding lookup is a gather (no multiplies), and
    the MLM head runs on the masked ~15 % of tokens only (about 1.5 % of BERT-large's FLOPs).
    """

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int = 30522
    max_positions: int = 512
    name: str = "custom"

    def __post_init__(self):
        for field in ("layers", "hidden", "heads", "ffn", "vocab", "max_positions"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(f"model dimension `{field}` must be a positive whole number, found {value!r}")
        if self.hidden % self.heads:
            raise InputError(f"model `hidden` ({self.hidden}) must be divisible by `heads` ({self.heads})")

    @property
    def forward_linear_flops_per_token(self) -> int:
        """Forward FLOPs of one token through QKV (3 h^2), the output projection (h^2) and the FFN (2 h f)."""
        multiply_accumulates = 4 * self.hidden**2 + 2 * self.hidden * self.ffn
        return self.layers * FLOPS_PER_MULTIPLY_ACCUMULATE * multiply_accumulates

    @property
    def forward_attention_flops_per_token_squared(self) -> int:
        """Forward FLOPs of QK^T and attention x V per squared sequence length (h each, summed over heads)."""
        return self.layers * FLOPS_PER_MULTIPLY_ACCUMULATE * 2 * self.hidden

    @property
    def linear_flops_per_token(self) -> int:
        """Training (forward + backward) FLOPs of the per-token dense layers."""
        return FORWARD_BACKWARD_FACTOR * self.forward_linear_flops_per_token

    @property
    def attention_flops_per_token_squared(self) -> int:
        """Training FLOPs of attention per squared length: a sequence of L tokens costs this x L^2."""
        return FORWARD_BACKWARD_FACTOR * self.forward_attention_flops_per_token_squared

    def sequence_training_flops(self, lengths) -> np.ndarray:
        """Training FLOPs of each sequence (array of lengths, each processed without padding)."""
        lengths = np.asarray(lengths, dtype=np.float64)
        return self.linear_flops_per_token * lengths + self.attention_flops_per_token_squared * lengths**2

    def training_flops(self, lengths) -> float:
        """Total training FLOPs of a set of sequences processed without padding."""
        return float(self.sequence_training_flops(lengths).sum())

    @property
    def parameters(self) -> int:
        """Trainable parameters, pooler and MLM head (decoder tied to the embeddings) included."""
        h, f = self.hidden, self.ffn
        embeddings = (self.vocab + self.max_positions + 2) * h + 2 * h  # two token types, LayerNorm
        attention = 4 * h * h + 4 * h + 2 * h  # QKV + output weights and biases, LayerNorm
        feed_forward = 2 * h * f + f + h + 2 * h
        pooler = h * h + h
        mlm_head = h * h + h + 2 * h + self.vocab  # transform, LayerNorm, decoder bias
        return embeddings + self.layers * (attention + feed_forward) + pooler + mlm_head


MODEL_PRESETS: dict[str, ModelSpec] = {
    "bert-base": ModelSpec(layers=12, hidden=768, heads=12, ffn=3072, name="bert-base"),
    "bert-large": ModelSpec(layers=24, hidden=1024, heads=16, ffn=4096, name="bert-large"),
    # Small enough for a CPU torch run to time in seconds (used by calibration).
    "tiny": ModelSpec(layers=2, hidden=128, heads=2, ffn=512, name="tiny"),
    "mini": ModelSpec(layers=4, hidden=256, heads=4, ffn=1024, name="mini"),
}

_DIMENSIONS = tuple(field.name for field in fields(ModelSpec) if field.name != "name")


def get_model(name_or_dims: str | ModelSpec | Mapping) -> ModelSpec:
    """A preset by name, a `ModelSpec` as is, or custom dimensions as a mapping.

    A mapping needs `layers`, `hidden`, `heads` and `ffn`; `vocab` and `max_positions` default
    to BERT's (30522, 512).
    """
    if isinstance(name_or_dims, ModelSpec):
        return name_or_dims
    if isinstance(name_or_dims, str):
        if name_or_dims in MODEL_PRESETS:
            return MODEL_PRESETS[name_or_dims]
        raise InputError(f"unknown model {name_or_dims!r}; presets: {', '.join(MODEL_PRESETS)} "
                         f"(or give dimensions {', '.join(_DIMENSIONS)})")
    if isinstance(name_or_dims, Mapping):
        unknown = sorted(set(name_or_dims) - set(_DIMENSIONS) - {"name"})
        if unknown:
            raise InputError(f"unknown model dimension(s) {', '.join(unknown)}; allowed: {', '.join(_DIMENSIONS)}")
        missing = [key for key in ("layers", "hidden", "heads", "ffn") if key not in name_or_dims]
        if missing:
            raise InputError(f"model dimensions are missing {', '.join(missing)}")
        return ModelSpec(**dict(name_or_dims))
    raise InputError(f"a model is a preset name or a mapping of dimensions, found {type(name_or_dims).__name__}")
