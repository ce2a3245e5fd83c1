"""Hardware profiles: every parameter the cost models use to price a step on one device.

A profile is a preset (see `HARDWARE_PRESETS`) or a YAML file, e.g. one written by
`simbench calibrate`; any field can be overridden from a scenario.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class HardwareProfile(BaseModel):
    """One accelerator and its interconnect, as the cost models see it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    source: str = Field(description="where the numbers come from: a citation, a datasheet or a calibration run")

    # Compute: time = flops / (flops_per_s * tokens / (tokens + half_saturation_tokens))
    linear_flops_per_s: float = Field(gt=0, description="achieved FLOP/s of the per-token dense layers")
    attention_flops_per_s: float = Field(gt=0, description="achieved FLOP/s of the attention score/context matmuls")
    half_saturation_tokens: float = Field(0.0, ge=0, description="tokens per kernel at which half the peak is reached")

    # Fixed costs
    kernel_launch_seconds: float = Field(0.0, ge=0, description="launch overhead of one kernel")
    kernels_per_layer: int = Field(0, ge=0, description="kernels per layer in forward + backward")
    step_overhead_seconds: float = Field(0.0, ge=0, description="fixed time per step: optimizer, host, synchronisation")
    shape_change_seconds: float = Field(0.0, ge=0, description="cost of a new input shape: recompilation or kernel switch")
    host_to_device_bytes_per_s: float = Field(float("inf"), gt=0, description="input transfer bandwidth")

    # Packing's model changes (block-diagonal mask, per-sequence loss unpacking)
    pack_overhead_fraction: float = Field(0.0, ge=0, description="relative step-time overhead of packing at depth 1")
    pack_overhead_per_depth_fraction: float = Field(0.0, ge=0, description="extra relative overhead per sequence of max depth")

    # Un-padding: one kernel launch per length group per layer (Baidu's grouped FMHA)
    unpad_group_boundaries: tuple[int, ...] = (128, 256, 384, 512)

    # Data-parallel all-reduce, ring algorithm: 2 (N - 1) latency + 2 (N - 1) / N * bytes / bandwidth
    allreduce_latency_seconds: float = Field(0.0, ge=0)
    allreduce_bytes_per_s: float = Field(float("inf"), gt=0)
    gradient_bytes_per_parameter: float = Field(2.0, gt=0)

    # VTS pipeline: a stage spends vts_stage_fixed_seconds + its share of the sample's FLOPs
    vts_stage_fixed_seconds: float = Field(0.0, ge=0)

    # Raw measurements a calibrated profile was fitted on (device, torch version, timings)
    calibration: dict | None = None
