"""Hardware profiles: the presets, with where each number comes from, and the loading of a profile.

A profile is a preset (see `HARDWARE_PRESETS`) or a YAML file, e.g. one written by
`simbench calibrate`; any field can be overridden from a scenario. Its fields and their physical ranges
are declared in `simbench.costmodels.hardware_profile`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

# The schema has its own module; the names other modules use stay importable from here, beside the presets.
from simbench.costmodels.hardware_profile import (  # noqa: F401
    MAX_FLOPS_PER_S, HardwareProfile, field_provenance, profile_to_yaml)
from simbench.errors import InputError, did_you_mean, read_text_file
from simbench.registry import Registry
from simbench.yamlfile import load_yaml_documents


# Packing's overhead as the packing paper measured it on the IPU (Table 1, Wikipedia at 512):
# 4.283 % at depth 2, 4.287 % at 3, 4.294 % at 4, 4.481 % at 8, 4.477 % at 16. The minimax
# straight line through them, 4.296 % + 0.01525 % x depth, misses none by more than 0.063 pp.
PAPER_PACK_OVERHEAD_FRACTION = 0.04296
PAPER_PACK_OVERHEAD_PER_DEPTH_FRACTION = 0.0001525
# The GPU and CS-2 presets assume the IPU's measured overhead: the paper has no other.
PAPER_PACK_OVERHEAD = {"pack_overhead_fraction": PAPER_PACK_OVERHEAD_FRACTION,
                       "pack_overhead_per_depth_fraction": PAPER_PACK_OVERHEAD_PER_DEPTH_FRACTION}

A100_PEAK_FLOPS_PER_S = 312e12  # datasheet: bf16/fp16 dense tensor-core peak
# NVIDIA DGX-2H datasheet: 16 Tesla V100 SXM3 32 GB at 450 W, 2.1 PFLOP/s of fp16 tensor performance in all;
# NVSwitch gives each GPU its six NVLink 2 links (300 GB/s, both directions); eight 100 Gb/s EDR InfiniBand
# ports for the cluster network, so two GPUs share one. V100 datasheet: 900 GB/s HBM2.
V100_DGX2H_PEAK_FLOPS_PER_S = 2.1e15 / 16
V100_HBM_BYTES_PER_S = 900e9
V100_DGX2H_NVLINK_BYTES_PER_S = 150e9  # per direction
V100_DGX2H_NIC_BYTES_PER_S = 8 * 100e9 / 8 / 16  # per GPU
IPU_M2000_PEAK_FLOPS_PER_S = 4 * 250e12  # datasheet: 4 x GC200 at 250 TFLOP/s fp16 each
CS2_PEAK_FLOPS_PER_S = 7.5e15  # no vendor FLOP/s figure exists for the WSE-2: an assumed order of magnitude

# Datasheet peaks of the LLM-era accelerators: bf16 dense tensor FLOP/s (half the "with sparsity" figure),
# HBM bytes/s, per-GPU scale-up link bytes/s per direction, per-GPU scale-out NIC bits/s.
H100_SXM_PEAK_FLOPS_PER_S = 989.4e12  # H100 Tensor Core GPU datasheet (SXM5): 1,979 TFLOP/s bf16 with sparsity
H100_HBM_BYTES_PER_S = 3.35e12  # HBM3, same datasheet
H200_HBM_BYTES_PER_S = 4.8e12  # H200 Tensor Core GPU datasheet (SXM): HBM3e; compute as H100 SXM
B200_PEAK_FLOPS_PER_S = 2.25e15  # DGX B200 / HGX B200 datasheet: 4.5 PFLOP/s bf16 with sparsity per GPU
B200_HBM_BYTES_PER_S = 8e12  # HGX B200 datasheet: HBM3e, 8 TB/s per GPU
MI300X_PEAK_FLOPS_PER_S = 1307.4e12  # AMD Instinct MI300X datasheet: 1,307.4 TFLOP/s bf16 dense
MI300X_HBM_BYTES_PER_S = 5.3e12  # HBM3, same datasheet
NVLINK4_BYTES_PER_S = 450e9  # NVLink 4 (H100, H200): 900 GB/s per GPU, both directions
NVLINK5_BYTES_PER_S = 900e9  # NVLink 5 (B200): 1.8 TB/s per GPU, both directions
XGMI_BYTES_PER_S = 7 * 64e9  # MI300X: 7 Infinity Fabric links of 128 GB/s (both directions) to its 7 peers
NDR_INFINIBAND_BYTES_PER_S = 400e9 / 8  # one 400 Gb/s ConnectX-7 NDR port per GPU (DGX H100, H200, B200)

# Measured, not chosen (profiles/decoder-h100-sxm.json and decoder-h200.json, from simbench.calibrate.decoder):
# a 2-layer llama-3.1-8b slice in bf16 (torch 2.11, causal flash attention through SDPA), forward and backward
# at 1k-128k tokens, one rate for the dense layers and one for attention fitted on every length; fitted
# without it, the 128k step is predicted within 2.2 % (H100) and 0.02 % (H200). The 70b slice's larger
# matrices run faster (619 / 617 TFLOP/s): the presets keep the 8b figures, a few % pessimistic for 70b.
H100_MEASURED_LINEAR_FLOPS_PER_S = 571.0e12
H100_MEASURED_ATTENTION_FLOPS_PER_S = 463.0e12
H200_MEASURED_LINEAR_FLOPS_PER_S = 591.0e12
H200_MEASURED_ATTENTION_FLOPS_PER_S = 460.4e12

# Un-padding's own kernels in each layer, forward + backward, counted on Hugging Face transformers' un-padded
# flash attention (`_upad_input`, `pad_input`), what a trainer runs when it un-pads a padded batch: the forward
# gathers q, k and v (3 index selects) and scatters the context back into the rows (zeros, index put: 2); the
# backward scatters the three gradients (zeros, index put: 6) and gathers the context's gradient (1); the real
# tokens' index and cumulative lengths are rebuilt each layer (sum, nonzero, cumsum, pad: 4). 16 in all.
UNPAD_GATHER_SCATTER_KERNELS_PER_LAYER = 16
# Fitted, not chosen: `simbench calibrate --timings simbench/data/measurements/h200-2026-11/grid.jsonl` (a copy of
# the H200 timing grid: BERT-large 24-layer and Llama-3.1-8B 4-layer slices, PyTorch 2.11 eager, bf16), all 54
# timings; fitted without its 14 "new shape" timings, the fit predicts them within 5.2 % (median 2.0 %);
# tests/test_gridfit.py refits the grid and holds these figures' predictions to it (gridfit's fixed starts find
# the same minimum on any machine; the single adaptive start before them stopped at attention 508.9 TFLOP/s,
# a minimum of higher cost).
H200_GRID_FIT = {
    "linear_flops_per_s": 709.67e12,  # dense layers at infinite width; x hidden / (hidden + 488)
    "dense_half_saturation_width": 488.40,
    "attention_flops_per_s": 473.29e12,
    "half_saturation_tokens": 1340.8,
    "host_seconds_per_kernel": 18.272e-6,  # eager host issue time: 24 BERT layers never below ~20 ms
    # Kernels per layer, forward + backward, by path (the host issues each in host_seconds_per_kernel):
    "kernels_per_layer": 50,  # padded rows: the grid's README, about 1,200 kernels a step for 24 layers
    "varlen_kernels_per_layer": 52,  # varlen attention on flat batches: fitted on the grid's varlen steps
    "kernel_launch_seconds": 0.0,  # device-side gaps are inside the fitted rates
    "shape_change_seconds": 0.0,  # the grid repeats each shape: a seen shape costs nothing extra
    "varlen_causal_attention_fraction": 0.66453,
    "varlen_causal_half_length_tokens": 1201.7,
    "varlen_bidirectional_attention_fraction": 0.56232,
    "varlen_bidirectional_half_length_tokens": 168.39,
    "varlen_tile_tokens": 128,  # chosen: FlashAttention's key tile for head sizes up to 128
    "unpadded_flops_fraction": 1.0,  # the grid's varlen batches are un-padded: the varlen terms price them
}
# Each grid-fitted term's uncertainty (a standard deviation over bootstrap resamples of the grid's lines), written
# beside the grid by `python -m simbench.calibrate.gridfit`; tests/test_gridfit.py recomputes it.
H200_GRID_UNCERTAINTY_FILE = "measurements/h200-2026-11/grid_uncertainty.json"
H200_GRID_SOURCE = ("the H200 timing grid (simbench/data/measurements/h200-2026-11/grid.jsonl, "
                    "`simbench calibrate --timings`)")
# Un-padding as trainers run it gathers and scatters the real tokens around each layer's attention: the varlen
# path's kernels plus those (UNPAD_GATHER_SCATTER_KERNELS_PER_LAYER). The grid times no such step: counted.
H200_UNPADDED_KERNELS = {"unpadded_kernels_per_layer": H200_GRID_FIT["varlen_kernels_per_layer"]
                         + UNPAD_GATHER_SCATTER_KERNELS_PER_LAYER}
# Once per distinct shape, not per layer, fitted on the first-sight measurement
# (simbench/data/measurements/h200-2026-11-28/firstsight.jsonl, `simbench.calibrate.firstsight`): 140 padded
# shapes at 1-8 layers and widths 4,096-8,192 show 168.5 ms less what their step's GPU work hides, up to 102.7 ms
# (the settings' own medians: 122 ms at 34 ms steps, 54-77 ms at 121-283 ms steps); 30 varlen token counts
# 0.9 ms. tests/test_firstsight.py refits them and predicts each setting from the others.
H200_FIRST_SIGHT = {"first_sight_padded_seconds": 168.52e-3, "first_sight_hidden_seconds": 102.74e-3,
                    "first_sight_varlen_seconds": 0.90e-3}
H200_FIRST_SIGHT_SOURCE = ("first steps at 170 shapes new to their process on an H200 "
                           "(simbench/data/measurements/h200-2026-11-28/firstsight.jsonl)")
# Fitted on NVIDIA's MLPerf v0.7 BERT runs on V100 (DGX-2H: 16 GPUs un-padded, 512 GPUs padded, same code and
# container; `simbench fit-logs`, see validation_runs): NVIDIA's 2020 un-padded kernels reach 0.860 of the padded
# kernels' FLOP/s, and their step time varies with CV 0.102 beyond its FLOPs. The A100 logs alone give 0.833.
# (0.836 while the 512-GPU run's gradient all-reduce was priced as a flat ring across nodes; NCCL's tree and
# NIC rails make that step's communication shorter, so the fitted compute is slower and un-padding less lossy.)
MLPERF_UNPADDED_FLOPS_FRACTION = 0.8601
MLPERF_UNPADDED_NOISE_CV = 0.1023
MLPERF_UNPADDED_SOURCE = ("NVIDIA's MLPerf v0.7 BERT V100 runs (16 GPUs un-padded, 512 padded; "
                          "`simbench fit-logs`)")
# The kernel-efficiency fields and their ideal values: kernels as fast as padded ones, no floor, no first sight.
IDEAL_KERNELS = {"unpadded_flops_fraction": 1.0, "unpadded_noise_cv": 0.0, "host_seconds_per_kernel": 0.0,
                 "varlen_kernels_per_layer": None, "varlen_causal_attention_fraction": 1.0,
                 "varlen_causal_half_length_tokens": 0.0, "varlen_bidirectional_attention_fraction": 1.0,
                 "varlen_bidirectional_half_length_tokens": 0.0, "varlen_tile_tokens": 0,
                 "unpadded_kernels_per_layer": None, "first_sight_padded_seconds": 0.0,
                 "first_sight_varlen_seconds": 0.0, "first_sight_hidden_seconds": 0.0,
                 "dense_half_saturation_width": 0.0, "per_document_attention": "varlen"}

# Datasheet memory per GPU. A datasheet's "GB" of HBM counts whole stacks of 2^30 bytes (H100 SXM: 5 x 16 GiB), so
# the capacities are in GiB; nvidia-smi reports slightly less as usable (81,559 MiB of an 80 GB H100).
GIB = 2**30
A100_HBM_CAPACITY_BYTES = 40 * GIB  # A100 40 GB SXM (the preset's 1,555 GB/s is the 40 GB part's HBM2 bandwidth)
V100_HBM_CAPACITY_BYTES = 32 * GIB  # DGX-2H datasheet: V100 SXM3 32 GB
H100_HBM_CAPACITY_BYTES = 80 * GIB  # H100 Tensor Core GPU datasheet (SXM5): 80 GB HBM3
H200_HBM_CAPACITY_BYTES = 141 * GIB  # H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e
B200_HBM_CAPACITY_BYTES = 180 * GIB  # DGX B200 datasheet: 1,440 GB of GPU memory for 8 GPUs
MI300X_HBM_CAPACITY_BYTES = 192 * GIB  # AMD Instinct MI300X datasheet: 192 GB HBM3

# Chosen, not measured (docs/decoder-llms.md gives how far the headlines move for +-10 % on each):
LLM_LINEAR_FRACTION = 0.50  # large bf16 GEMMs reach 60-75 % of peak; norms, activations, rotary and the
# loss are not counted as FLOPs, so a well-tuned Llama-style step sits near 40-55 % MFU (Llama 3 paper: 38-43 %
# at 16k H100s, pipeline bubbles included)
LLM_ATTENTION_FRACTION = 0.40  # flash attention forward + backward: FlashAttention-2 ~35 %, FlashAttention-3 ~50-60 %
LLM_TENSOR_PARALLEL_EFFICIENCY = 0.85  # 8-way tensor + sequence parallel over NVLink, activation traffic partly hidden
LLM_RING_FRACTION = 0.8  # NCCL ring bus bandwidth over the scale-up links' per-direction peak
LLM_NETWORK_FRACTION = 0.9  # achieved over the NIC's line rate, as for the a100 preset
# AdamW with fp32 master weights: read and write the weight, both moments (24 B) and read a fp32 gradient (4 B);
# rounded up to 32 B per parameter at HBM speed (fused multi-tensor kernel).
ADAMW_BYTES_PER_PARAMETER = 32
# Decoder LMs take a per-token loss over every position, so packing adds only cu_seqlens and position ids:
# assumed 0.5 % of the step at any depth (the paper's 4.3 % was BERT's per-sequence MLM/NSP unpacking on the IPU).
LLM_PACK_OVERHEAD_FRACTION = 0.005


def scale_compute_rates(profile: HardwareProfile, scale: float) -> HardwareProfile:
    """The profile with its dense and attention FLOP/s both multiplied by `scale` (their ratio kept):
    the one factor fitted when a measured throughput sets a device's speed."""
    return profile.model_copy(update={"linear_flops_per_s": profile.linear_flops_per_s * scale,
                                      "attention_flops_per_s": profile.attention_flops_per_s * scale})


def _achieved_rates(peak_flops_per_s: float, *, linear_fraction: float, attention_fraction: float) -> dict:
    """The dense layers' and attention's FLOP/s as the shares of a datasheet peak that a preset chooses."""
    return {"linear_flops_per_s": linear_fraction * peak_flops_per_s,
            "attention_flops_per_s": attention_fraction * peak_flops_per_s}


def _llm_gpu(name: str, source: str, peak_flops_per_s: float, hbm_bytes_per_s: float, link_bytes_per_s: float,
             *, linear_fraction: float = LLM_LINEAR_FRACTION, attention_fraction: float = LLM_ATTENTION_FRACTION,
             ring_fraction: float = LLM_RING_FRACTION,
             tensor_parallel_efficiency: float = LLM_TENSOR_PARALLEL_EFFICIENCY) -> HardwareProfile:
    """An 8-GPU-per-node LLM training accelerator from its datasheet figures and the stated choices."""
    return HardwareProfile(
        name=name,
        source=source,
        **_achieved_rates(peak_flops_per_s, linear_fraction=linear_fraction, attention_fraction=attention_fraction),
        half_saturation_tokens=512.0,  # chosen: twice the a100's, a larger device needs more rows per GEMM
        kernel_launch_seconds=4e-6,
        kernels_per_layer=40,
        step_overhead_seconds=1e-3,
        optimizer_seconds_per_parameter=ADAMW_BYTES_PER_PARAMETER / hbm_bytes_per_s,
        shape_change_seconds=1e-3,
        host_to_device_bytes_per_s=50e9,  # PCIe gen5 x16, achieved
        pack_overhead_fraction=LLM_PACK_OVERHEAD_FRACTION,
        allreduce_latency_seconds=10e-6,
        allreduce_bytes_per_s=LLM_NETWORK_FRACTION * NDR_INFINIBAND_BYTES_PER_S,
        devices_per_node=8,
        intra_node_latency_seconds=5e-6,
        intra_node_bytes_per_s=ring_fraction * link_bytes_per_s,
        gradient_bytes_per_parameter=2.0,  # bf16 gradient reduction
        tensor_parallel_efficiency=tensor_parallel_efficiency,
        provenance={"linear_flops_per_s": f"chosen: {linear_fraction:.0%} of the datasheet peak",
                    "attention_flops_per_s": f"chosen: {attention_fraction:.0%} of the datasheet peak",
                    "optimizer_seconds_per_parameter": "datasheet: HBM bandwidth; chosen: 32 B per parameter",
                    "allreduce_bytes_per_s": f"datasheet: 400 Gb/s NIC; chosen: {LLM_NETWORK_FRACTION:.0%} of it",
                    "intra_node_bytes_per_s": f"datasheet: scale-up links; chosen: {ring_fraction:.0%} of them",
                    "devices_per_node": "datasheet: 8 GPUs per node"},
    )


_LLM_CHOICES = ("Chosen, not measured: 50 % of peak on dense layers, 40 % on flash attention, 85 % tensor-parallel "
                "efficiency for a multi-GPU replica, NCCL rings at 80 % of the scale-up links and 90 % of the NIC, "
                "AdamW at 32 bytes per parameter of HBM traffic, packing overhead 0.5 % of the step.")
_LLM_MEASURED_COMPUTE_CHOICES = ("Chosen, not measured: 85 % tensor-parallel efficiency for a multi-GPU replica, "
                                 "NCCL rings at 80 % of the scale-up links and 90 % of the NIC, AdamW at 32 bytes per "
                                 "parameter of HBM traffic, packing overhead 0.5 % of the step.")


def _measured_llm_gpu(name: str, device: str, datasheet: str, linear_flops_per_s: float,
                      attention_flops_per_s: float, hbm_bytes_per_s: float) -> HardwareProfile:
    """An NVLink-4 GPU with H100's compute whose dense and attention rates were measured
    (profiles/decoder-<name>.json); every other figure as `_llm_gpu` chooses it."""
    measured = (f"Measured on one {device} (profiles/decoder-{name}.json): dense layers at "
                f"{linear_flops_per_s / 1e12:.0f} TFLOP/s ({linear_flops_per_s / H100_SXM_PEAK_FLOPS_PER_S:.1%} of peak) "
                f"and causal flash attention at {attention_flops_per_s / 1e12:.0f} TFLOP/s "
                f"({attention_flops_per_s / H100_SXM_PEAK_FLOPS_PER_S:.1%}), a llama-3.1-8b slice in bf16. ")
    profile = _llm_gpu(name, datasheet + measured + _LLM_MEASURED_COMPUTE_CHOICES, H100_SXM_PEAK_FLOPS_PER_S,
                       hbm_bytes_per_s, NVLINK4_BYTES_PER_S,
                       linear_fraction=linear_flops_per_s / H100_SXM_PEAK_FLOPS_PER_S,
                       attention_fraction=attention_flops_per_s / H100_SXM_PEAK_FLOPS_PER_S)
    return _with(profile, {"linear_flops_per_s": profile.linear_flops_per_s,
                           "attention_flops_per_s": profile.attention_flops_per_s},
                 f"measured: profiles/decoder-{name}.json (simbench calibrate-decoder, llama-3.1-8b slice)")


def _with(profile: HardwareProfile, values: dict, why: str, extra_source: str = "") -> HardwareProfile:
    """The profile with `values` set, each marked in its provenance with `why` (and no longer the uncertainty of
    a value it replaces)."""
    provenance = {**profile.provenance, **{name: why for name in values}}
    uncertainty = {name: value for name, value in profile.uncertainty.items() if name not in values}
    return profile.model_copy(update={**values, "provenance": provenance, "uncertainty": uncertainty,
                                      "source": profile.source + extra_source})


def ideal_kernels(profile: HardwareProfile) -> HardwareProfile:
    """The profile with ideal kernels: variable-length and un-padded steps at the padded rates, no launch
    floor, no first-sight cost, dense layers at full rate at any width. An explicit opt-in, never a default."""
    ideal = profile.model_copy(update={"name": f"{profile.name}-ideal"})
    return _with(ideal, IDEAL_KERNELS, "chosen: ideal kernels (opted into)",
                 " Ideal kernels opted into: un-padded and varlen attention at the padded rates, no launch floor "
                 "or first-sight cost.")


def _memory(profile: HardwareProfile, capacity_bytes: float, datasheet: str) -> HardwareProfile:
    """The profile with its HBM capacity, from the datasheet named."""
    return _with(profile, {"hbm_capacity_bytes": float(capacity_bytes)}, f"datasheet: {datasheet}")


def _grid_fitted(profile: HardwareProfile, device: str) -> HardwareProfile:
    note = (" GPU terms fitted on the H200 timing grid (simbench/data/measurements/h200-2026-11): launch floor, "
            "dense efficiency by width and tokens, varlen attention by document length; first-sight costs per "
            "distinct shape measured on H200 (simbench/data/measurements/h200-2026-11-28)"
            + ("." if device == "H200" else "; on H100 the rates stay measured, the other terms carried from H200."))
    values = H200_GRID_FIT if device == "H200" else {
        name: value for name, value in H200_GRID_FIT.items()
        if name not in ("linear_flops_per_s", "attention_flops_per_s", "half_saturation_tokens",
                        "dense_half_saturation_width")}
    why = f"fitted: {H200_GRID_SOURCE}" if device == "H200" else f"carried from H200: {H200_GRID_SOURCE}"
    profile = _with(profile, values, why, note)
    if device == "H200":
        profile = profile.model_copy(update={"uncertainty": _h200_grid_uncertainty()})
    profile = _with(profile, H200_UNPADDED_KERNELS, "chosen: the varlen path's kernels plus un-padding's gathers and "
                    "scatters counted in each layer of Hugging Face transformers' un-padded flash attention")
    first_sight_why = (f"measured: {H200_FIRST_SIGHT_SOURCE}" if device == "H200"
                       else f"carried from H200: {H200_FIRST_SIGHT_SOURCE}")
    return _with(profile, H200_FIRST_SIGHT, first_sight_why)


def _h200_grid_uncertainty() -> dict[str, float]:
    import json

    from simbench.data import bundled_file

    record = bundled_file(*H200_GRID_UNCERTAINTY_FILE.split("/", 1)).read_text(encoding="utf-8")
    return json.loads(record)["uncertainty"]


def _a100() -> HardwareProfile:
    profile = HardwareProfile(
        name="a100",
        source=(
            "A100 datasheet: 312 TFLOP/s bf16 dense peak, 1555 GB/s HBM2, NVLink 600 GB/s per GPU "
            "(both directions), HDR InfiniBand 200 Gb/s per GPU in a DGX A100. Chosen, not measured: "
            "36 % of peak on the dense layers and 25 % on attention's small per-head matmuls, which puts "
            "padded BERT-large at batch 20 on 256 GPUs within ~5 % of NVIDIA's MLPerf v0.7 log "
            "(~94.5 seq/s per GPU; fitted instead on the 8-GPU un-padded log, with un-padding's efficiency "
            "carried from the same code's V100 runs, the rates come out 0.4 % lower: docs/calibration.md, "
            "\"Fitted on some logs\"); NCCL ring bandwidth 240 GB/s in a node, 22.5 GB/s (90 % of HDR) "
            "across nodes; LAMB reads and writes ~36 bytes per parameter at HBM speed; packing overhead "
            "assumed equal to the IPU's measured one (the paper has no GPU figure). Fitted: un-padded "
            "kernels at 0.860 of the padded FLOP/s with per-step noise CV 0.102, as NVIDIA's MLPerf v0.7 "
            "un-padding code ran on V100 (`a100-ideal` prices them at the padded rate)."
        ),
        **_achieved_rates(A100_PEAK_FLOPS_PER_S, linear_fraction=0.36, attention_fraction=0.25),
        half_saturation_tokens=256.0,
        kernel_launch_seconds=4e-6,
        kernels_per_layer=40,  # after MLPerf-style fusion, forward + backward
        step_overhead_seconds=1e-3,
        optimizer_seconds_per_parameter=36 / 1555e9,
        shape_change_seconds=1e-3,  # kernel selection and allocator churn for a new shape (eager mode)
        host_to_device_bytes_per_s=25e9,  # PCIe gen4 x16, achieved
        **PAPER_PACK_OVERHEAD,
        allreduce_latency_seconds=10e-6,
        allreduce_bytes_per_s=0.9 * 200e9 / 8,
        devices_per_node=8,
        intra_node_latency_seconds=5e-6,
        intra_node_bytes_per_s=240e9,
        gradient_bytes_per_parameter=2.0,  # fp16 gradients, as in MLPerf BERT
        provenance={"linear_flops_per_s": "chosen: 36 % of the datasheet peak (312 TFLOP/s)",
                    "attention_flops_per_s": "chosen: 25 % of the datasheet peak",
                    "optimizer_seconds_per_parameter": "datasheet: HBM 1,555 GB/s; chosen: 36 B per parameter",
                    "allreduce_bytes_per_s": "datasheet: HDR 200 Gb/s; chosen: 90 % of it",
                    "intra_node_bytes_per_s": "datasheet: NVLink 600 GB/s; chosen: 240 GB/s ring",
                    "devices_per_node": "datasheet: DGX A100",
                    "pack_overhead_fraction": "measured on the IPU (packing paper, Table 1), carried",
                    "pack_overhead_per_depth_fraction": "measured on the IPU (packing paper, Table 1), carried"},
    )
    return _with(profile, {"unpadded_flops_fraction": MLPERF_UNPADDED_FLOPS_FRACTION,
                           "unpadded_noise_cv": MLPERF_UNPADDED_NOISE_CV}, f"fitted: {MLPERF_UNPADDED_SOURCE}")


HARDWARE_PRESETS: Registry[HardwareProfile] = Registry("hardware preset", {
    "a100": _memory(_a100(), A100_HBM_CAPACITY_BYTES, "A100 40 GB HBM2"),
    "a100-ideal": ideal_kernels(_memory(_a100(), A100_HBM_CAPACITY_BYTES, "A100 40 GB HBM2")),
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
        **_achieved_rates(IPU_M2000_PEAK_FLOPS_PER_S, linear_fraction=0.22, attention_fraction=0.15),
        half_saturation_tokens=64.0,
        step_overhead_seconds=5e-3,
        optimizer_seconds_per_parameter=36 / (4 * 47.5e12),  # 47.5 TB/s in-processor memory per IPU
        shape_change_seconds=60.0,
        host_to_device_bytes_per_s=12.5e9,
        **PAPER_PACK_OVERHEAD,
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
        **_achieved_rates(CS2_PEAK_FLOPS_PER_S, linear_fraction=0.20, attention_fraction=0.10),
        step_overhead_seconds=1e-3,
        host_to_device_bytes_per_s=150e9,
        **PAPER_PACK_OVERHEAD,
        allreduce_latency_seconds=10e-6,
        allreduce_bytes_per_s=150e9,
        gradient_bytes_per_parameter=2.0,
        vts_stage_fixed_seconds=1e-6,
    ),
    "v100-dgx2h": _memory(HardwareProfile(
        name="v100-dgx2h",
        source=(
            "DGX-2H datasheet: 16 V100 SXM3 32 GB at 450 W, 2.1 PFLOP/s fp16 tensor in all (131 TFLOP/s per GPU), "
            "NVSwitch with 300 GB/s of NVLink per GPU (both directions), 8 x 100 Gb/s EDR InfiniBand per node "
            "(6.25 GB/s per GPU); V100 datasheet: 900 GB/s HBM2. Chosen as for the a100 preset, not measured: "
            "36 % of peak on the dense layers and 25 % on attention, NCCL rings at 80 % of the NVLink and 90 % "
            "of the InfiniBand line rate, LAMB at ~36 bytes per parameter of HBM traffic, kernel costs and "
            "packing overhead as a100's. `simbench fit-logs` can fit its compute rates on a log."
        ),
        **_achieved_rates(V100_DGX2H_PEAK_FLOPS_PER_S, linear_fraction=0.36, attention_fraction=0.25),
        half_saturation_tokens=256.0,
        kernel_launch_seconds=4e-6,
        kernels_per_layer=40,
        step_overhead_seconds=1e-3,
        optimizer_seconds_per_parameter=36 / V100_HBM_BYTES_PER_S,
        shape_change_seconds=1e-3,
        host_to_device_bytes_per_s=12e9,  # PCIe gen3 x16, achieved
        **PAPER_PACK_OVERHEAD,
        allreduce_latency_seconds=10e-6,
        allreduce_bytes_per_s=0.9 * V100_DGX2H_NIC_BYTES_PER_S,
        devices_per_node=16,
        intra_node_latency_seconds=5e-6,
        intra_node_bytes_per_s=0.8 * V100_DGX2H_NVLINK_BYTES_PER_S,
        gradient_bytes_per_parameter=2.0,  # fp16 gradients, as in MLPerf BERT
    ), V100_HBM_CAPACITY_BYTES, "V100 SXM3 32 GB HBM2"),
    "h100-sxm": _memory(_grid_fitted(_measured_llm_gpu(
        "h100-sxm", "H100 SXM",
        "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOP/s bf16 dense (1,979 with sparsity), 3.35 TB/s HBM3, "
        "NVLink 4 at 900 GB/s per GPU; DGX H100: 8 GPUs per node, one 400 Gb/s ConnectX-7 NDR InfiniBand port per "
        "GPU. ", H100_MEASURED_LINEAR_FLOPS_PER_S, H100_MEASURED_ATTENTION_FLOPS_PER_S, H100_HBM_BYTES_PER_S), "H100"),
        H100_HBM_CAPACITY_BYTES, "H100 SXM5 80 GB HBM3"),
    "h200": _memory(_grid_fitted(_measured_llm_gpu(
        "h200", "H200",
        "NVIDIA H200 Tensor Core GPU datasheet (SXM): 989 TFLOP/s bf16 dense (1,979 with sparsity, as H100), "
        "4.8 TB/s HBM3e (141 GB), NVLink 4 at 900 GB/s per GPU; DGX H200: 8 GPUs per node, one 400 Gb/s "
        "ConnectX-7 NDR InfiniBand port per GPU. ",
        H200_MEASURED_LINEAR_FLOPS_PER_S, H200_MEASURED_ATTENTION_FLOPS_PER_S, H200_HBM_BYTES_PER_S), "H200"),
        H200_HBM_CAPACITY_BYTES, "H200 SXM 141 GB HBM3e"),
    "b200": _memory(_llm_gpu(
        "b200",
        "NVIDIA HGX B200 / DGX B200 datasheets: 2.25 PFLOP/s bf16 dense per GPU (4.5 with sparsity), 8 TB/s "
        "HBM3e, NVLink 5 at 1.8 TB/s per GPU; DGX B200: 8 GPUs per node, one 400 Gb/s ConnectX-7 port per GPU. "
        + _LLM_CHOICES,
        B200_PEAK_FLOPS_PER_S, B200_HBM_BYTES_PER_S, NVLINK5_BYTES_PER_S),
        B200_HBM_CAPACITY_BYTES, "DGX B200, 1,440 GB HBM3e for 8 GPUs"),
    "mi300x": _memory(_llm_gpu(
        "mi300x",
        "AMD Instinct MI300X datasheet: 1,307 TFLOP/s bf16 dense (2,615 with sparsity), 5.3 TB/s HBM3 (192 GB), "
        "7 Infinity Fabric (xGMI) links of 128 GB/s to the other 7 GPUs of an 8-GPU platform. Assumed, as no "
        "datasheet fixes it: one 400 Gb/s NIC per GPU. Chosen, not measured: 35 % of peak on dense layers and "
        "30 % on attention (ROCm kernels reach a smaller share of a higher peak than CUDA's on H100), 80 % "
        "tensor-parallel efficiency, RCCL rings at 70 % of the xGMI links, 90 % of the NIC, AdamW at 32 bytes "
        "per parameter of HBM traffic, packing overhead 0.5 % of the step.",
        MI300X_PEAK_FLOPS_PER_S, MI300X_HBM_BYTES_PER_S, XGMI_BYTES_PER_S, linear_fraction=0.35,
        attention_fraction=0.30, ring_fraction=0.7, tensor_parallel_efficiency=0.80),
        MI300X_HBM_CAPACITY_BYTES, "MI300X 192 GB HBM3"),
})


# Ideal kernels on the GPU whose kernels the grid measured: what un-padding and varlen would buy if they ran
# at the padded kernels' rates; for comparison with `h200`, never a default.
HARDWARE_PRESETS.register("h200-ideal", ideal_kernels(HARDWARE_PRESETS["h200"]))


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
        stated = data.get("uncertainty")
        if isinstance(stated, dict):  # a value set here is no longer the fitted one whose uncertainty is stated
            data = {**data, "uncertainty": {name: value for name, value in stated.items() if name not in overrides}}
        data = {**data, **overrides}
        source = f"{source} (with overrides {', '.join(map(str, overrides))})"
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as error:
        raise InputError(_describe_validation_error(error), source=source) from None


def _read_profile_file(path: Path) -> dict:
    if not path.is_file():
        raise InputError(f"no such hardware profile file or preset (presets: {', '.join(HARDWARE_PRESETS)})",
                         source=str(path))
    documents = load_yaml_documents(read_text_file(path, "hardware profile"), str(path))
    data = documents[0][1] if len(documents) == 1 else None
    if not isinstance(data, dict):
        raise InputError("a hardware profile must be a mapping of field: value", source=str(path))
    return data


def _describe_validation_error(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(profile)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            known = list(HardwareProfile.model_fields)
            hint = did_you_mean(key, known)
            message = f"unknown field;{hint}" if hint else f"unknown field; allowed: {', '.join(known)}"
        elif item["type"] == "missing":
            message = "required field is missing"
        problems.append(f"`{key}`: {message} (found {_shown(item.get('input'))})" if item["type"] != "missing"
                        else f"`{key}`: {message}")
    return "invalid hardware profile: " + "; ".join(problems)


def _shown(value: Any) -> str:
    """A value as a message quotes it: a whole number of hundreds of digits by its size alone."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"a {len(str(abs(value)))}-digit number"
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."
