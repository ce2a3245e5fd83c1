"""Sweeps over 4D layouts: swept `parallel.*` keys give each cell its own layout, its rows those of a direct run
of the cell's scenario and the layout's columns; a layout a cell cannot hold is refused naming cell and key."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simbench import sweep as sweeps
from simbench.errors import InputError
from simbench.experiment import run_experiment

# bert-large (24 layers, 16 heads) on SQuAD's 384-token rows: small enough that a cell takes a fraction of a second.
BASE = """\
name: small4d
base:
  dataset: {histogram: squad_1_1_384}
  strategies: [ffd, packed-varlen, wlb]
  parallel: {tp: 2, cp: 2, microbatches: 4}
  hardware: h100-sxm
  devices: [16, 64]
  batch_size: 2
  steps: 3
"""
AXES = BASE + """\
axes:
  parallel.cp_sharding: [zigzag, per-document]
  parallel.pp: [1, 2]
"""


def sweep_of(tmp_path: Path, text: str) -> sweeps.Sweep:
    path = tmp_path / "small4d.yaml"
    path.write_text(text)
    return sweeps.load_sweep(path)


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[sweeps.Sweep, pd.DataFrame]:
    folder = tmp_path_factory.mktemp("sweep4d")
    sweep = sweep_of(folder, AXES)
    sweeps.run_sweep(sweep, folder / "out", workers=0)
    assert sweeps.read_failures(folder / "out") == []
    return sweep, sweeps.read_results(folder / "out")


def test_each_cell_has_its_swept_layout(swept):
    sweep, _ = swept
    layouts = [(cell.scenario.layout.cp_sharding, cell.scenario.layout.pp) for cell in sweep.cells]
    assert layouts == [("zigzag", 1), ("zigzag", 2), ("per-document", 1), ("per-document", 2)]
    assert all(cell.scenario.layout.tp == 2 and cell.scenario.layout.microbatches == 4 for cell in sweep.cells)


def test_each_cells_rows_are_a_direct_run_of_its_scenario(swept):
    sweep, results = swept
    columns = ["strategy", "devices", "speedup", "tokens_per_s", "step_seconds_mean", "gpus", "tokens_per_s_per_gpu"]
    for cell in sweep.cells:
        direct = run_experiment(cell.scenario, assumptions=False).scaling  # what `simbench run` writes
        mine = results[results["cell"] == cell.index][columns].reset_index(drop=True)
        expected = direct.sort_values(["strategy", "devices"], kind="stable")[columns].reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, expected, check_dtype=False)


def test_the_swept_keys_change_the_result(swept):
    _, results = swept
    step = results.set_index(["parallel.cp_sharding", "parallel.pp", "strategy", "devices"])["step_seconds_mean"]
    for pp in (1, 2):  # per-document sharding balances the varlen ranks' attention differently from zigzag
        assert step["zigzag", pp, "packed-varlen:lpfhp:max", 4 // pp] != \
            step["per-document", pp, "packed-varlen:lpfhp:max", 4 // pp]
    assert step["zigzag", 2, "ffd:max", 2] < step["zigzag", 1, "ffd:max", 4]  # half the layers per GPU


def test_rows_carry_the_layout_and_the_gpus_it_stands_for(swept):
    _, results = swept
    assert {"tp", "pp", "cp", "dp", "microbatches", "virtual_stages", "cp_sharding", "zero_stage", "recompute",
            "stage_layers", "gpus_per_replica", "gpus"} <= set(results.columns)
    assert (results["pp"] == results["parallel.pp"]).all()
    assert (results["cp_sharding"] == results["parallel.cp_sharding"]).all()
    assert (results["gpus_per_replica"] == 2 * results["pp"] * 2).all()
    assert (results["dp"] == results["devices"]).all()  # a simulated device is a replica
    assert (results["gpus"] == results["devices"] * results["gpus_per_replica"]).all()
    assert set(results["gpus"]) == {16, 64}  # the base's devices, in GPUs, whatever the layout


def test_a_sweep_without_a_layout_says_each_device_is_one_gpu(tmp_path):
    sweep = sweep_of(tmp_path, "name: flat\nbase: {dataset: {histogram: squad_1_1_384}, strategies: [ffd], steps: 2}\n"
                               "axes: {devices: [1, 4]}\n")
    rows = sweeps.run_cell(sweep.cells[1], {})
    assert (rows["gpus_per_replica"] == 1).all() and "tp" not in rows.columns


def test_a_dask_cluster_gives_the_serial_results(swept, tmp_path):
    from distributed import LocalCluster

    sweep, serial = swept
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        sweeps.run_sweep(sweep, tmp_path / "dask", scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(serial, sweeps.read_results(tmp_path / "dask"))


def test_cells_share_packings_and_a_workload_balancing_packer_gets_each_models_parity(tmp_path):
    sweep = sweep_of(tmp_path, BASE + "axes:\n  parallel.cp_sharding: [zigzag, per-document]\n"
                                      "  model: [bert-base, bert-large]\n")
    jobs = {job.key: job for cell in sweep.cells for job in sweeps.packing_jobs(cell)}
    by_packer = pd.Series([job.packer for job in jobs.values()]).value_counts()
    assert by_packer["ffd"] == 1 and by_packer["lpfhp"] == 1  # one per histogram, whatever model or layout
    assert by_packer["wlb"] == 2  # one per model: it weighs attention against dense work by the model's
    assert all(job.options.batch_size == 2 * 4 for job in jobs.values())  # a replica's rows: every microbatch's


@pytest.mark.parametrize("axis, message", [
    ("parallel.pp: [2, 32]", r"small4d.yaml:\d+: cell 1 \(parallel.pp=32\): .*parallel.pp: the model's 24 layers "
                             r"leave pipeline chunks .* without one"),
    ("parallel.tp: [2, 3]", r"small4d.yaml:\d+: cell 1 \(parallel.tp=3\): .*parallel.tp: the model's 16 attention "
                            r"heads do not divide over tp = 3"),
    ("parallel.cp_sharding: [zigzag, ring]", r"small4d.yaml:11: cell 1 \(parallel.cp_sharding=ring\): "
                                             r"parallel.cp_sharding: Input should be 'contiguous', 'zigzag' or "
                                             r"'per-document'"),
    ("devices: [16, 10]", r"cell 1 \(devices=10\): devices: 10 is not a multiple of tp x pp x cp = 2 x 1 x 2"),
])
def test_a_layout_a_cell_cannot_hold_is_refused_naming_the_cell_and_key(tmp_path, axis, message):
    with pytest.raises(InputError, match=message):
        sweep_of(tmp_path, BASE + f"axes:\n  {axis}\n")


def test_a_cell_whose_model_does_not_fit_memory_is_refused_saying_what_would(tmp_path):
    text = (BASE.replace("  steps: 3\n", "  steps: 3\n  memory: refuse\n")
            + "axes:\n  model: [bert-large, llama-3.1-70b]\n")
    with pytest.raises(InputError, match=r"cell 1 \(model=llama-3.1-70b\): memory: no strategy fits h100-sxm's 80 GiB "
                                         r"of HBM per GPU: .* on 16 GPUs \(ZeRO 1, recompute none\); it fits with "
                                         r"`memory: auto` \(ZeRO 3, recompute none\)"):
        sweep_of(tmp_path, text)


def test_the_sweep_summary_says_what_a_device_is_where_a_cell_has_a_layout(swept, tmp_path):
    from simbench.report.sweep import write_sweep_report

    sweep, results = swept
    write_sweep_report(tmp_path, sweep.name, sweep.axes, None, [], results)
    assert "its devices are data-parallel replicas of `gpus_per_replica` GPUs" in (tmp_path / "summary.md").read_text()


def test_slow_packers_packed_in_workers_give_the_same_packings(squad):
    from simbench.sim.simulate import pack_plans
    from simbench.strategies import get_strategy
    from simbench.workers import ReportWorkers

    plans = ["greedy", "nnlshp:3", "nnlshp:2", "spfhp:3", "optimal:3"]
    assert get_strategy("greedy").slow and get_strategy("nnlshp").slow
    here = pack_plans(squad, plans, batch_size=32, seed=3)
    with ReportWorkers(processes=2) as workers:
        beside = pack_plans(squad, plans, batch_size=32, seed=3, workers=workers)
    assert list(beside) == list(here)  # in the plans' order, whichever finished first
    for name, packing in here.items():
        assert np.array_equal(beside[name].rows, packing.rows), name
        assert np.array_equal(beside[name].repeats, packing.repeats), name
