"""Times a slice of a decoder LLM (a few of its layers, bfloat16 on CUDA) on rows of several lengths
and fits the two rates the cost model prices it with: dense-layer and causal-attention FLOP/s.

The longest length is held out of the fit and predicted from the others, so the reported error is
measured on a length the rates were not fitted to. Packed rows (several documents per row, causal
attention within each, through torch's variable-length flash attention where it exists) are then
predicted from the fitted rates and compared with their own timing.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from simbench.calibrate.kernels import flex_attention
from simbench.calibrate.timing import check_timed_work
from simbench.costmodels.hardware import HardwareProfile
from simbench.costmodels.model import ModelSpec
from simbench.errors import InputError

DEFAULT_LENGTHS = (1024, 2048, 8192, 32768, 131072)
TOKENS_PER_STEP = 8192  # short rows are batched up to this many tokens, so every step fills the GPU
PACKED_DOCUMENTS_PER_ROW = 8  # mean documents per packed row (exponential lengths)


@dataclass(frozen=True)
class SliceTiming:
    """One timed forward + backward pass of the slice over `rows` rows of `lengths`."""

    kind: str  # "causal": one sequence per row; "packed": documents in one row, causal within each
    lengths: tuple[int, ...]  # the sequences (documents) the pass attends within
    seconds: float
    spread_fraction: float  # inter-quartile range over the median of the repeats
    linear_flops: float
    attention_flops: float

    def predicted_seconds(self, linear_flops_per_s: float, attention_flops_per_s: float) -> float:
        return self.linear_flops / linear_flops_per_s + self.attention_flops / attention_flops_per_s


@dataclass(frozen=True)
class DecoderCalibration:
    """Fitted rates, the held-out check and every timing they come from."""

    model: str
    layers: int
    device_name: str
    torch_version: str
    precision: str
    causal: tuple[SliceTiming, ...]
    packed: tuple[SliceTiming, ...]
    linear_flops_per_s: float  # fitted on every causal length
    attention_flops_per_s: float
    held_out_length: int
    held_out_error: float  # relative error of the held-out length, predicted from rates fitted without it

    def errors(self) -> list[dict]:
        """Measured against predicted seconds for every timing (causal ones fitted, packed predicted)."""
        rows = []
        for timing in (*self.causal, *self.packed):
            predicted = timing.predicted_seconds(self.linear_flops_per_s, self.attention_flops_per_s)
            rows.append({"kind": timing.kind, "row_tokens": sum(timing.lengths), "sequences": len(timing.lengths),
                         "longest": max(timing.lengths), "measured_seconds": timing.seconds,
                         "predicted_seconds": predicted, "error": predicted / timing.seconds - 1,
                         "spread": timing.spread_fraction, "fitted": timing.kind == "causal"})
        return rows


def calibration_record(calibration: DecoderCalibration) -> dict:
    """The calibration as JSON-ready data: every timing with its sequence lengths, so the fit can be redone."""
    record = {field: getattr(calibration, field) for field in
              ("model", "layers", "device_name", "torch_version", "precision", "linear_flops_per_s",
               "attention_flops_per_s", "held_out_length", "held_out_error")}
    record["timings"] = [{"kind": timing.kind, "lengths": list(timing.lengths), "seconds": timing.seconds,
                          "spread_fraction": timing.spread_fraction}
                         for timing in (*calibration.causal, *calibration.packed)]
    return record


def decoder_profile(calibration: DecoderCalibration, base: HardwareProfile) -> HardwareProfile:
    """`base` with the measured dense-layer and attention rates, and the raw timings under `calibration`."""
    return base.model_copy(update={
        "name": f"{base.name} calibrated",
        "source": (f"simbench calibrate-decoder: {calibration.layers} layer(s) of {calibration.model} on "
                   f"{calibration.device_name}, torch {calibration.torch_version}, {calibration.precision}; "
                   f"dense layers {calibration.linear_flops_per_s / 1e12:.1f} TFLOP/s, causal attention "
                   f"{calibration.attention_flops_per_s / 1e12:.1f} TFLOP/s (the {calibration.held_out_length:,}-token "
                   f"step predicted within {calibration.held_out_error:+.1%} without it). Every other field from "
                   f"{base.name}: {base.source}"),
        "linear_flops_per_s": calibration.linear_flops_per_s,
        "attention_flops_per_s": calibration.attention_flops_per_s,
        "calibration": calibration_record(calibration),
    })


def refit_record(record: dict) -> DecoderCalibration:
    """Redo a stored calibration's fit from its raw timings (FLOPs recomputed from the lengths)."""
    from simbench.costmodels.model import MODEL_PRESETS

    model, layers = MODEL_PRESETS[record["model"]], record["layers"]
    timings = {"causal": [], "packed": []}
    for timing in record["timings"]:
        linear, attention = slice_flops(model, layers, timing["lengths"])
        timings[timing["kind"]].append(SliceTiming(timing["kind"], tuple(timing["lengths"]), timing["seconds"],
                                                   timing["spread_fraction"], linear, attention))
    calibration = fit_decoder_rates(model, layers, timings["causal"], timings["packed"], record["device_name"],
                                    getattr(torch, record["precision"]))
    return dataclasses.replace(calibration, torch_version=record["torch_version"])


def slice_flops(model: ModelSpec, layers: int, lengths: Sequence[int]) -> tuple[float, float]:
    """Training FLOPs (linear, attention) of `layers` of `model` over sequences of `lengths`; the LM
    head and embeddings are outside the slice and cancel out of the difference of two depths."""
    lengths = np.asarray(lengths, dtype=np.float64)
    deeper = dataclasses.replace(model, layers=layers + 1)
    one = dataclasses.replace(model, layers=1)
    linear = (deeper.linear_flops_per_token - one.linear_flops_per_token) * lengths.sum()
    attention = dataclasses.replace(model, layers=layers).attention_flops_per_token_squared * (lengths**2).sum()
    return float(linear), float(attention)


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer: RMSNorm, grouped-query causal attention, SwiGLU (or GELU) MLP. Rotary
    positions are left out: elementwise work, small beside the matrix products timed here."""

    def __init__(self, model: ModelSpec):
        super().__init__()
        self.heads, self.kv_heads = model.heads, model.kv_heads or model.heads
        self.head_dim = model.hidden // model.heads
        self.attention_norm = nn.RMSNorm(model.hidden)
        self.qkv = nn.Linear(model.hidden, model.hidden + 2 * model.kv_hidden, bias=False)
        self.output = nn.Linear(model.hidden, model.hidden, bias=False)
        self.mlp_norm = nn.RMSNorm(model.hidden)
        self.gated = model.gated_mlp
        self.up = nn.Linear(model.hidden, (2 if self.gated else 1) * model.ffn, bias=False)
        self.down = nn.Linear(model.ffn, model.hidden, bias=False)

    def forward(self, x: torch.Tensor, documents: torch.Tensor | None = None, longest: int = 0,
                mask: torch.Tensor | None = None, real_slots: torch.Tensor | None = None,
                block_mask=None, kernel: str | None = None) -> torch.Tensor:
        """`x` is (rows, length, hidden). Attention is causal over each row, or under `mask` (True = may
        attend) or FlexAttention's `block_mask` instead, or, given `documents` (offsets of the documents laid end
        to end), causal within each document with the varlen `kernel` (None: torch's where this device has it):
        over every slot, or over the `real_slots` alone (the other slots get no context)."""
        x = x + self.output(self._attention(self.attention_norm(x), documents, longest, mask, real_slots, block_mask,
                                            kernel))
        up = self.up(self.mlp_norm(x))
        if self.gated:
            gate, up = up.chunk(2, dim=-1)
            up = F.silu(gate) * up
        hidden = up if self.gated else F.gelu(up)
        return x + self.down(hidden)

    def _attention(self, x: torch.Tensor, documents: torch.Tensor | None, longest: int,
                   mask: torch.Tensor | None = None, real_slots: torch.Tensor | None = None,
                   block_mask=None, kernel: str | None = None) -> torch.Tensor:
        rows, length, _ = x.shape
        q, k, v = self.qkv(x).split([self.heads * self.head_dim, *2 * [self.kv_heads * self.head_dim]], dim=-1)
        if documents is None:
            q, k, v = (part.view(rows, length, -1, self.head_dim).transpose(1, 2) for part in (q, k, v))
            if block_mask is not None:
                out = flex_attention(q, k, v, block_mask, enable_gqa=self.kv_heads != self.heads)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                                     enable_gqa=self.kv_heads != self.heads)
            return out.transpose(1, 2).reshape(x.shape)
        q, k, v = (part.reshape(rows * length, -1, self.head_dim) for part in (q, k, v))
        if real_slots is not None:
            q, k, v = (part.index_select(0, real_slots) for part in (q, k, v))
        if kernel is None:
            kernel = "torch_varlen" if varlen_attention_available(x.device) else "grouped"
        if kernel == "flash_varlen":  # grouped-query heads as they are: the kernel shares k and v across heads
            from flash_attn import flash_attn_varlen_func

            out = flash_attn_varlen_func(q, k, v, documents, documents, longest, longest, causal=True)
            if real_slots is not None:
                out = out.new_zeros(rows * length, *out.shape[1:]).index_copy(0, real_slots, out)
            return out.reshape(x.shape)
        k, v = (part.repeat_interleave(self.heads // self.kv_heads, dim=1) for part in (k, v))
        if kernel == "grouped":
            out = _grouped_causal_attention(q, k, v, documents)
        else:
            from torch.nn.attention.varlen import varlen_attn

            out = varlen_attn(q, k, v, documents, documents, longest, longest, window_size=(-1, 0))
        if real_slots is not None:
            out = out.new_zeros(rows * length, *out.shape[1:]).index_copy(0, real_slots, out)
        return out.reshape(x.shape)


def _grouped_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              offsets: torch.Tensor) -> torch.Tensor:
    """Causal attention within each document of (tokens, heads, head size) tensors, one call per group of
    equal-length documents: where no variable-length kernel exists (the CPU)."""
    bounds = offsets.cpu().numpy()
    lengths = np.diff(bounds)
    out = torch.empty_like(q)
    for length in np.unique(lengths):
        starts = bounds[:-1][lengths == length]
        index = torch.from_numpy((starts[:, None] + np.arange(length)[None, :]).reshape(-1)).to(q.device)
        grouped = [part.index_select(0, index).view(starts.size, int(length), *part.shape[1:]).transpose(1, 2)
                   for part in (q, k, v)]
        context = F.scaled_dot_product_attention(*grouped, is_causal=True)
        out.index_copy_(0, index, context.transpose(1, 2).reshape(-1, *q.shape[1:]))
    return out


def varlen_attention_available(device: torch.device) -> bool:
    """Packed rows need torch's variable-length flash attention with a causal window (CUDA only)."""
    if device.type != "cuda":
        return False
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return False
    return "window_size" in inspect.signature(varlen_attn).parameters


def calibrate_decoder(model: ModelSpec, layers: int = 2, lengths: Sequence[int] = DEFAULT_LENGTHS,
                      device: str = "cuda", seed: int = 0, warmup: int = 2, repeats: int = 5,
                      tokens_per_step: int = TOKENS_PER_STEP,
                      progress: Callable[[], None] = lambda: None) -> DecoderCalibration:
    """Time the slice (`time_decoder_slice`) and fit its two rates (`fit_decoder_rates`)."""
    try:
        target = torch.device(device)
    except RuntimeError:
        raise InputError(f"unknown device {device!r}: cpu, cuda or cuda:N") from None
    if target.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {device}: this torch ({torch.__version__}) sees no CUDA GPU; use --device cpu "
                         f"for a small model, or run on a machine with a GPU and a CUDA build of torch")
    causal, packed = time_decoder_slice(model, layers, lengths, target, seed, warmup, repeats, tokens_per_step,
                                        progress)
    dtype = _precision(target)
    return fit_decoder_rates(model, layers, causal, packed, _device_name(target), dtype)


def time_decoder_slice(model: ModelSpec, layers: int, lengths: Sequence[int], device: torch.device, seed: int = 0,
                       warmup: int = 2, repeats: int = 5, tokens_per_step: int = TOKENS_PER_STEP,
                       progress: Callable[[], None] = lambda: None) -> tuple[tuple[SliceTiming, ...], ...]:
    """Causal rows at each length (short ones batched up to `tokens_per_step` tokens) and, where the
    device has a variable-length causal kernel, one packed row per length of at least that many."""
    if not model.is_decoder:
        raise InputError(f"model {model.name} is an encoder: `simbench calibrate` times encoders")
    lengths = sorted({int(length) for length in lengths if length <= model.max_positions})
    if len(lengths) < 3:
        raise InputError(f"need at least 3 lengths within the model's {model.max_positions:,} positions to fit two "
                         f"rates and hold one out, found {lengths}")
    rows = {length: max(1, tokens_per_step // length) for length in lengths}
    # Causal rows at every length, and a packed row at the long ones: counted as if both ran at every length.
    flops = 2 * (warmup + repeats) * sum(rows[length] * sum(slice_flops(model, layers, [length])) for length in lengths)
    check_timed_work(flops, device, f"timing {layers} layers of {model.name} at lengths {lengths[0]:,}-{lengths[-1]:,}",
                     "time fewer --layers, shorter --lengths or fewer --repeats, or use a GPU")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    dtype = _precision(device)
    slice_ = nn.ModuleList(DecoderLayer(model) for _ in range(layers)).to(device, dtype)

    def time_rows(kind: str, documents: list[list[int]]) -> SliceTiming:
        row_length = sum(documents[0])
        x = torch.randn(len(documents), row_length, model.hidden, device=device, dtype=dtype, requires_grad=True)
        offsets = None
        if kind == "packed":
            offsets = torch.tensor(np.concatenate([[0], np.cumsum(documents[0])]), device=device, dtype=torch.int32)
        longest = max(max(row) for row in documents)

        def step() -> None:
            y = x
            for layer in slice_:
                y = layer(y, offsets, longest)
            y.float().square().mean().backward()

        samples = _timed(step, device, warmup, repeats)
        progress()
        everything = [length for row in documents for length in row]
        linear, attention = slice_flops(model, layers, everything)
        low, median, high = np.percentile(samples, [25, 50, 75])
        return SliceTiming(kind, tuple(everything), float(median), float((high - low) / median), linear, attention)

    causal = tuple(time_rows("causal", [[length]] * rows[length]) for length in lengths)
    packed = ()
    if varlen_attention_available(device):
        packed = tuple(time_rows("packed", [_documents(length, rng)]) for length in lengths
                       if length >= tokens_per_step)
    return causal, packed


def fit_decoder_rates(model: ModelSpec, layers: int, causal: Sequence[SliceTiming], packed: Sequence[SliceTiming],
                      device_name: str, dtype: torch.dtype) -> DecoderCalibration:
    """Rates fitted on every causal timing, and the error of the longest predicted from the others."""
    longest = max(causal, key=lambda timing: max(timing.lengths))
    held_in = [timing for timing in causal if timing is not longest]
    linear, attention = _fit_rates(held_in)
    held_out_error = longest.predicted_seconds(linear, attention) / longest.seconds - 1
    linear, attention = _fit_rates(causal)
    return DecoderCalibration(model.name, layers, device_name, str(torch.__version__), str(dtype).removeprefix("torch."),
                              tuple(causal), tuple(packed), linear, attention, max(longest.lengths),
                              float(held_out_error))


def _fit_rates(timings: Sequence[SliceTiming]) -> tuple[float, float]:
    # Least squares on relative error: each length counts alike however long its step.
    flops = np.array([[timing.linear_flops, timing.attention_flops] for timing in timings])
    seconds = np.array([timing.seconds for timing in timings])
    from scipy.optimize import nnls

    inverse_rates, _ = nnls(flops / seconds[:, None], np.ones(len(timings)))
    if np.any(inverse_rates <= 0):
        raise InputError("the timings do not separate dense-layer from attention cost (one fitted rate is "
                         "infinite): time longer rows, e.g. add --lengths up to the model's context")
    return float(1 / inverse_rates[0]), float(1 / inverse_rates[1])


def _documents(row_length: int, rng: np.random.Generator) -> list[int]:
    """Document lengths filling one row exactly: `PACKED_DOCUMENTS_PER_ROW` pieces cut at uniform random
    points (near-exponential lengths, as documents of a pre-training corpus cut into rows)."""
    cuts = np.sort(rng.choice(np.arange(1, row_length), size=PACKED_DOCUMENTS_PER_ROW - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [row_length]])).tolist()


def _timed(step: Callable[[], None], device: torch.device, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        samples.append(time.perf_counter() - start)
    return samples


def _precision(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32  # as GPU training runs; CPUs lack fast bf16


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
