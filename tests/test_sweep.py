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
from simbench.sweep import cells as sweep_cells
from simbench.sweep import dask_cluster
from simbench.sweep import tasks as sweep_tasks
from simbench.sweep_ledger import RESULTS

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
    monkeypatch.setattr(sweep_tasks, "run_packing", lambda job: made.append((job.packer, job.max_depth)) or real(job))
    sweeps.run_sweep(sweeps.load_sweep(sweep_file), tmp_path / "out", workers=0)
    assert sorted(made) == [("lpfhp", None), ("spfhp", 3)]  # 4 cells, 2 packers, one histogram
    results = sweeps.read_results(tmp_path / "out")
    assert len(results) == 4 * 5  # cells x (3 strategies + padding + the baseline, pad-to-longest), one device count
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
    files = sorted(path.name for path in (tmp_path / "serial" / RESULTS).iterdir())
    assert files == sorted(path.name for path in (tmp_path / "dask" / RESULTS).iterdir()) and len(files) == 4
    for name in files:
        assert (tmp_path / "serial" / RESULTS / name).read_bytes() == \
            (tmp_path / "dask" / RESULTS / name).read_bytes()


def test_a_task_that_fails_whole_records_each_of_its_cells_and_the_sweep_goes_on(sweep_file, tmp_path, monkeypatch):
    from distributed import LocalCluster

    real = sweeps.run_cells

    def lost(cells, packings):
        if any(cell.index == 2 for cell in cells):
            raise RuntimeError("worker lost")
        return real(cells, packings)

    monkeypatch.setattr(dask_cluster, "run_cells", lost)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        sweeps.run_sweep(sweeps.load_sweep(sweep_file), tmp_path / "out", scheduler=cluster.scheduler_address)
    failures = sweeps.read_failures(tmp_path / "out")
    assert [failure["cell"] for failure in failures] == [2] and "worker lost" in failures[0]["error"]
    assert sorted(sweeps.read_results(tmp_path / "out")["cell"].unique()) == [0, 1, 3]


@given(st.integers(0, 3000), st.integers(1, 64))
def test_batches_hold_every_cell_once_in_order_and_shrink_towards_the_end(cells, slots):
    batches = dask_cluster._batches(list(range(cells)), slots)
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

    monkeypatch.setattr(sweep_tasks, "run_cell", flaky)
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
    assert len(sweep.cells) == 170 and sweep.report_axes == ("devices", "dataset.max_length")
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



def test_a_cells_lp_bounds_are_the_ones_its_own_runs_packing_table_states(tmp_path):
    """One rule for which packings a bound bounds and at what depth (`strategies.evaluation`): a sweep's shared
    packings are bounded as a run's packing table bounds them; sort's batches, padded to their own longest,
    have none."""
    from simbench.experiment import run_experiment

    path = tmp_path / "bounded.yaml"
    path.write_text(SWEEP.replace("[spfhp:3, unpad, packed-varlen]", "[sort, spfhp:3, ffd, token-budget]")
                    .replace("model: [bert-base, bert-large]", "model: [bert-base]").replace("[1, 8]", "[1]"))
    (cell,) = sweeps.load_sweep(path).cells
    jobs = sweeps.packing_jobs(cell)
    packings = {job.key: sweep_tasks.run_packing(job) for job in jobs}
    # No LP solve for a packing no bound bounds.
    assert {job.packer: packings[job.key][1] is None for job in jobs} == {
        "sort": True, "spfhp": False, "ffd": False, "token-budget": True}
    rows = sweeps.run_cell(cell, packings).drop_duplicates("strategy").set_index("strategy")
    table = run_experiment(cell.scenario, stragglers=False, assumptions=False).packing.set_index("label")
    shared = [label for label in table.index if label not in ("none", "pad-to-longest")]  # what the sweep packs
    assert len(shared) == 4
    for strategy in shared:
        own = table.loc[strategy, "lower_bound_packs"]
        assert (pd.isna(own) and pd.isna(rows.loc[strategy, "lp_bound_packs"])) or (
            rows.loc[strategy, "lp_bound_packs"] == own), strategy
    assert pd.isna(rows.loc["sort", "lp_bound_packs"]) and rows.loc["spfhp:3", "lp_bound_packs"] > 0


# The folder as a ledger


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory) -> tuple[Path, Path]:
    """A finished run of the 4-cell sweep (its report written), kept as the pristine copy tests start from."""
    folder = tmp_path_factory.mktemp("finished")
    path = folder / "small.yaml"
    path.write_text(SWEEP)
    result = CliRunner().invoke(app, ["sweep", str(path), "--out", str(folder / "out"), "--workers", "0"])
    assert result.exit_code == 0, result.output
    return path, folder / "out"


def copy_of(finished_sweep, tmp_path) -> Path:
    import shutil

    out = tmp_path / "out"
    shutil.copytree(finished_sweep[1], out, symlinks=True)
    return out


def resume(sweep_path: Path, out: Path):
    return CliRunner().invoke(app, ["sweep", str(sweep_path), "--out", str(out), "--workers", "0", "--resume"])


def test_every_finished_cell_and_report_is_in_the_ledger_with_its_hash(finished_sweep):
    import hashlib
    import json

    out = finished_sweep[1]
    ledger = json.loads((out / "sweep.json").read_text())
    assert sorted(ledger["finished"]) == [f"cell={index:05d}.parquet" for index in range(4)]
    for name, digest in ledger["finished"].items():
        assert hashlib.sha256((out / "results" / name).read_bytes()).hexdigest() == digest
    assert set(ledger["reports"]) == {"summary.md", "scaling.png", "winners.png"}


def test_resume_runs_again_each_cell_whose_file_is_damaged_or_anothers_says_so_and_removes_only_its_own(
        finished_sweep, tmp_path):
    out = copy_of(finished_sweep, tmp_path)
    results = out / "results"
    original = {path.name: path.read_bytes() for path in results.iterdir()}
    (results / "cell=00000.parquet").write_bytes(original["cell=00000.parquet"][:100])  # truncated
    (results / "cell=00001.parquet").write_bytes(b"")  # emptied
    (results / "cell=00002.parquet").write_bytes(original["cell=00002.parquet"][::-1])  # scrambled
    (results / "cell=00003.parquet").write_bytes(original["cell=00000.parquet"])  # another cell's
    (results / ".cell=00001.parquet.partial-k1ll3d").write_bytes(b"half")  # left by SIGKILL
    (out / "failures").mkdir(exist_ok=True)
    (out / "failures" / "my-notes.json").write_text('{"mine": true}')
    (out / "notes.txt").write_text("mine")
    result = resume(finished_sweep[0], out)
    assert result.exit_code == 0, result.output
    assert "changed since it was written (damaged, or another cell's): running cells 0, 1, 2, 3 again" \
        in result.output
    assert {path.name: path.read_bytes() for path in results.iterdir()} == original  # the same cells again
    assert (out / "failures" / "my-notes.json").read_text() == '{"mine": true}'
    assert (out / "notes.txt").read_text() == "mine"


def test_resume_runs_again_a_missing_or_unrecorded_cell_and_nothing_else(finished_sweep, tmp_path, monkeypatch):
    import json

    out = copy_of(finished_sweep, tmp_path)
    (out / "results" / "cell=00001.parquet").unlink()
    ledger = json.loads((out / "sweep.json").read_text())
    del ledger["finished"]["cell=00002.parquet"]  # killed before the ledger caught up
    (out / "sweep.json").write_text(json.dumps(ledger))
    ran = []
    real = sweeps.run_cell
    monkeypatch.setattr(sweep_tasks, "run_cell", lambda cell, packings: ran.append(cell.index) or real(cell, packings))
    result = resume(finished_sweep[0], out)
    assert result.exit_code == 0, result.output
    assert ran == [1, 2]
    assert "its file is missing: running cell 1 again" in result.output
    assert "its file is not in sweep.json (the run stopped before recording it): running cell 2 again" \
        in result.output


@pytest.mark.parametrize("damage, message", [
    ("folder", "cell 1's file is not a file simbench wrote (a folder or a link)"),
    ("link", "cell 1's file is not a file simbench wrote (a folder or a link)"),
    ("foreign", "cell 1's file is not in sweep.json and holds no rows of cell 1"),
    ("results-file", "results is not a folder"),
    ("summary-edited", "summary.md changed since simbench wrote it"),
    ("failure-foreign", "cell 2's failure record is not the file simbench wrote"),
])
def test_resume_refuses_before_any_work_what_simbench_did_not_write(finished_sweep, tmp_path, damage, message,
                                                                      monkeypatch):
    import json
    import shutil

    out = copy_of(finished_sweep, tmp_path)
    cell = out / "results" / "cell=00001.parquet"
    if damage == "folder":
        cell.unlink()
        cell.mkdir()
        (cell / "mine.txt").write_text("mine")
    elif damage == "link":
        (tmp_path / "mine.parquet").write_bytes(cell.read_bytes())
        cell.unlink()
        cell.symlink_to(tmp_path / "mine.parquet")
    elif damage == "foreign":
        ledger = json.loads((out / "sweep.json").read_text())
        del ledger["finished"]["cell=00001.parquet"]
        (out / "sweep.json").write_text(json.dumps(ledger))
        cell.write_text("my own table")
    elif damage == "results-file":
        shutil.rmtree(out / "results")
        (out / "results").write_text("mine")
    elif damage == "summary-edited":
        with (out / "summary.md").open("a") as summary:
            summary.write("my conclusions\n")
    elif damage == "failure-foreign":
        (out / "results" / "cell=00002.parquet").unlink()
        (out / "failures").mkdir(exist_ok=True)
        (out / "failures" / "cell=00002.json").write_text('{"mine": true}')
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    ran = []
    monkeypatch.setattr(sweep_tasks, "run_cell", lambda cell, packings: ran.append(cell.index))
    result = resume(finished_sweep[0], out)
    assert isinstance(result.exception, InputError) and message in str(result.exception), result.output
    assert ran == [] and {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


def test_with_no_workers_a_failing_packing_is_recorded_per_cell_as_on_dask(sweep_file, tmp_path, monkeypatch):
    real = sweeps.run_packing

    def broken(job):
        if job.packer == "spfhp":
            raise RuntimeError("packer crashed")
        return real(job)

    monkeypatch.setattr(sweep_tasks, "run_packing", broken)
    sweeps.run_sweep(sweeps.load_sweep(sweep_file), tmp_path / "out", workers=0)
    failures = sweeps.read_failures(tmp_path / "out")
    assert [failure["cell"] for failure in failures] == [0, 1, 2, 3]
    assert all("RuntimeError: packer crashed" in failure["error"] for failure in failures)


def sweep_command(sweep_path: Path, out: Path, *options: str):
    return CliRunner().invoke(app, ["sweep", str(sweep_path), "--out", str(out), "--workers", "0", *options])


def failing_cells(monkeypatch, cells):
    """Cells `cells` fail (they raise where their rows are made); the others run."""
    real = sweeps.run_cell

    def failing(cell, packings):
        if cell.index in cells:
            raise RuntimeError(f"no rows for cell {cell.index}")
        return real(cell, packings)

    monkeypatch.setattr(sweep_tasks, "run_cell", failing)


def test_a_sweep_whose_every_cell_failed_exits_1_with_one_line_and_resume_says_so_again(sweep_file, tmp_path,
                                                                                          monkeypatch):
    out = tmp_path / "out"
    failing_cells(monkeypatch, {0, 1, 2, 3})
    for result in (sweep_command(sweep_file, out), sweep_command(sweep_file, out, "--resume")):
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        errors = [line for line in result.stderr.splitlines() if line.startswith(("error", "warning"))]
        assert len(errors) == 1, result.stderr
        assert errors[0].startswith("error: every cell of the sweep failed (4 of 4)")
        assert str(out / "failures") in errors[0] and "cell 0: RuntimeError: no rows for cell 0" in errors[0]
        assert [failure["cell"] for failure in sweeps.read_failures(out)] == [0, 1, 2, 3]  # recorded as ever
        assert "0 cells finished, 4 failed" in (out / "summary.md").read_text()
    failing_cells(monkeypatch, set())
    result = sweep_command(sweep_file, out, "--resume")
    assert result.exit_code == 0 and "error" not in result.stderr and "failed:" not in result.stderr, result.output
    assert sweeps.read_failures(out) == [] and sorted(sweeps.read_results(out)["cell"].unique()) == [0, 1, 2, 3]


def test_a_sweep_with_some_cells_failed_exits_0_and_says_how_many(sweep_file, tmp_path, monkeypatch):
    out = tmp_path / "out"
    failing_cells(monkeypatch, {2})
    result = sweep_command(sweep_file, out)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith(("error", "warning"))]
    assert lines == [f"warning: 1 of 4 cells failed: their errors are in {out / 'failures'}/ and "
                     f"{out / 'summary.md'}; the first, cell 2: RuntimeError: no rows for cell 2"], result.stderr
    assert sorted(sweeps.read_results(out)["cell"].unique()) == [0, 1, 3]
    assert (out / "winners.png").stat().st_size > 0  # its failed cell's square left blank


def test_a_sweep_refused_before_work_leaves_a_new_folder_empty_so_a_plain_rerun_works(sweep_file, tmp_path):
    with pytest.raises(InputError, match="cannot reach the Dask scheduler"):
        sweeps.run_sweep(sweeps.load_sweep(sweep_file), tmp_path / "out", scheduler="tcp://127.0.0.1:9")
    assert list((tmp_path / "out").iterdir()) == []


def test_a_second_sweep_into_the_same_folder_waits_for_none_and_is_refused(sweep_file, tmp_path):
    from simbench.sweep_ledger import SweepLedger

    sweep = sweeps.load_sweep(sweep_file)
    held = SweepLedger.open(tmp_path / "out", name=sweep.name, fingerprint="x", resume=False)
    try:
        with pytest.raises(InputError, match="another simbench sweep is writing this folder"):
            sweeps.run_sweep(sweep, tmp_path / "out", workers=0)
    finally:
        held.close()


def test_a_ten_thousand_cell_dry_run_validates_each_own_value_once(tmp_path, monkeypatch):
    from simbench import scenario

    path = tmp_path / "big.yaml"
    path.write_text(SWEEP.replace("model: [bert-base, bert-large]", f"seed: {list(range(100))}")
                    .replace("devices: [1, 8]", f"batch_size: {list(range(1, 101))}").replace("report: {x: devices, "
                                                                                              "y: model}\n", ""))
    validations = []
    real = sweep_cells.scenario_from_mapping
    monkeypatch.setattr(sweep_cells, "scenario_from_mapping", lambda *args: validations.append(1) or real(*args))
    sweep = sweeps.load_sweep(path)
    assert len(sweep.cells) == 10_000 and len(validations) <= 1 + 100 + 100
    assert [(cell.scenario.seed, cell.scenario.batch_size) for cell in sweep.cells[99:102]] == [(0, 100), (1, 1),
                                                                                                 (1, 2)]
    assert sweep.cells[5].scenario == scenario.scenario_from_mapping(
        {**yaml_base(SWEEP), "name": "small-00005", "seed": 0, "batch_size": 6}, None, str(path), tmp_path)


def yaml_base(text: str) -> dict:
    import yaml

    return yaml.safe_load(text)["base"]


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


@pytest.mark.parametrize("stop_in", ["_scaling_facets", "_winner_heatmap"])
def test_a_sweep_stopped_while_writing_its_reports_resumes_and_rewrites_them(finished_sweep, tmp_path, monkeypatch,
                                                                           stop_in):
    """Interrupted after its cells finished, between one report file and the next (a file replaced, the ledger
    not yet told its hash): --resume rewrites the reports, where it had refused them as the user's edits."""
    import json

    from simbench.report import sweep as sweep_report

    out = copy_of(finished_sweep, tmp_path)
    for name in ("summary.md", "scaling.png", "winners.png"):  # as a first run is when its last cell finishes
        (out / name).unlink()
    ledger = json.loads((out / "sweep.json").read_text())
    (out / "sweep.json").write_text(json.dumps({**ledger, "reports": {}}))
    real = getattr(sweep_report, stop_in)

    def stopped(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_report, stop_in, stopped)
    stopped_run = resume(finished_sweep[0], out)
    assert stopped_run.exit_code == 130, stopped_run.output
    monkeypatch.setattr(sweep_report, stop_in, real)
    result = resume(finished_sweep[0], out)
    assert result.exit_code == 0, result.output
    assert (out / "summary.md").read_text() == (finished_sweep[1] / "summary.md").read_text()
    ledger = json.loads((out / "sweep.json").read_text())
    assert set(ledger["reports"]) == {"summary.md", "scaling.png", "winners.png"}
    assert "writing" not in ledger["reports"].values()


def test_dask_logs_below_critical_are_silenced_while_a_sweep_runs_and_heard_again_after():
    import io
    import logging

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("distributed")
    logger.addHandler(handler)
    try:
        with dask_cluster._dask_logs_silenced():
            logging.getLogger("distributed.worker").error("lost connection while closing")
        assert stream.getvalue() == ""
        logging.getLogger("distributed.worker").error("heard")
        assert stream.getvalue() == "heard\n"
    finally:
        logger.removeHandler(handler)
