"""Sweeps: cells from axes, shared packings, serial and Dask runs alike, resume, recorded failures."""

import threading
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from simbench import sweep as sweeps
from simbench.cli import app
from simbench.errors import InputError

SWEEP = """name: small
base:
  dataset: {histogram: squad_1_1_384}
  strategies: [spfhp:3, unpad, packed-varlen]
  steps: 4
axes:
  model: [bert-base, bert-large]
  devices: [1, 8]
report: {x: devices, y: model}
"""


@pytest.fixture
def sweep_file(tmp_path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SWEEP)
    return path


def test_cells_are_the_product_of_the_axes_each_a_valid_scenario(sweep_file):
    sweep = sweeps.load_sweep(sweep_file)
    assert [cell.values for cell in sweep.cells] == [
        {"model": "bert-base", "devices": 1}, {"model": "bert-base", "devices": 8},
        {"model": "bert-large", "devices": 1}, {"model": "bert-large", "devices": 8}]
    assert [cell.scenario.devices for cell in sweep.cells] == [(1,), (8,), (1,), (8,)]
    assert {cell.scenario.model for cell in sweep.cells} == {"bert-base", "bert-large"}
    assert sweep.report_axes == ("devices", "model")


@pytest.mark.parametrize("text, message", [
    (SWEEP + "colour: red\n", r"small.yaml:10: unknown key 'colour'"),
    (SWEEP.replace("[bert-base, bert-large]", "[bert-base, gpt-9]"), r"cell 2 \(model=gpt-9, devices=1\)"),
    (SWEEP.replace("devices: [1, 8]", "devices: [1, 0]"), r"cell 1 \(model=bert-base, devices=0\)"),
    (SWEEP.replace("steps: 4", "steps: 1000000").replace("devices: [1, 8]", "devices: [1, 64]"),
     r"cell 1 \(model=bert-base, devices=64\): this simulation would draw and price"),
    (SWEEP.replace("{x: devices, y: model}", "{x: devices, y: colour}"), "names two swept keys"),
    (SWEEP.replace("model: [bert-base, bert-large]", "model: []"), "non-empty lists"),
])
def test_a_bad_sweep_names_the_file_line_and_cell(tmp_path, text, message):
    path = tmp_path / "small.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        sweeps.load_sweep(path)


def test_each_packing_is_made_once_for_every_cell_that_needs_it(sweep_file, tmp_path, monkeypatch):
    made = []
    real = sweeps.run_packing
    monkeypatch.setattr(sweeps, "run_packing", lambda job: made.append((job.packer, job.max_depth)) or real(job))
    sweeps.run_sweep(sweeps.load_sweep(sweep_file), tmp_path / "out", workers=0)
    assert sorted(made) == [("lpfhp", None), ("spfhp", 3)]  # 4 cells, 2 packers, one histogram
    results = sweeps.read_results(tmp_path / "out")
    assert len(results) == 4 * 4  # cells x (3 strategies + padding), one device count each
    assert set(results.columns) >= {"cell", "model", "devices", "strategy", "speedup", "seed", "simbench_version"}


def test_dask_on_two_workers_gives_the_serial_results(sweep_file, tmp_path):
    from distributed import LocalCluster

    sweep = sweeps.load_sweep(sweep_file)
    sweeps.run_sweep(sweep, tmp_path / "serial", workers=0)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        sweeps.run_sweep(sweep, tmp_path / "dask", scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(sweeps.read_results(tmp_path / "serial"), sweeps.read_results(tmp_path / "dask"))


def test_a_local_cluster_of_two_worker_processes_gives_the_serial_parquet_files(sweep_file, tmp_path):
    sweep = sweeps.load_sweep(sweep_file)
    sweeps.run_sweep(sweep, tmp_path / "serial", workers=0)
    sweeps.run_sweep(sweep, tmp_path / "dask", workers=2)
    files = sorted(path.name for path in (tmp_path / "serial" / sweeps.RESULTS).iterdir())
    assert files == sorted(path.name for path in (tmp_path / "dask" / sweeps.RESULTS).iterdir()) and len(files) == 4
    for name in files:
        assert (tmp_path / "serial" / sweeps.RESULTS / name).read_bytes() == \
            (tmp_path / "dask" / sweeps.RESULTS / name).read_bytes()


def test_a_task_that_fails_whole_records_each_of_its_cells_and_the_sweep_goes_on(sweep_file, tmp_path, monkeypatch):
    from distributed import LocalCluster

    real = sweeps.run_cells

    def lost(cells, packings):
        if any(cell.index == 2 for cell in cells):
            raise RuntimeError("worker lost")
        return real(cells, packings)

    monkeypatch.setattr(sweeps, "run_cells", lost)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        sweeps.run_sweep(sweeps.load_sweep(sweep_file), tmp_path / "out", scheduler=cluster.scheduler_address)
    failures = sweeps.read_failures(tmp_path / "out")
    assert [failure["cell"] for failure in failures] == [2] and "worker lost" in failures[0]["error"]
    assert sorted(sweeps.read_results(tmp_path / "out")["cell"].unique()) == [0, 1, 3]


@given(st.integers(0, 3000), st.integers(1, 64))
def test_batches_hold_every_cell_once_in_order_and_shrink_towards_the_end(cells, slots):
    batches = sweeps._batches(list(range(cells)), slots)
    assert [cell for batch in batches for cell in batch] == list(range(cells))
    sizes = [len(batch) for batch in batches]
    assert all(size >= 1 for size in sizes) and sizes == sorted(sizes, reverse=True)
    assert not sizes or sizes[-1] == 1 and sizes[0] <= max(1, cells // (4 * slots))


def test_a_failing_cell_is_recorded_and_resume_runs_only_what_is_missing(sweep_file, tmp_path, monkeypatch):
    sweep = sweeps.load_sweep(sweep_file)
    real = sweeps.run_cell
    ran = []

    def flaky(cell, packings):
        ran.append(cell.index)
        if cell.index == 2 and len(ran) < 5:
            raise RuntimeError("worker lost")
        return real(cell, packings)

    monkeypatch.setattr(sweeps, "run_cell", flaky)
    sweeps.run_sweep(sweep, tmp_path / "out", workers=0)
    assert [failure["cell"] for failure in sweeps.read_failures(tmp_path / "out")] == [2]
    assert sorted(sweeps.read_results(tmp_path / "out")["cell"].unique()) == [0, 1, 3]
    with pytest.raises(InputError, match="--resume"):
        sweeps.run_sweep(sweep, tmp_path / "out", workers=0)
    sweeps.run_sweep(sweep, tmp_path / "out", workers=0, resume=True)
    assert ran == [0, 1, 2, 3, 2]  # only the failed cell ran again
    assert sweeps.read_failures(tmp_path / "out") == []
    assert sorted(sweeps.read_results(tmp_path / "out")["cell"].unique()) == [0, 1, 2, 3]


def test_a_folder_that_is_no_sweep_is_refused(sweep_file, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "thesis.tex").write_text("keep")
    with pytest.raises(InputError, match="holds no sweep.json"):
        sweeps.run_sweep(sweeps.load_sweep(sweep_file), tmp_path / "out", workers=0)
    assert (tmp_path / "out" / "thesis.tex").read_text() == "keep"


def test_the_command_writes_results_summary_and_heatmap(sweep_file, tmp_path):
    result = CliRunner().invoke(app, ["sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--workers", "0"])
    assert result.exit_code == 0, result.output
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "4 cells finished, 0 failed" in summary and "Where packing overtakes un-padding" in summary
    assert (tmp_path / "out" / "winners.png").stat().st_size > 0


def test_the_bundled_sweep_has_two_hundred_valid_cells_and_runs_by_name():
    sweep = sweeps.load_sweep("context-vs-scale")
    assert len(sweep.cells) == 200 and sweep.report_axes == ("devices", "dataset.max_length")
    assert sweep.name == "context-vs-scale" and "context-vs-scale" in sweeps.bundled_sweeps()
    listing = CliRunner().invoke(app, ["list"])
    assert "Bundled sweeps (simbench sweep NAME)" in listing.output and "context-vs-scale" in listing.output


def test_an_unknown_sweep_name_is_one_line_naming_the_bundled_ones(tmp_path):
    result = CliRunner().invoke(app, ["sweep", "context-vs-scael", "--dry-run"])
    assert result.exit_code != 0 and isinstance(result.exception, InputError)
    assert "no such sweep file or bundled sweep (bundled: context-vs-scale)" in str(result.exception)
    assert "context-vs-scael" in str(result.exception)


def test_a_cell_skips_the_gumbel_fits_and_reports_what_the_full_run_reports(sweep_file):
    from simbench.experiment import run_experiment

    scenario = sweeps.load_sweep(sweep_file).cells[1].scenario
    full = run_experiment(scenario)
    cell = run_experiment(scenario, stragglers=False)
    assert not full.gumbel.empty and not full.extrapolation.empty and not full.latency.empty
    assert cell.gumbel.empty and cell.extrapolation.empty and cell.latency.empty
    for table in ("scaling", "breakdown", "timeline"):
        pd.testing.assert_frame_equal(getattr(cell, table), getattr(full, table))
    pd.testing.assert_frame_equal(cell.packing, full.packing)


def test_a_cells_rows_carry_the_packs_its_packers_made(sweep_file):
    from simbench.experiment import run_experiment

    cell = sweeps.load_sweep(sweep_file).cells[0]
    rows = sweeps.run_cell(cell, {})  # no shared packings: the cell makes its own
    packed = run_experiment(cell.scenario).packing.set_index("label")["packs"]
    by_strategy = rows.drop_duplicates("strategy").set_index("strategy")["packs"]
    assert by_strategy["spfhp:3"] == packed["spfhp:3"] > 0
    assert pd.isna(by_strategy["unpad"])  # un-padding makes no packs


def states(cells: int, seconds_per_cell: float, work_per_cell: float = 0.05):
    """The progress a sweep of `cells` equal cells reports, each taking `seconds_per_cell`."""
    return [sweeps.SweepProgress(done, 0, cells, done * seconds_per_cell, "cells", (done - 1) * work_per_cell,
                                 (cells - done) * work_per_cell, (done - 1) * seconds_per_cell)
            for done in range(1, cells + 1)]


@pytest.mark.parametrize("cells, seconds_per_cell, most", [(200, 0.05, 11), (200, 0.5, 13), (10_000, 0.01, 13)])
def test_a_sweep_says_where_it_is_every_tenth_or_ten_seconds_not_every_cell(cells, seconds_per_cell, most):
    from simbench.commands.sweep import ProgressLines

    lines = []
    report = ProgressLines(rough_seconds=3.0, say=lines.append)
    for state in states(cells, seconds_per_cell):
        report(state)
    assert len(lines) <= most and lines[-1].startswith(f"{cells:,}/{cells:,} cells done")
    calibrated = [line for line in lines if "estimate calibrated on the first" in line]
    assert len(calibrated) == 1 and "the rough one was 3 s in all" in calibrated[0]
    # Every line after the calibration says how long is left; with equal cells, what the cells took.
    left = float(calibrated[0].split("about ")[1].split(" s left")[0])
    done = int(calibrated[0].split("/")[0].replace(",", ""))
    assert left == pytest.approx((cells - done) * seconds_per_cell, rel=0.02, abs=0.5)
    elapsed = [float(line.split(" failed, ")[1].split(" s elapsed")[0]) for line in lines]
    assert all(later - earlier <= max(10.0, cells * seconds_per_cell / 10) + 1
               for earlier, later in zip(elapsed, elapsed[1:]))


def test_a_sweep_calibrates_its_estimate_on_work_not_cell_counts():
    # Half the work done in a tenth of the cells: half the time is left, not nine tenths of it.
    state = sweeps.SweepProgress(20, 0, 200, 12.0, "cells", finished_work=5.0, remaining_work=5.0, cells_seconds=10.0)
    assert state.remaining_seconds == pytest.approx(10.0)
    assert sweeps.SweepProgress(1, 0, 200, 1.0).remaining_seconds is None  # nothing timed yet


def test_a_sweep_reports_its_packings_then_its_cells_with_the_work_they_hold(sweep_file, tmp_path):
    told = []
    sweeps.run_sweep(sweeps.load_sweep(sweep_file), tmp_path / "out", workers=0, progress=told.append)
    assert [state.phase for state in told] == ["packing"] * 2 + ["cells"] * 4
    cells = [state for state in told if state.phase == "cells"]
    assert [state.done for state in cells] == [1, 2, 3, 4] and cells[-1].remaining_work == pytest.approx(0, abs=1e-9)
    assert cells[0].remaining_seconds is None  # the first cell to finish is not timed: it paid for the start
    assert all(state.remaining_seconds is not None for state in cells[1:])
