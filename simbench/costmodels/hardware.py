"""Hardware profiles: every parameter the cost models use to price a step on one device.

A profile is a preset (see `HARDWARE_PRESETS`) or a YAML file, e.g. one written by
`simbench calibrate`; any field can be overridden from a scenario.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simbench.errors import InputError, read_text_file


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
    optimizer_seconds_per_parameter: float = Field(0.0, ge=0, description="optimizer update time per parameter (memory bound)")
    shape_change_seconds: float = Field(0.0, ge=0, description="cost of a new input shape: recompilation or kernel switch")
    host_to_device_bytes_per_s: float = Field(float("inf"), gt=0, description="input transfer bandwidth")
    input_bytes_per_token: float = Field(16.0, ge=0, description="input bytes per token slot: ids, segments, mask, labels")

    # Packing's model changes (block-diagonal mask, per-sequence loss unpacking)
    # share of the step time lost to them: fraction + per_depth_fraction x the batch's max depth
    pack_overhead_fraction: float = Field(0.0, ge=0, lt=1, description="packing's share of step time, depth-independent part")
    pack_overhead_per_depth_fraction: float = Field(0.0, ge=0, description="extra share of step time per sequence of max depth")

    # Un-padding: one kernel launch per length group per layer (Baidu's grouped FMHA)
    unpad_group_boundaries: tuple[int, ...] = (128, 256, 384, 512)
    # Un-padded kernels (gathers, grouped attention, ragged tiles) reach a share of the padded kernels'
    # FLOP/s, and their time varies beyond what the batch's FLOPs explain; both 1 and 0 unless fitted
    # (`simbench fit-logs`). Fixed-shape steps get no such noise: the 256-GPU padded MLPerf log's steps
    # vary by 0.3 % (inter-quartile range over median), its un-padded 8-GPU log's by 12 %.
    unpadded_flops_fraction: float = Field(1.0, gt=0, description="un-padded kernels' FLOP/s over the padded kernels'")
    unpadded_noise_cv: float = Field(0.0, ge=0, description="per-device, per-step coefficient of variation of "
                                     "un-padded device time beyond its FLOPs (mean-one lognormal)")

    # Data-parallel all-reduce, ring algorithm: 2 (N - 1) latency + 2 (N - 1) / N * bytes / bandwidth.
    # With devices_per_node set, a two-level ring: reduce-scatter and all-gather inside a node over
    # the intra-node links, and a ring across nodes (allreduce_*) of each device's 1/k shard.
    allreduce_latency_seconds: float = Field(0.0, ge=0, description="per-hop latency of the (inter-node) ring")
    allreduce_bytes_per_s: float = Field(float("inf"), gt=0, description="per-device bandwidth of the (inter-node) ring")
    devices_per_node: int | None = Field(None, ge=1, description="devices sharing the intra-node links; None: one flat ring")
    intra_node_latency_seconds: float = Field(0.0, ge=0, description="per-hop latency inside a node")
    intra_node_bytes_per_s: float = Field(float("inf"), gt=0, description="per-device ring bandwidth inside a node")
    gradient_bytes_per_parameter: float = Field(2.0, gt=0)

    # VTS pipeline: a stage spends vts_stage_fixed_seconds + its share of the sample's FLOPs
    vts_stage_fixed_seconds: float = Field(0.0, ge=0)

    # Raw measurements a calibrated profile was fitted on (device, torch version, timings)
    calibration: dict | None = None


# Packing's overhead as the packing paper measured it on the IPU (Table 1, Wikipedia at 512):
# 4.283 % at depth 2, 4.287 % at 3, 4.294 % at 4, 4.481 % at 8, 4.477 % at 16. The minimax
# straight line through them, 4.296 % + 0.01525 % x depth, misses none by more than 0.063 pp.
PAPER_PACK_OVERHEAD_FRACTION = 0.04296
PAPER_PACK_OVERHEAD_PER_DEPTH_FRACTION = 0.0001525

A100_PEAK_FLOPS_PER_S = 312e12  # datasheet: bf16/fp16 dense tensor-core peak
IPU_M2000_PEAK_FLOPS_PER_S = 4 * 250e12  # datasheet: 4 x GC200 at 250 TFLOP/s fp16 each
CS2_PEAK_FLOPS_PER_S = 7.5e15  # no vendor FLOP/s figure exists for the WSE-2: an assumed order of magnitude

HARDWARE_PRESETS: dict[str, HardwareProfile] = {
    "a100": HardwareProfile(
        name="a100",
        source=(
            "A100 datasheet: 312 TFLOP/s bf16 dense peak, 1555 GB/s HBM2, NVLink 600 GB/s per GPU "
            "(both directions), HDR InfiniBand 200 Gb/s per GPU in a DGX A100. Chosen, not measured: "
            "36 % of peak on the dense layers and 25 % on attention's small per-head matmuls, which puts "
            "padded BERT-large at batch 20 on 256 GPUs within ~5 % of NVIDIA's MLPerf v0.7 log "
            "(~94.5 seq/s per GPU); NCCL ring bandwidth 240 GB/s in a node, 22.5 GB/s (90 % of HDR) "
            "across nodes; LAMB reads and writes ~36 bytes per parameter at HBM speed; packing overhead "
            "assumed equal to the IPU's measured one (the paper has no GPU figure)."
        ),
        linear_flops_per_s=0.36 * A100_PEAK_FLOPS_PER_S,
        attention_flops_per_s=0.25 * A100_PEAK_FLOPS_PER_S,
        half_saturation_tokens=256.0,
        kernel_launch_seconds=4e-6,
        kernels_per_layer=40,  # after MLPerf-style fusion, forward + backward
        step_overhead_seconds=1e-3,
        optimizer_seconds_per_parameter=36 / 1555e9,
        shape_change_seconds=1e-3,  # kernel selection and allocator churn for a new shape (eager mode)
        host_to_device_bytes_per_s=25e9,  # PCIe gen4 x16, achieved
        pack_overhead_fraction=PAPER_PACK_OVERHEAD_FRACTION,
        pack_overhead_per_depth_fraction=PAPER_PACK_OVERHEAD_PER_DEPTH_FRACTION,
        allreduce_latency_seconds=10e-6,
        allreduce_bytes_per_s=0.9 * 200e9 / 8,
        devices_per_node=8,
        intra_node_latency_seconds=5e-6,
        intra_node_bytes_per_s=240e9,
        gradient_bytes_per_parameter=2.0,  # fp16 gradients, as in MLPerf BERT
    ),
    "ipu-m2000": HardwareProfile(
        name="ipu-m2000",
        source=(
            "IPU-M2000 datasheet: 4 x GC200 IPUs at 250 TFLOP/s fp16 each (1 PFLOP/s per M2000), "
            "100 GbE host links. Packing overhead fitted to the packing paper's measured IPU overheads "
            "(Krell et al. 2021, Table 1): 4.296 % + 0.01525 % x depth, within 0.063 pp of each. "
            "Chosen, not measured: 22 % of peak on dense layers and 15 % on attention (pipelined "
            "BERT-large), a graph recompile of 60 s per new input shape (static graphs), a flat 25 GB/s "
            "all-reduce ring between M2000s (faster IPU-Links inside a POD are not modelled)."
        ),
        linear_flops_per_s=0.22 * IPU_M2000_PEAK_FLOPS_PER_S,
        attention_flops_per_s=0.15 * IPU_M2000_PEAK_FLOPS_PER_S,
        half_saturation_tokens=64.0,
        step_overhead_seconds=5e-3,
        optimizer_seconds_per_parameter=36 / (4 * 47.5e12),  # 47.5 TB/s in-processor memory per IPU
        shape_change_seconds=60.0,
        host_to_device_bytes_per_s=12.5e9,
        pack_overhead_fraction=PAPER_PACK_OVERHEAD_FRACTION,
        pack_overhead_per_depth_fraction=PAPER_PACK_OVERHEAD_PER_DEPTH_FRACTION,
        allreduce_latency_seconds=5e-6,
        allreduce_bytes_per_s=25e9,
        gradient_bytes_per_parameter=2.0,
    ),
    "cs-2": HardwareProfile(
        name="cs-2",
        source=(
            "CS-2 datasheet: one WSE-2 wafer, 12 x 100 GbE I/O (150 GB/s). Cerebras publishes no FLOP/s "
            "peak: simbench assumes 7.5 PFLOP/s fp16, 20 % achieved on dense layers and 10 % on "
            "attention; a 1 us fixed cost per pipeline stage and sample; variable tensor shapes, so "
            "no cost for a new shape; packing overhead assumed equal to the IPU's measured one. "
            "All chosen, not measured."
        ),
        linear_flops_per_s=0.20 * CS2_PEAK_FLOPS_PER_S,
        attention_flops_per_s=0.10 * CS2_PEAK_FLOPS_PER_S,
        step_overhead_seconds=1e-3,
        host_to_device_bytes_per_s=150e9,
        pack_overhead_fraction=PAPER_PACK_OVERHEAD_FRACTION,
        pack_overhead_per_depth_fraction=PAPER_PACK_OVERHEAD_PER_DEPTH_FRACTION,
        allreduce_latency_seconds=10e-6,
        allreduce_bytes_per_s=150e9,
        gradient_bytes_per_parameter=2.0,
        vts_stage_fixed_seconds=1e-6,
    ),
}


def load_hardware(name_or_path: str | Path | HardwareProfile, overrides: dict | None = None) -> HardwareProfile:
    """A preset by name (see `HARDWARE_PRESETS`) or a YAML profile file, with fields overridden.

        >>> from simbench.costmodels.hardware import load_hardware
        >>> load_hardware("a100", {"kernel_launch_seconds": 0.0}).kernel_launch_seconds
        0.0
    """
    if isinstance(name_or_path, HardwareProfile):
        data, source = name_or_path.model_dump(), name_or_path.name
    elif str(name_or_path) in HARDWARE_PRESETS:
        data, source = HARDWARE_PRESETS[str(name_or_path)].model_dump(), f"hardware preset {name_or_path}"
    else:
        data, source = _read_profile_file(Path(name_or_path)), str(name_or_path)
    if overrides:
        data = {**data, **overrides}
        source = f"{source} (with overrides {', '.join(map(str, overrides))})"
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as error:
        raise InputError(_describe_validation_error(error), source=source) from None


def profile_to_yaml(profile: HardwareProfile) -> str:
    """The profile as YAML that `load_hardware` reads back (tuples become lists, inf stays .inf)."""
    data = profile.model_dump()
    data["unpad_group_boundaries"] = list(data["unpad_group_boundaries"])
    # Flow style keeps the group boundaries and each of a calibration's raw timings on one line.
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=1 << 16)


def _read_profile_file(path: Path) -> dict:
    if not path.is_file():
        raise InputError(f"no such hardware profile file or preset (presets: {', '.join(HARDWARE_PRESETS)})",
                         source=str(path))
    text = read_text_file(path, "hardware profile")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"not valid YAML: {getattr(error, 'problem', error)}", source=str(path), line=line) from None
    if not isinstance(data, dict):
        raise InputError("a hardware profile must be a mapping of field: value", source=str(path))
    return data


def _describe_validation_error(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(profile)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = f"unknown field; allowed: {', '.join(HardwareProfile.model_fields)}"
        elif item["type"] == "missing":
            message = "required field is missing"
        problems.append(f"`{key}`: {message} (found {item.get('input')!r})" if item["type"] != "missing"
                        else f"`{key}`: {message}")
    return "invalid hardware profile: " + "; ".join(problems)
