"""The launch-bound regime: kernels per layer by path (padded, varlen, un-padded with its gathers and scatters), the
host floor per GPU in a 4D replica (each GPU issues all its chunk's kernels, whatever tp and cp share), and the
ranking it gives a small encoder at short rows, where every step is launch-bound."""

import numpy as np
import pytest

import simbench
from simbench.costmodels import TransformerCostModel, load_hardware
from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.costmodels.hardware import HARDWARE_PRESETS, UNPAD_GATHER_SCATTER_KERNELS_PER_LAYER
from simbench.costmodels.layout import ParallelLayout
from simbench.histogram import LengthHistogram, load_histogram
from simbench.sim.replica import ReplicaCostModel

H200 = HARDWARE_PRESETS["h200"]


def test_each_path_launches_its_own_kernels_per_layer():
    model = TransformerCostModel("bert-base", H200)
    padded, varlen, unpadded = (model.kernels_per_layer(mode) for mode in
                                (ExecutionMode.PADDED, ExecutionMode.PACKED_VARLEN, ExecutionMode.UNPADDED))
    assert padded == H200.kernels_per_layer == model.kernels_per_layer(ExecutionMode.SORTED)
    assert varlen == H200.varlen_kernels_per_layer
    assert unpadded == varlen + UNPAD_GATHER_SCATTER_KERNELS_PER_LAYER
    assert padded < varlen < unpadded
    for mode in ExecutionMode:
        assert model.launch_floor_seconds(mode) == pytest.approx(
            12 * model.kernels_per_layer(mode) * H200.host_seconds_per_kernel, rel=1e-12)
    # A profile without counts of its own for a path falls back to the path before it.
    plain = TransformerCostModel("bert-base", "a100")
    assert {plain.kernels_per_layer(mode) for mode in ExecutionMode} == {HARDWARE_PRESETS["a100"].kernels_per_layer}


def test_a_base_encoder_at_128_tokens_ranks_un_padding_below_padding():
    """BERT-base, rows of 128 tokens, 64 sequences a step on the h200 profile: every step is launch-bound, and
    un-padding's gathers and scatters make it slower than padding (measured on an H200: 0.53-0.78x of padding's
    throughput), while packed-varlen packs more tokens under the same floor (measured 2.07x)."""
    histogram = _scaled_to_128(load_histogram("wikipedia_512"))
    summary = simbench.simulate(histogram, ["unpad", "packed-varlen"], [1], model="bert-base", hardware="h200",
                                batch_size=64, steps=50, shapes="seen", baseline="none").summary
    speedup = dict(zip(summary.strategy, summary.speedup))
    unpad = speedup["unpad"]
    packed = next(value for name, value in speedup.items() if name.startswith("packed-varlen"))
    assert unpad < 1 < packed
    # Un-padding runs at its own launch floor: its step is the floor, not its (smaller) device work, then the
    # step's fixed cost (the optimizer update, synchronisation).
    model = TransformerCostModel("bert-base", H200)
    lengths = histogram.sample_lengths(64, np.random.default_rng(0))
    rows = np.arange(64)
    batch = BatchSet(lengths, rows, np.full(64, 128), np.zeros(64, dtype=np.int64), 1)
    unpadded = model.step_costs(batch, ExecutionMode.UNPADDED).total_seconds[0]
    padded = model.step_costs(batch, ExecutionMode.PADDED).total_seconds[0]
    assert unpadded == pytest.approx(model.launch_floor_seconds(ExecutionMode.UNPADDED) + model.fixed_step_seconds,
                                     rel=1e-12)
    assert unpadded > padded


def _scaled_to_128(histogram: LengthHistogram) -> LengthHistogram:
    """Every length x 128 / 512, rounded up (as `simbench measure --max-length 128` rescales it)."""
    scaled = np.ceil(histogram.lengths * 128 / histogram.max_length).astype(np.int64)
    return LengthHistogram(np.bincount(scaled, weights=histogram.counts, minlength=129)[1:].astype(np.int64))


def _launch_bound_replica(layout: ParallelLayout) -> tuple[ReplicaCostModel, TransformerCostModel]:
    """A small model on the h200 profile with nothing but its launch floor: fast links, no fixed step cost."""
    free = load_hardware("h200", {"step_overhead_seconds": 0.0, "optimizer_seconds_per_parameter": 0.0,
                                  "input_bytes_per_token": 0.0, "intra_node_latency_seconds": 0.0,
                                  "intra_node_bytes_per_s": 1e15, "allreduce_latency_seconds": 0.0,
                                  "allreduce_bytes_per_s": 1e15})
    gpu = TransformerCostModel({"layers": 8, "hidden": 256, "heads": 4, "ffn": 1024}, free)
    return ReplicaCostModel(gpu, layout), gpu


@pytest.mark.parametrize("tp, cp", [(1, 1), (2, 1), (1, 2), (4, 2)])
def test_the_host_floor_is_per_gpu_in_4d_whatever_tp_and_cp_share(tp, cp):
    """Each microbatch's step on a GPU takes at least all its layers' kernels x the host's time per kernel: with
    device work far below it, a replica's step is microbatches x layers x kernels x host seconds per kernel, not
    that over tp x cp."""
    microbatches = 4
    replica, gpu = _launch_bound_replica(ParallelLayout(tp=tp, cp=cp, microbatches=microbatches))
    batch = BatchSet(np.full(8, 16), np.arange(8), np.full(8, 16), np.zeros(8, dtype=np.int64), 1)
    for mode in (ExecutionMode.PADDED, ExecutionMode.UNPADDED):
        step = replica.replica_steps(batch, mode).step_seconds[0]
        floor = 8 * gpu.kernels_per_layer(mode) * gpu.hardware.host_seconds_per_kernel
        assert step == pytest.approx(microbatches * floor, rel=1e-9)


def test_each_pipeline_stage_takes_its_own_layers_floor():
    """Two stages of 4 layers, 1F1B, equal microbatches: (microbatches + stages - 1) x one stage's floor."""
    microbatches, stages = 4, 2
    replica, gpu = _launch_bound_replica(ParallelLayout(tp=2, pp=stages, microbatches=microbatches))
    batch = BatchSet(np.full(8, 16), np.arange(8), np.full(8, 16), np.zeros(8, dtype=np.int64), 1)
    step = replica.replica_steps(batch, ExecutionMode.PADDED).step_seconds[0]
    stage_floor = gpu.launch_floor_seconds(ExecutionMode.PADDED, layers=8 / stages)
    # Within the activations' send between the stages over the fast link (picoseconds).
    assert step == pytest.approx((microbatches + stages - 1) * stage_floor, rel=1e-6)
