"""The hardware profile's schema: every parameter the cost models use to price a step on one device, the
physical range each may take, and the profile written back as YAML or listed by where its values come from.

The presets and the loading of a profile by name or file are in `simbench.costmodels.hardware`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


# Where infinity means "no limit" (a transfer or a link that costs nothing), it is the default and allowed.
UNLIMITED_FIELDS = ("host_to_device_bytes_per_s", "allreduce_bytes_per_s", "intra_node_bytes_per_s")
# What no device has, by the kind of quantity a field's name says; a value past these is a typo (1e308 s,
# 1e-300 B/s) and, multiplied into a step's price or divided into it, overflows to inf or NaN downstream.
# The highest FLOP/s a profile may state; a fit whose work costs nothing measurable is given this rate.
MAX_FLOPS_PER_S = 1e21
_PHYSICAL_RANGES = (  # (name ends with or holds, highest value, what it counts)
    ("flops_per_s", MAX_FLOPS_PER_S, "FLOP/s (a zettaFLOP/s is beyond any device)"),
    ("bytes_per_s", 1e18, "bytes/s (an exabyte/s is beyond any link; write .inf for no limit)"),
    ("seconds", 86_400.0, "seconds (a day)"),
    ("tokens", 2.0**40, "tokens"),
    ("width", 2.0**40, "model widths"),
    ("efficiency", 1.0, "(a factor)"),
    ("fraction", 1e3, "(a factor)"),
    ("noise_cv", 10.0, "(a coefficient of variation)"),
    ("bytes_per", 2.0**20, "bytes"),
    ("per_layer", 2.0**20, "kernels"),
    ("per_stage", 2.0**20, "layers"),
    ("samples", 2.0**30, "samples"),
    ("per_node", 2.0**20, "devices"),
    ("boundaries", 2.0**40, "tokens"),
    ("capacity_bytes", 2.0**50, "bytes (a pebibyte of memory on one device)"),
)
# Measured: Llama-3.1-8B x 2 layers, 2 x 8,192 tokens on an H200 (shared measurements h200-2026-11-28,
# `simbench measure llama8b-sft-8k --device cuda`): whole-row packs under a dense block-diagonal mask 283 ms a step,
# padded rows of the same shape 191 ms. The 92 ms more falls on attention, which the h200 profile prices at 15.1 ms
# for that shape: 15.1 / (15.1 + 92) of the flash rate (the full row computed, the causal half not skipped).
DENSE_MASK_ATTENTION_FRACTION = 0.1408
# Assumed, not measured: PyTorch's FlexAttention announcement reports about 90 % of FlashAttention-2's forward
# and 85 % of its backward throughput on the blocks it computes.
BLOCK_MASK_ATTENTION_FRACTION = 0.85
# Where a field's default comes from, when its default is not a mere choice (a profile that sets another value
# without saying where it comes from states a choice).
DEFAULT_PROVENANCE = {
    "dense_mask_attention_fraction": "measured: a dense block-diagonal mask on an H200, Llama-3.1-8B x 2 layers, "
                                     "2 x 8,192 (283 ms vs 191 ms padded rows of the same shape)",
    "block_mask_attention_fraction": "assumed, not measured: FlexAttention at ~85-90 % of FlashAttention-2 "
                                     "(PyTorch's FlexAttention announcement)",
    "per_document_attention": "what GPU trainers run: one varlen kernel over every document (flash-attn's "
                              "flash_attn_varlen_func, torch's varlen_attn)",
}
# Rates and factors that a step's work is divided by: a tiny positive one makes every step last forever.
_LOWEST_DIVISORS = (("bytes_per_s", 1.0, "bytes/s"), ("attention_fraction", 1e-3, "(a factor)"),
                    ("unpadded_flops_fraction", 1e-3, "(a factor)"), ("efficiency", 1e-3, "(a factor)"))


def check_physical(name: str, value: Any) -> Any:
    """`value` of the profile field `name` if a device can have it: finite (infinite only for the links of
    UNLIMITED_FIELDS), within the range its kind allows (_PHYSICAL_RANGES) and, for a divisor, not so small
    that a step never ends (_LOWEST_DIVISORS); else ValueError."""
    numbers = value if isinstance(value, tuple) else (value,)
    for number in numbers:
        if isinstance(number, bool) or not isinstance(number, int | float):
            continue
        if isinstance(number, float) and math.isnan(number):
            raise ValueError("must be a number, found NaN")
        if isinstance(number, float) and math.isinf(number):
            if name in UNLIMITED_FIELDS and number > 0:
                continue
            raise ValueError("must be finite" + (f" (.inf, meaning no limit, is for {', '.join(UNLIMITED_FIELDS)})"
                                                 if "bytes_per_s" in name else ""))
        highest = next((kind for kind in _PHYSICAL_RANGES if kind[0] in name), None)
        if highest is not None and number > highest[1]:
            raise ValueError(f"must be at most {highest[1]:.4g} {highest[2]}")
        lowest = next((kind for kind in _LOWEST_DIVISORS if kind[0] in name), None)
        if lowest is not None and 0 < number < lowest[1]:
            raise ValueError(f"must be at least {lowest[1]:.4g} {lowest[2]}")
    return value


class HardwareProfile(BaseModel):
    """One accelerator and its interconnect, as the cost models see it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    source: str = Field(description="where the numbers come from: a citation, a datasheet or a calibration run")

    # Compute: time = flops / (flops_per_s * tokens / (tokens + half_saturation_tokens))
    # At least a megaflop/s: slower is a typo (1e-300 made every step time infinite and speed-ups null).
    linear_flops_per_s: float = Field(ge=1e6, allow_inf_nan=False,
                                      description="achieved FLOP/s of the per-token dense layers")
    attention_flops_per_s: float = Field(ge=1e6, allow_inf_nan=False,
                                         description="achieved FLOP/s of the attention score/context matmuls")
    half_saturation_tokens: float = Field(0.0, ge=0, description="tokens per kernel at which half the peak is reached")

    # Fixed costs
    kernel_launch_seconds: float = Field(0.0, ge=0, description="launch overhead of one kernel")
    kernels_per_layer: int = Field(0, ge=0, description="kernels per layer in forward + backward")
    step_overhead_seconds: float = Field(0.0, ge=0, description="fixed time per step: optimizer, host, synchronisation")
    optimizer_seconds_per_parameter: float = Field(0.0, ge=0, description="optimizer update time per parameter (memory bound)")
    shape_change_seconds: float = Field(0.0, ge=0, description="cost of a new input shape: recompilation or kernel switch")
    host_to_device_bytes_per_s: float = Field(float("inf"), gt=0, description="input transfer bandwidth")
    input_bytes_per_token: float = Field(16.0, ge=0, description="input bytes per token slot: ids, segments, mask, labels")

    # Eager mode: the host issues every kernel from Python, so a step cannot end before the host has issued
    # them all. layers x kernels per layer x host_seconds_per_kernel is a floor under the step's device time
    # (0: no floor). Variable-length steps launch more kernels (cu_seqlens, varlen attention's own ops).
    host_seconds_per_kernel: float = Field(0.0, ge=0, allow_inf_nan=False,
                                           description="host time to issue one kernel in eager mode: with "
                                           "kernels_per_layer, a floor under every step")
    varlen_kernels_per_layer: int | None = Field(None, ge=0, description="kernels per layer of a step on "
                                                 "variable-length attention (packed-varlen rows, flat batches); "
                                                 "None: kernels_per_layer")
    unpadded_kernels_per_layer: int | None = Field(None, ge=0, description="kernels per layer of an un-padded step, "
                                                   "its gathers and scatters of the real tokens included; None: "
                                                   "varlen_kernels_per_layer")
    # Dense layers of a narrow model run below the rate of a wide one (norms, activations, bias adds are
    # memory-bound and grow with the width, matmuls with its square): rate x width / (width + this).
    dense_half_saturation_width: float = Field(0.0, ge=0, allow_inf_nan=False,
                                               description="model width at which the dense layers reach half "
                                                           "linear_flops_per_s (0: any width at the full rate)")
    # Variable-length attention (flash-attention varlen: packed-varlen and un-padded batches) runs below
    # dense attention at equal work, more so for short documents: a document of d tokens reaches
    # fraction x d / (d + half_length) of attention_flops_per_s, its work rounded up to whole tiles.
    varlen_causal_attention_fraction: float = Field(1.0, gt=0, le=2, allow_inf_nan=False,
                                                    description="varlen causal attention's rate over dense "
                                                                "attention's, for long documents")
    varlen_causal_half_length_tokens: float = Field(0.0, ge=0, allow_inf_nan=False,
                                                    description="document length at which varlen causal "
                                                                "attention reaches half its long-document rate")
    varlen_bidirectional_attention_fraction: float = Field(1.0, gt=0, le=2, allow_inf_nan=False,
                                                           description="varlen bidirectional attention's rate "
                                                                       "over dense attention's, for long documents")
    varlen_bidirectional_half_length_tokens: float = Field(0.0, ge=0, allow_inf_nan=False,
                                                           description="document length at which varlen "
                                                           "bidirectional attention reaches half its rate")
    varlen_tile_tokens: int = Field(0, ge=0, description="query/key tile of the varlen attention kernel: a "
                                    "document's work is rounded up to whole tiles (0: no rounding)")
    # Packs whose documents are isolated by a mask rather than by varlen kernels (a plan's `attention` option).
    dense_mask_attention_fraction: float = Field(DENSE_MASK_ATTENTION_FRACTION, gt=0, le=1, allow_inf_nan=False,
                                                 description="attention's rate under a dense block-diagonal "
                                                 "attn_mask (SDPA off its flash kernel, the whole row computed), "
                                                 "over attention_flops_per_s")
    block_mask_attention_fraction: float = Field(BLOCK_MASK_ATTENTION_FRACTION, gt=0, le=1, allow_inf_nan=False,
                                                 description="FlexAttention's rate on the blocks a document mask "
                                                 "leaves, over attention_flops_per_s")
    # The first step at a batch shape a process has not run before pays for kernel selection and new
    # allocations: once per distinct shape, whatever the number of layers (an 8-layer slice pays it no more than
    # a 1-layer one), by attention path. Which steps pay it is the scenario's `shapes` choice.
    first_sight_padded_seconds: float = Field(0.0, ge=0, allow_inf_nan=False,
                                              description="extra time of the first step at a new rows x length "
                                              "shape under dense attention, once per distinct shape")
    first_sight_varlen_seconds: float = Field(0.0, ge=0, allow_inf_nan=False,
                                              description="extra time of the first step at a new token count "
                                              "under variable-length attention, once per distinct shape")
    # The host pays a new shape's cost while the GPU runs work already queued: a step of T seconds shows
    # first_sight_padded_seconds - min(first_sight_hidden_seconds, T) of it (measured: 122 ms at 34 ms steps,
    # 69 ms at 283 ms steps).
    first_sight_hidden_seconds: float = Field(0.0, ge=0, allow_inf_nan=False,
                                              description="most of the padded first-sight cost that the GPU work "
                                              "of the step it falls in hides: a step of T seconds shows "
                                              "first_sight_padded_seconds - min(this, T)")

    # Packing's model changes (block-diagonal mask, per-sequence loss unpacking)
    # share of the step time lost to them: fraction + per_depth_fraction x the batch's max depth
    pack_overhead_fraction: float = Field(0.0, ge=0, lt=1, description="packing's share of step time, depth-independent part")
    pack_overhead_per_depth_fraction: float = Field(0.0, ge=0, description="extra share of step time per sequence of max depth")

    # Un-padding: one kernel launch per length group per layer (Baidu's grouped FMHA); a group's attention
    # kernels reach tokens / (tokens + half saturation) of the attention rate (0: full rate whatever its size),
    # measured by `simbench calibrate`'s un-padded batches with groups of different sizes and lengths.
    unpad_group_boundaries: tuple[int, ...] = (128, 256, 384, 512)
    unpad_group_half_saturation_tokens: float = Field(0.0, ge=0, allow_inf_nan=False,
                                                      description="tokens in one length group at which its "
                                                      "attention kernels reach half the attention rate")
    # How per-document attention runs on this device: `varlen`, one variable-length kernel over every document
    # (flash-attn's or torch's, what GPUs run), or `grouped`, one call per length group as un-padding's (a CPU,
    # which has no varlen kernel: how `simbench calibrate` and `measure` run it there). Grouped, packed-varlen
    # packs pay un-padding's length-group costs too.
    per_document_attention: Literal["varlen", "grouped"] = Field(
        "varlen", description="how per-document attention runs: one varlen kernel, or one call per length group")

    @field_validator("*")
    @classmethod
    def _physical(cls, value: Any, info: ValidationInfo) -> Any:
        # After each field's own bounds: no value a device cannot have, none that overflows a step's price.
        return check_physical(info.field_name, value)

    @field_validator("unpad_group_boundaries")
    @classmethod
    def _increasing_lengths(cls, boundaries: tuple[int, ...]) -> tuple[int, ...]:
        # Unsorted or negative boundaries were accepted and silently changed the number of groups.
        if not boundaries or boundaries[0] < 1 or any(b <= a for a, b in zip(boundaries, boundaries[1:])):
            raise ValueError(f"must be lengths >= 1 in increasing order, found {list(boundaries)}")
        return boundaries

    @field_validator("calibration")
    @classmethod
    def _calibration_as_read(cls, calibration: dict | None) -> dict | None:
        # A free-form record, but read back (measure's deepest calibrated pack, calibrate's attention path):
        # held to the shape those readers take, so that a hand-edited one is named, not an AttributeError.
        if calibration is None:
            return None
        for key in ("unpadded_attention", "device_name"):
            if calibration.get(key) is not None and not isinstance(calibration[key], str):
                raise ValueError(f"`{key}` must be text, found {calibration[key]!r}")
        timings = calibration.get("timings")
        if timings is None:
            return calibration
        if not isinstance(timings, list):
            raise ValueError(f"`timings` must be a list of timing records, found {type(timings).__name__}")
        for index, timing in enumerate(timings):
            if not isinstance(timing, dict):
                raise ValueError(f"`timings[{index}]` must be a timing record (a mapping, as `simbench calibrate` "
                                 f"writes), found {timing!r}")
            if timing.get("kind") is not None and not isinstance(timing["kind"], str):
                raise ValueError(f"`timings[{index}].kind` must be text, found {timing['kind']!r}")
            rows = timing.get("rows")
            if rows is not None and not (isinstance(rows, list) and all(isinstance(row, list) for row in rows)):
                raise ValueError(f"`timings[{index}].rows` must be a list of rows (lists of sequence lengths)")
        return calibration
    # Un-padded kernels (gathers, grouped attention, ragged tiles) reach a share of the padded kernels'
    # FLOP/s, and their time varies beyond what the batch's FLOPs explain; both 1 and 0 unless fitted
    # (`simbench fit-logs`). Fixed-shape steps get no such noise: the 256-GPU padded MLPerf log's steps
    # vary by 0.3 % (inter-quartile range over median), its un-padded 8-GPU log's by 12 %.
    unpadded_flops_fraction: float = Field(1.0, gt=0, description="un-padded kernels' FLOP/s over the padded kernels'")
    unpadded_noise_cv: float = Field(0.0, ge=0, description="per-device, per-step coefficient of variation of "
                                     "un-padded device time beyond its FLOPs (mean-one lognormal)")

    # Data-parallel all-reduce as NCCL runs it (costmodels/collectives.py): ring, 2 (N - 1) hops of latency +
    # 2 (N - 1) / N * bytes / bandwidth, or double binary tree, 2 log2 N hops + 2 bytes / (0.9 bandwidth),
    # whichever is faster. With devices_per_node set, hierarchical: reduce-scatter and all-gather inside a
    # node over the intra-node links, and across nodes (allreduce_*) an all-reduce of each device's 1/k shard.
    allreduce_latency_seconds: float = Field(0.0, ge=0, description="per-hop latency of the (inter-node) ring")
    allreduce_bytes_per_s: float = Field(float("inf"), gt=0, description="per-device bandwidth of the (inter-node) ring")
    devices_per_node: int | None = Field(None, ge=1, description="devices sharing the intra-node links; None: one flat ring")
    intra_node_latency_seconds: float = Field(0.0, ge=0, description="per-hop latency inside a node")
    intra_node_bytes_per_s: float = Field(float("inf"), gt=0, description="per-device ring bandwidth inside a node")
    gradient_bytes_per_parameter: float = Field(2.0, gt=0)
    # A data-parallel replica of g > 1 GPUs (tensor or context parallel) computes g x this as fast as one GPU;
    # the rest is lost to its activation all-reduces and all-gathers.
    tensor_parallel_efficiency: float = Field(1.0, gt=0, le=1, description="a g-GPU replica's speed over g GPUs'")

    # VTS pipeline (layer-pipelined execution): the model's layers are cut into stages of
    # vts_layers_per_stage layers, each stage given that share of the device's compute, so a stage
    # spends vts_stage_fixed_seconds + the sample's FLOPs at the device's rate; a FIFO of
    # vts_buffer_samples samples sits before every stage but the first.
    vts_stage_fixed_seconds: float = Field(0.0, ge=0)
    vts_layers_per_stage: int = Field(1, ge=1, description="model layers per pipeline stage")
    vts_buffer_samples: int = Field(1, ge=0, description="samples each inter-stage FIFO holds (0: hand-off only)")

    # Memory: what `costmodels.memory` holds a layout's peak per GPU against (None: not stated, not checked).
    hbm_capacity_bytes: float | None = Field(None, gt=0, allow_inf_nan=False,
                                             description="device memory (HBM) of one GPU, bytes")

    # Raw measurements a calibrated profile was fitted on (device, torch version, timings)
    calibration: dict | None = None
    # Where each field's value comes from: field -> "measured: ...", "fitted: ...", "datasheet: ..." or
    # "chosen: ..."; a field not listed is a choice (see `field_provenance`).
    provenance: dict[str, str] = Field(default_factory=dict)
    # How far a fitted field's value is known: field -> one standard deviation, in the field's units, over
    # bootstrap resamples of what it was fitted on (`simbench.calibrate.grid_uncertainty.fit_uncertainty`); a field not
    # listed states none.
    uncertainty: dict[str, float] = Field(default_factory=dict)

    @field_validator("uncertainty")
    @classmethod
    def _uncertainty_of_fields(cls, uncertainty: dict[str, float]) -> dict[str, float]:
        for name, value in uncertainty.items():
            if name not in _UNCERTAIN_FIELDS:
                raise ValueError(f"{name!r} is not a numeric field of a profile")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}'s uncertainty must be a finite standard deviation >= 0, found {value!r}")
        return uncertainty


def profile_to_yaml(profile: HardwareProfile) -> str:
    """The profile as YAML that `load_hardware` reads back (tuples become lists, inf stays .inf)."""
    data = profile.model_dump()
    data["unpad_group_boundaries"] = list(data["unpad_group_boundaries"])
    # Flow style keeps the group boundaries and each of a calibration's raw timings on one line.
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=1 << 16)


def field_provenance(profile: HardwareProfile) -> dict[str, str]:
    """Every numeric field's value and where it comes from: its provenance entry, or `chosen` when the
    profile states none (a value nobody measured is a choice, whoever made it)."""
    fields = HardwareProfile.model_fields

    def default_source(name: str) -> str:
        at_default = name in DEFAULT_PROVENANCE and getattr(profile, name) == fields[name].default
        return DEFAULT_PROVENANCE[name] if at_default else "chosen"

    return {name: profile.provenance.get(name, default_source(name)) for name in fields if name not in _NOT_VALUES}


# The profile's entries that are not a device's values: its name and records about the values.
_NOT_VALUES = {"name", "source", "calibration", "provenance", "uncertainty"}
_UNCERTAIN_FIELDS = set(HardwareProfile.model_fields) - _NOT_VALUES - {"unpad_group_boundaries"}
