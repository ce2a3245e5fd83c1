"""Transformer dimensions (BERT-style encoders and causal decoders) and the training FLOPs and parameters they imply.

    >>> from simbench.costmodels.model import get_model
    >>> bert = get_model("bert-large")
    >>> round(bert.training_flops([512]) / 1e12, 3), round(bert.parameters / 1e6)
    (1.005, 336)
    >>> llama = get_model("llama-3.1-8b")
    >>> round(llama.parameters / 1e9, 2), round(llama.training_flops([8192]) / 8192 / 1e9, 1)
    (8.03, 51.5)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Literal

import numpy as np

from simbench.errors import InputError
from simbench.registry import Registry
from simbench.validation import check_whole_number

FLOPS_PER_MULTIPLY_ACCUMULATE = 2
# Backward computes gradients for both the activations and the weights: twice the forward work.
FORWARD_BACKWARD_FACTOR = 3

FAMILIES = ("encoder", "decoder")
POSITIONS = ("learned", "rotary")
BIASES = ("all", "qkv", "none")
NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class ModelSpec:
    """A transformer: `layers` blocks of self-attention plus a feed-forward network.

    family "encoder" (BERT): bidirectional attention; FLOPs cover the layers only, since the
    embedding lookup is a gather and the MLM head runs on the masked ~15 % of tokens (about 1.5 %
    of BERT-large's FLOPs); parameters include token types, pooler and MLM head.
    family "decoder" (GPT, Llama): causal attention, priced as a causal kernel (flash attention)
    computes it, half the score matrix; an LM head over the vocabulary for every token.
    `kv_heads` below `heads` is grouped-query attention (smaller K and V projections);
    `gated_mlp` a SwiGLU feed-forward of three matrices; rotary positions have no table.
    """

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int = 30522
    max_positions: int = 512
    name: str = "custom"
    family: Literal["encoder", "decoder"] = "encoder"
    kv_heads: int | None = None  # None: as many as `heads` (multi-head attention)
    gated_mlp: bool = False
    positions: Literal["learned", "rotary"] = "learned"
    tied_embeddings: bool = True  # decoders: LM head shares the input embedding matrix
    biases: Literal["all", "qkv", "none"] = "all"  # which linear layers carry a bias
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"

    def __post_init__(self):
        for field in ("layers", "hidden", "heads", "ffn", "vocab", "max_positions"):
            check_whole_number(getattr(self, field), f"model dimension `{field}`", minimum=1)
        if self.kv_heads is not None:
            check_whole_number(self.kv_heads, "model dimension `kv_heads`", minimum=1)
            if self.heads % self.kv_heads:
                raise InputError(f"model `heads` ({self.heads}) must be a multiple of `kv_heads` ({self.kv_heads})")
        if self.hidden % self.heads:
            raise InputError(f"model `hidden` ({self.hidden}) must be divisible by `heads` ({self.heads})")
        for field, allowed in (("family", FAMILIES), ("positions", POSITIONS), ("biases", BIASES), ("norm", NORMS)):
            if getattr(self, field) not in allowed:
                raise InputError(f"model `{field}` must be one of {', '.join(allowed)}, found {getattr(self, field)!r}")
        for field in ("gated_mlp", "tied_embeddings"):
            if not isinstance(getattr(self, field), bool):
                raise InputError(f"model `{field}` must be true or false, found {getattr(self, field)!r}")

    @property
    def is_decoder(self) -> bool:
        return self.family == "decoder"

    def positions_problem(self, max_length: int) -> str | None:
        """Why this model cannot read rows of `max_length` tokens: learned position embeddings end at
        `max_positions` (a row past them has no position to look up); rotary positions have no table, so
        they set no limit here. None when it can."""
        if self.positions != "learned" or max_length <= self.max_positions:
            return None
        return (f"{self.name} has {self.max_positions:,} learned positions, fewer than the {max_length:,} tokens "
                f"of a row (dataset max length); name a model with that many positions or rotary ones (e.g. "
                f"llama-3.1-8b), or a max_length up to {self.max_positions:,}")

    @property
    def kv_hidden(self) -> int:
        """Width of the K and V projections: kv_heads x head size."""
        return (self.kv_heads or self.heads) * (self.hidden // self.heads)

    @property
    def forward_linear_flops_per_token(self) -> int:
        """Forward FLOPs of one token through Q, K, V and the output projection, the FFN and (decoders) the LM head."""
        h = self.hidden
        attention = 2 * h * h + 2 * h * self.kv_hidden
        feed_forward = (3 if self.gated_mlp else 2) * h * self.ffn
        lm_head = h * self.vocab if self.is_decoder else 0
        return FLOPS_PER_MULTIPLY_ACCUMULATE * (self.layers * (attention + feed_forward) + lm_head)

    @property
    def forward_attention_flops_per_token_squared(self) -> int | float:
        """Forward FLOPs of QK^T and attention x V per squared sequence length (h each, summed over heads).

        A causal kernel skips the masked upper triangle: half the pairs (L^2 / 2, the accounting of
        flash attention's causal mode; the diagonal's extra L / 2 pairs are left out).
        """
        full = self.layers * FLOPS_PER_MULTIPLY_ACCUMULATE * 2 * self.hidden
        return full / 2 if self.is_decoder else full

    @property
    def linear_flops_per_token(self) -> int:
        """Training (forward + backward) FLOPs of the per-token dense layers."""
        return FORWARD_BACKWARD_FACTOR * self.forward_linear_flops_per_token

    @property
    def attention_flops_per_token_squared(self) -> int | float:
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
    def parameters_per_layer(self) -> int:
        """Trainable parameters of one block: attention (Q, K, V, output), feed-forward, their norms and biases."""
        h, f = self.hidden, self.ffn
        norm = 2 * h if self.norm == "layernorm" else h
        attention_biases = {"all": 2 * h + 2 * self.kv_hidden, "qkv": h + 2 * self.kv_hidden, "none": 0}[self.biases]
        attention = 2 * h * h + 2 * h * self.kv_hidden + attention_biases + norm
        matrices = 3 if self.gated_mlp else 2
        feed_forward = matrices * h * f + ((matrices - 1) * f + h if self.biases == "all" else 0) + norm
        return attention + feed_forward

    @property
    def parameters(self) -> int:
        """Trainable parameters: encoders with pooler and MLM head (decoder tied to the embeddings),
        decoders with the final norm and the LM head (unless tied)."""
        h = self.hidden
        norm = 2 * h if self.norm == "layernorm" else h
        positions = self.max_positions * h if self.positions == "learned" else 0
        layers = self.layers * self.parameters_per_layer
        if self.is_decoder:
            lm_head = 0 if self.tied_embeddings else self.vocab * h
            return self.vocab * h + positions + layers + norm + lm_head
        embeddings = (self.vocab + 2) * h + positions + norm  # two token types, LayerNorm
        pooler = h * h + h
        mlm_head = h * h + h + norm + self.vocab  # transform, LayerNorm, decoder bias
        return embeddings + layers + pooler + mlm_head


def _decoder(name: str, **dimensions) -> ModelSpec:
    return ModelSpec(name=name, family="decoder", **dimensions)


# Llama-style decoders: SwiGLU, rotary positions, RMSNorm, no biases, untied LM head.
_LLAMA_STYLE = dict(gated_mlp=True, positions="rotary", tied_embeddings=False, biases="none", norm="rmsnorm")

MODEL_PRESETS: Registry[ModelSpec] = Registry("model preset", {
    "bert-base": ModelSpec(layers=12, hidden=768, heads=12, ffn=3072, name="bert-base"),
    "bert-large": ModelSpec(layers=24, hidden=1024, heads=16, ffn=4096, name="bert-large"),
    # Small enough for a CPU torch run to time in seconds (used by calibration).
    "tiny": ModelSpec(layers=2, hidden=128, heads=2, ffn=512, name="tiny"),
    "mini": ModelSpec(layers=4, hidden=256, heads=4, ffn=1024, name="mini"),
    # A Llama-shaped decoder as small as `tiny` (grouped-query attention, SwiGLU, RMSNorm, rotary positions):
    # what `simbench measure` times on a CPU for a decoder scenario. Its vocabulary is small because a
    # decoder's LM head runs on every token and is priced with the model's vocabulary.
    "tiny-decoder": _decoder("tiny-decoder", layers=2, hidden=128, heads=4, kv_heads=2, ffn=352, vocab=1024,
                             max_positions=2048, **_LLAMA_STYLE),
    # Decoders: the values of each model card's config.json on huggingface.co.
    # openai-community/gpt2: n_layer 12, n_embd 768, n_head 12, n_inner null (4 x 768), n_positions 1024,
    # vocab_size 50257; GELU MLP, learned positions, LayerNorm, biases everywhere, LM head tied (124M).
    "gpt2": _decoder("gpt2", layers=12, hidden=768, heads=12, ffn=3072, vocab=50257, max_positions=1024),
    # meta-llama/Llama-3.1-8B: num_hidden_layers 32, hidden_size 4096, num_attention_heads 32,
    # num_key_value_heads 8, intermediate_size 14336, vocab_size 128256, max_position_embeddings 131072 (8.03B).
    "llama-3.1-8b": _decoder("llama-3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                             vocab=128256, max_positions=131072, **_LLAMA_STYLE),
    # meta-llama/Llama-3.1-70B: num_hidden_layers 80, hidden_size 8192, num_attention_heads 64,
    # num_key_value_heads 8, intermediate_size 28672, vocab_size 128256, max_position_embeddings 131072 (70.6B).
    "llama-3.1-70b": _decoder("llama-3.1-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                              vocab=128256, max_positions=131072, **_LLAMA_STYLE),
    # meta-llama/Llama-3.1-405B config.json: num_hidden_layers 126, hidden_size 16384, num_attention_heads 128,
    # num_key_value_heads 8, intermediate_size 53248, vocab_size 128256, max_position_embeddings 131072 (406B).
    "llama-3.1-405b": _decoder("llama-3.1-405b", layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248,
                               vocab=128256, max_positions=131072, **_LLAMA_STYLE),
    # mistralai/Mistral-7B-v0.3: num_hidden_layers 32, hidden_size 4096, num_attention_heads 32,
    # num_key_value_heads 8, intermediate_size 14336, vocab_size 32768, max_position_embeddings 32768,
    # sliding_window null (v0.1's 4,096-token window is gone in v0.3) (7.25B).
    "mistral-7b": _decoder("mistral-7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                           vocab=32768, max_positions=32768, **_LLAMA_STYLE),
    # Qwen/Qwen2.5-7B: num_hidden_layers 28, hidden_size 3584, num_attention_heads 28, num_key_value_heads 4,
    # intermediate_size 18944, vocab_size 152064, max_position_embeddings 131072, biases on Q, K and V only
    # (7.61B, 6.53B without embeddings, as its model card states).
    "qwen2.5-7b": _decoder("qwen2.5-7b", layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=152064,
                           max_positions=131072, **{**_LLAMA_STYLE, "biases": "qkv"}),
})

_DIMENSIONS = tuple(field.name for field in fields(ModelSpec) if field.name != "name")
_REQUIRED = ("layers", "hidden", "heads", "ffn")


def get_model(name_or_dims: str | ModelSpec | Mapping) -> ModelSpec:
    """A preset by name, a `ModelSpec` as is, or custom dimensions as a mapping.

    A mapping needs `layers`, `hidden`, `heads` and `ffn`; the other fields default to BERT's
    (an encoder with a 30522-token vocabulary and 512 learned positions).
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
        missing = [key for key in _REQUIRED if key not in name_or_dims]
        if missing:
            raise InputError(f"model dimensions are missing {', '.join(missing)}")
        return ModelSpec(**dict(name_or_dims))
    raise InputError(f"a model is a preset name or a mapping of dimensions, found {type(name_or_dims).__name__}")
