"""Which torch kernel runs each attention implementation on a device, so that a timing run runs what is priced.

    >>> from simbench.costmodels.base import ExecutionMode
    >>> row_mask(ExecutionMode.PADDED), row_mask(ExecutionMode.PACKED_DENSE_MASK)
    ('none', 'dense')

Rows (`row`, `dense-mask`, `block-mask`) run SDPA with no mask, SDPA with a dense mask, or FlexAttention with a
document block mask; per-sequence attention (`varlen`: packed-varlen, un-padding) runs flash-attn's varlen
kernel where the package is installed, else torch's own (`torch.nn.attention.varlen`), else one call per group of
equal lengths. Jagged nested tensors are run only when asked for by name.
"""

from __future__ import annotations

import inspect

from simbench.costmodels.base import ExecutionMode
from simbench.errors import InputError

# How a batch's rows are masked, by the mode it runs in: `none` one attention over the whole row (padding and
# packed documents included, causal for a decoder), `dense` a block-diagonal (or padding) mask as a dense
# tensor, `block` FlexAttention's document block mask.
ROW_MASKS = {ExecutionMode.PADDED: "none", ExecutionMode.SORTED: "none", ExecutionMode.PACKED_DENSE_MASK: "dense",
             ExecutionMode.PACKED_BLOCK_MASK: "block"}


def row_mask(mode: ExecutionMode) -> str:
    """How rows run in `mode` (ROW_MASKS); per-sequence modes have none."""
    return ROW_MASKS.get(ExecutionMode(mode), "none")


def flash_attn_installed() -> bool:
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


def torch_varlen_available(causal: bool) -> bool:
    """Whether this torch has `varlen_attn` (and, for a decoder, its causal window)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return False
    return not causal or "window_size" in inspect.signature(varlen_attn).parameters


def per_sequence_kernel(device: str, causal: bool) -> str:
    """The varlen kernel a CUDA device runs per sequence (flash-attn, else torch's), else `grouped` (the CPU, or
    a torch without one): the kernels trainers run (flash_attention_2, Megatron-LM's THD format)."""
    if not str(device).startswith("cuda"):
        return "grouped"
    if flash_attn_installed():
        return "flash_varlen"
    return "torch_varlen" if torch_varlen_available(causal) else "grouped"


def block_mask_refusal(device: str) -> str | None:
    """Why `block-mask` rows cannot be timed on `device` (None: they can): FlexAttention has no backward pass on a
    CPU, and an older torch has none at all."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return "this torch has no FlexAttention (torch.nn.attention.flex_attention)"
    if not str(device).startswith("cuda"):
        return "FlexAttention has no backward pass on a CPU: block-mask rows are timed on CUDA"
    return None


def check_runnable(mode: ExecutionMode, device: str) -> None:
    """Refuse, with the reason, batches of `mode` the device cannot train on as priced."""
    if row_mask(mode) == "block" and block_mask_refusal(device):
        raise InputError(block_mask_refusal(device))


def document_block_mask(row_sequence_ids, causal: bool):
    """FlexAttention's block mask for rows of documents (ids 1, 2, ... per row; 0 padding): a token attends to its
    own document (earlier tokens only, `causal`); padding attends to nothing, so its blocks are skipped."""
    from torch.nn.attention.flex_attention import create_block_mask

    ids = row_sequence_ids

    def same_document(batch, head, query, key):
        same = (ids[batch, query] == ids[batch, key]) & (ids[batch, query] > 0)
        return same & (query >= key) if causal else same

    rows, length = ids.shape
    return create_block_mask(same_document, rows, None, length, length, device=ids.device)


_COMPILED_FLEX = {}


def flex_attention(query, key, value, block_mask, enable_gqa: bool = False):
    """FlexAttention under torch.compile on CUDA (as trainers run it: eager FlexAttention is a reference
    implementation, many times slower), eager elsewhere."""
    from torch.nn.attention.flex_attention import flex_attention as eager

    if query.device.type != "cuda":
        return eager(query, key, value, block_mask=block_mask, enable_gqa=enable_gqa)
    if "cuda" not in _COMPILED_FLEX:
        import torch

        # One compilation per shape (dynamic=False, as trainers with fixed packed rows run it): a grid and a
        # measurement meet more shapes in one process than dynamo's default 8, past which it would run eager.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        _COMPILED_FLEX["cuda"] = torch.compile(eager, dynamic=False)
    return _COMPILED_FLEX["cuda"](query, key, value, block_mask=block_mask, enable_gqa=enable_gqa)
