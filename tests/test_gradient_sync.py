"""The gradients' sync between 4D replicas and the optimizer update after it: fully exposed without overlap (the
step it always was), hidden under the first stage's backward and forward with it, the update over tp x cp x dp
GPUs from ZeRO stage 1, and the option checked where it enters."""

from pathlib import Path

import numpy as np
import pytest

from simbench.costmodels import TransformerCostModel
from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.costmodels.collectives import Link, allgather, reduce_scatter
from simbench.errors import InputError, InputErrors
from simbench.resolved import resolve
from simbench.checked import parse_checked_scenarios as parse_scenarios
from simbench.costmodels.layout import ParallelLayout
from simbench.sim.parallel.gradient_sync import GradientSync, gradient_sync_of
from simbench.sim.replica import ReplicaCostModel

GPU = TransformerCostModel("llama-3.1-8b", "h100-sxm")
LLAMA = """\
name: sync
dataset: {histogram: {synthetic: lognormal, sequences: 2000, median_length: 2000, sigma: 1.0}, max_length: 8192}
model: llama-3.1-8b
hardware: h100-sxm
strategies: [ffd]
steps: 5
batch_size: 1
devices: [16, 64]
"""


def replica(**layout) -> ReplicaCostModel:
    return ReplicaCostModel(GPU, ParallelLayout(**layout))


def test_without_overlap_the_whole_sync_and_the_update_follow_the_step():
    model = replica(tp=2, pp=2, cp=2, microbatches=4)
    hardware, ranks = GPU.hardware, 8 * 2
    payload = GPU.model.parameters * hardware.gradient_bytes_per_parameter / 4
    links = (Link(hardware.intra_node_latency_seconds, hardware.intra_node_bytes_per_s),
             Link(hardware.allreduce_latency_seconds, hardware.allreduce_bytes_per_s))
    collectives = (reduce_scatter(ranks, hardware.devices_per_node // 2, payload, *links).seconds
                   + allgather(ranks, hardware.devices_per_node // 2, payload, *links).seconds)
    sync = model.gradient_sync(8)
    assert sync.communication_seconds == pytest.approx(collectives, rel=1e-12)
    assert model.allreduce_seconds(8) == sync.communication_seconds
    for step_seconds in (0.01, 1.0, 100.0):
        assert float(sync.added_seconds(step_seconds)) == pytest.approx(collectives + sync.update_seconds, rel=1e-12)
        assert float(sync.hidden_seconds(step_seconds)) == 0.0


def test_one_replica_prices_the_step_and_update_as_the_step_did_alone():
    # With one replica the update's shard is what the per-replica step used to price: the heaviest stage's
    # parameters over tp x cp GPUs, on top of the stage's launches.
    model = replica(tp=2, pp=2, cp=2, microbatches=4)
    rows = np.arange(4)
    batch = BatchSet(np.full(4, 4096), rows, np.full(4, 8192), np.zeros_like(rows), 1)
    step = float(model.replica_steps(batch, ExecutionMode.PADDED).step_seconds[0])
    heaviest = max(model.layout.stage_layers_of(GPU.model.layers))
    alone = GPU.fixed_step_seconds_of(layers=heaviest, parameters=GPU.model.parameters * heaviest / GPU.model.layers / 4)
    launches = GPU.fixed_step_seconds_of(layers=heaviest, parameters=0)
    sync = model.gradient_sync(1)
    assert step + sync.update_seconds == pytest.approx(step - launches + alone, rel=1e-12)


def test_with_overlap_the_first_stages_last_backward_hides_the_reduction():
    # One stage, four equal microbatches, no recomputation: the last microbatch's backward is 2/3 of a quarter of
    # the step, its first forward 1/3 of a quarter.
    overlapped = replica(microbatches=4, overlap_gradient_sync=True)
    sync = overlapped.gradient_sync(64)
    assert sync.backward_cover_share == pytest.approx(1 / 6, rel=1e-12)
    assert sync.forward_cover_share == pytest.approx(1 / 12, rel=1e-12)
    assert replica(microbatches=4).gradient_sync(64).communication_seconds == sync.communication_seconds
    steps = np.array([0.0, 0.5 * sync.reduce_seconds, 6 * sync.reduce_seconds, 100 * sync.reduce_seconds])
    reduce = np.maximum(sync.reduce_seconds - steps / 6, sync.reduce_floor_seconds)
    reduce[0] = sync.reduce_seconds
    gather = np.maximum(sync.gather_seconds - steps / 12, sync.gather_floor_seconds)
    gather[0] = sync.gather_seconds
    np.testing.assert_allclose(sync.exposed_seconds(steps), reduce + gather, rtol=1e-12)
    np.testing.assert_allclose(sync.added_seconds(steps), reduce + gather + sync.update_seconds, rtol=1e-12)
    # The last bucket's reduction and the first bucket's gather stay exposed under any step.
    assert 0 < sync.reduce_floor_seconds < sync.reduce_seconds
    assert float(sync.exposed_seconds(1e6)) == pytest.approx(sync.reduce_floor_seconds + sync.gather_floor_seconds)


def test_full_recomputation_lengthens_the_backward_that_covers_the_reduction():
    # Backward 2/3 plus the 1/3 repeated, of a microbatch taking 4/3: 3/4 of one of four microbatches.
    sync = replica(microbatches=4, recompute="full", overlap_gradient_sync=True).gradient_sync(8)
    assert sync.backward_cover_share == pytest.approx(3 / 16, rel=1e-12)


def test_a_pipeline_covers_the_reduction_with_its_first_stages_last_backward():
    # pp equal stages, m equal microbatches: 1F1B takes (m + pp - 1) microbatch-stages of f + b, the first stage's
    # last backward 2/3 of one.
    stages, microbatches = 4, 8
    gpu = TransformerCostModel({"layers": 8, "hidden": 1024, "heads": 16, "ffn": 4096}, "a100")
    model = ReplicaCostModel(gpu, ParallelLayout(pp=stages, microbatches=microbatches, overlap_gradient_sync=True))
    sync = model.gradient_sync(4)
    assert sync.backward_cover_share == pytest.approx(2 / 3 / (microbatches + stages - 1), rel=1e-9)


@pytest.mark.parametrize("zero_stage", [1, 2, 3])
def test_from_zero_stage_1_the_update_falls_as_one_over_the_replicas(zero_stage):
    updates = [replica(tp=2, pp=2, cp=2, zero_stage=zero_stage).gradient_sync(devices).update_seconds
               for devices in (1, 2, 8, 64)]
    np.testing.assert_allclose(np.array(updates) * [1, 2, 8, 64], updates[0], rtol=1e-12)
    heaviest = max(ParallelLayout(pp=2).stage_layers_of(GPU.model.layers))
    assert updates[0] == pytest.approx(GPU.hardware.optimizer_seconds_per_parameter * GPU.model.parameters
                                       * heaviest / GPU.model.layers / (2 * 2), rel=1e-12)


def test_at_zero_stage_0_every_replica_updates_the_whole_stage():
    updates = {replica(tp=2, pp=2, cp=2, zero_stage=0).gradient_sync(devices).update_seconds for devices in (1, 8)}
    assert len(updates) == 1


def test_a_one_gpu_cost_model_syncs_by_its_allreduce_after_the_step():
    sync = gradient_sync_of(GPU, 16)
    assert sync == GradientSync(reduce_seconds=GPU.allreduce_seconds(16))
    assert float(sync.added_seconds(1.0)) == GPU.allreduce_seconds(16)


@pytest.mark.parametrize("bad", ["yes", 1, 0, None, 1.0])
def test_a_bad_overlap_value_names_the_key(bad):
    with pytest.raises(InputError, match="parallel.overlap_gradient_sync") as raised:
        ParallelLayout(overlap_gradient_sync=bad)
    assert raised.value.parameter == "parallel.overlap_gradient_sync"


@pytest.mark.parametrize("bad", ["maybe", 1, "[true]"])
def test_a_scenarios_bad_overlap_value_names_the_key(tmp_path, bad):
    with pytest.raises(InputErrors) as raised:
        parse_scenarios(LLAMA + f"parallel: {{pp: 2, microbatches: 2, overlap_gradient_sync: {bad}}}\n",
                        source="s.yaml", base_dir=tmp_path)
    assert any("overlap_gradient_sync" in str(error) for error in raised.value.errors)


def test_the_simulator_adds_only_the_exposed_sync_and_reports_the_hidden(tmp_path):
    # The same draws with and without overlap: each step differs by exactly the sync it hides.
    summaries = {}
    for overlap in ("false", "true"):
        text = LLAMA + f"parallel: {{pp: 2, microbatches: 4, overlap_gradient_sync: {overlap}}}\n"
        summaries[overlap] = resolve(parse_scenarios(text, source=f"{overlap}.yaml", base_dir=tmp_path)[0]
                                     ).simulate().summary.set_index("devices")
    off, on = summaries["false"], summaries["true"]
    assert (off["hidden_sync_seconds"] == 0).all() and (on["hidden_sync_seconds"] > 0).all()
    np.testing.assert_allclose(off["step_seconds_mean"] - on["step_seconds_mean"], on["hidden_sync_seconds"],
                               rtol=1e-9)
    np.testing.assert_allclose(off["communication_seconds"] - on["communication_seconds"], on["hidden_sync_seconds"],
                               rtol=1e-9)
