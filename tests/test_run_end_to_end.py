"""`simbench run --quick` end to end: every promised file, consistent tables, determinism, atomicity."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from simbench import atomic, workers
from simbench.cli import app
from simbench.errors import InputError
from simbench.report import folder, plots
from simbench.checked import load_checked_scenario as load_scenario
from simbench.report.precision import speedup_text

SCENARIO = """\
name: smoke
description: a small scenario for the end-to-end tests
dataset:
  histogram: squad_1_1_384
strategies:
  - {name: spfhp, max_depth: 2}
  - {name: lpfhp, max_depth: 3}
  - unpad
  - unpad-exchange
  - vts
  - {name: vts-bucketed, window: 4, label: bucketed}
devices: [1, 4, 16]
steps: 50
seed: 3
quick: {lp_bounds: true}
"""
TABLES = ("packing", "scaling", "breakdown", "latency", "gumbel", "extrapolation", "timeline", "timings")
PLOTS = ("histogram", "packing", "scaling", "gumbel", "timeline", "breakdown")
# Solve times are measured, so these differ between runs; everything else must not.
MEASURED = {"timings.csv", "packing.png", "packing.svg", "report.html"}  # measured solve times, shown


def run(scenario_path: Path, out: Path, *extra: str):
    result = CliRunner().invoke(app, ["run", str(scenario_path), "--out", str(out), "--quick", *extra])
    return result


@pytest.fixture(scope="module")
def scenario_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("scenario") / "smoke.yaml"
    path.write_text(SCENARIO)
    return path


@pytest.fixture(scope="module")
def report(scenario_path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reports") / "smoke"
    result = run(scenario_path, out)
    assert result.exit_code == 0, result.output
    return out


def test_every_promised_file_exists(report):
    names = {path.name for path in report.iterdir()}
    expected = {"resolved.yaml", "summary.md"} | {f"{table}.csv" for table in TABLES}
    expected |= {f"{plot}.{extension}" for plot in PLOTS for extension in ("png", "svg")}
    assert expected <= names
    assert [name for name in names if name.startswith(".")] == [".simbench-folder.json"]  # no leftovers
    record = json.loads((report / ".simbench-folder.json").read_text())
    assert set(record["files"]) == names - {".simbench-folder.json"} and len(record["scenario_sha256"]) == 64


def test_scaling_rows_match_strategies_and_devices(report):
    scenario = load_scenario(report / "resolved.yaml")
    assert scenario.steps == 5  # --quick
    scaling = pd.read_csv(report / "scaling.csv")
    # Padding and the baseline (the default, pad-to-longest) are always simulated.
    labels = ["none", "pad-to-longest"] + [spec.label for spec in scenario.strategies]
    assert sorted(map(tuple, scaling[["strategy", "devices"]].to_numpy().tolist())) == \
        sorted((label, devices) for label in labels for devices in scenario.devices)
    assert {"strategy", "devices", "speedup", "tokens_per_s"} <= set(scaling.columns)
    assert (scaling.loc[scaling["strategy"] == "pad-to-longest", "speedup"] == 1.0).all()
    assert set(scaling.loc[~scaling["strategy"].isin(["vts", "bucketed"]), "reference"]) == {"pad-to-longest"}
    assert (scaling["tokens_per_s"] > 0).all()


def test_packing_table_has_bounds_and_gaps(report):
    packing = pd.read_csv(report / "packing.csv")
    assert list(packing["label"]) == ["none", "pad-to-longest", "spfhp:2", "lpfhp:3"]
    bounded = packing.dropna(subset=["lower_bound_packs"])  # no bound on rows padded to their batch's longest
    assert list(bounded["label"]) == ["none", "spfhp:2", "lpfhp:3"]
    assert (bounded["packs"] >= bounded["lower_bound_packs"]).all()
    assert bounded["gap_to_bound"].ge(0).all()
    # The packing paper's Table 5 (SQuAD 1.1): SPFHP at depth 2 needs 45,335 packs.
    assert packing.set_index("label").loc["spfhp:2", "packs"] == 45335
    # ... which is the LP bound at depth 2: proven optimal, and the report's table says so.
    assert packing.set_index("label").loc["spfhp:2", "proof"] == "proven optimal (LP bound)"
    assert not packing.set_index("label").loc["lpfhp:3", "proven_optimal"]
    assert "| proof |" in (report / "summary.md").read_text()


def test_breakdown_adds_up_to_the_step_time(report):
    breakdown = pd.read_csv(report / "breakdown.csv")
    parts = [column for column in breakdown.columns if column.endswith("_seconds") and column != "step_seconds_mean"]
    assert breakdown[parts].sum(axis=1).to_numpy() == pytest.approx(breakdown["step_seconds_mean"].to_numpy(), rel=1e-6)


def test_summary_answers_first(report):
    summary = (report / "summary.md").read_text()
    scaling = pd.read_csv(report / "scaling.csv")
    padded = scaling[scaling["reference"] == "pad-to-longest"]
    # Ties (un-padding with and without exchange on one device) go to the first name alphabetically.
    best = padded[padded["devices"] == 1].sort_values(["speedup", "strategy"], ascending=[False, True]).iloc[0]
    # The scenario gives no model, hardware or batch size: the defaults it ran with come first, said aloud.
    defaults = summary.splitlines()[2]
    assert defaults.startswith("**Defaults:**") and "model: bert-large (default: no `model:` given)" in defaults
    assert "batch_size: 32 (default: no `batch_size:` given)" in defaults and "hardware: a100" in defaults
    assert "batch_size: 32 (default: no <code>batch_size:</code> given)" in (report / "report.html").read_text()
    # Then the decision, then the Answer.
    assert summary.splitlines()[4] == "## Decision"
    headline = next(line for line in summary.splitlines() if line.startswith("**Answer:**"))
    assert f"**{best.strategy}**" in headline
    assert speedup_text(best) in headline  # to the digits its spread supports
    assert "## Packing" in summary and "| spfhp:2 |" in summary


def test_straggler_and_timeline_tables(report):
    gumbel = pd.read_csv(report / "gumbel.csv")
    assert list(gumbel["strategy"]) == ["unpad"] and (gumbel["scale"] > 0).all()
    timeline = pd.read_csv(report / "timeline.csv")
    assert set(timeline["strategy"]) == {"vts", "bucketed"}
    assert (timeline["leave_seconds"] >= timeline["finish_seconds"]).all()


def test_same_seed_gives_identical_files_with_or_without_worker_processes(report, scenario_path, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv(workers.PROCESSES_VARIABLE, "2")  # the report fixture's were computed in this process
    again = tmp_path / "again"
    assert run(scenario_path, again).exit_code == 0
    for path in sorted(report.iterdir()):
        if path.name not in MEASURED | {".simbench-folder.json"}:
            assert path.read_bytes() == (again / path.name).read_bytes(), path.name
    # The marker differs by the measured files' hashes alone.
    hashes = [json.loads((folder / ".simbench-folder.json").read_text())["sha256"] for folder in (report, again)]
    assert {name for name in hashes[0] if hashes[0][name] != hashes[1][name]} <= MEASURED


def test_other_seed_changes_the_simulation(report, scenario_path, tmp_path):
    other = tmp_path / "other"
    assert run(scenario_path, other, "--seed", "4").exit_code == 0
    assert yaml.safe_load((other / "resolved.yaml").read_text())["seed"] == 4
    assert (other / "scaling.csv").read_text() != (report / "scaling.csv").read_text()


@pytest.mark.parametrize("failure", [RuntimeError("plot failed"), KeyboardInterrupt()], ids=["error", "interrupt"])
def test_failed_run_keeps_the_previous_report(report, scenario_path, tmp_path, monkeypatch, failure):
    target = tmp_path / "smoke"
    shutil.copytree(report, target)
    before = {path.name: path.read_bytes() for path in target.iterdir()}

    def broken(*args, **kwargs):
        raise failure

    # The scaling plot comes after the tables, the summary and two other plots have been written
    # (in this process: worker processes would not see the broken figure).
    monkeypatch.setenv(workers.PROCESSES_VARIABLE, "0")
    monkeypatch.setitem(plots.FIGURES, "scaling", broken)
    result = run(scenario_path, target, "--seed", "9")
    assert result.exit_code != 0
    assert {path.name: path.read_bytes() for path in target.iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["smoke"]


def test_run_refuses_to_replace_a_folder_that_is_no_report(scenario_path, tmp_path):
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    result = run(scenario_path, precious)
    assert "holds no .simbench-folder.json" in str(result.exception)
    assert (precious / "notes.txt").read_text() == "keep me"


def test_run_under_a_file_is_an_input_error(scenario_path, tmp_path):
    (tmp_path / "afile").write_text("keep me")
    for out in (tmp_path / "afile", tmp_path / "afile" / "report"):
        result = run(scenario_path, out)
        assert isinstance(result.exception, InputError), result.output
        assert "is a file" in str(result.exception)
    assert (tmp_path / "afile").read_text() == "keep me"


@pytest.mark.parametrize("exists", [False, True])
def test_a_report_folder_that_cannot_be_created_is_refused_before_running(tmp_path, monkeypatch, exists):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    target = tmp_path / "out"
    if exists:
        target.mkdir()
    monkeypatch.setattr(atomic.tempfile, "mkdtemp", refuse)
    with pytest.raises(InputError, match=r"cannot create folders in .*: Permission denied; choose another --out"):
        atomic.check_replaceable(target)


def test_several_scenarios_check_every_report_folder_before_running_any(tmp_path):
    small = "dataset: {histogram: squad_1_1_384}\nstrategies: [unpad]\ndevices: [1]\nsteps: 2\n"
    path = tmp_path / "two.yaml"
    path.write_text(f"name: first\n{small}---\nname: second\n{small}")
    (tmp_path / "out" / "second").mkdir(parents=True)
    (tmp_path / "out" / "second" / "notes.txt").write_text("keep me")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert isinstance(result.exception, InputError) and "holds no .simbench-folder.json" in str(result.exception)
    assert sorted(entry.name for entry in (tmp_path / "out").iterdir()) == ["second"]


def test_negative_seed_is_a_usage_error_naming_the_option(scenario_path, tmp_path):
    result = run(scenario_path, tmp_path / "out", "--seed", "-1")
    assert result.exit_code == 2 and "--seed" in result.output
    assert not (tmp_path / "out").exists()


def test_plot_redraws_from_an_existing_report(report, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in report.iterdir():
        if not path.name.endswith((".png", ".svg")):
            (copy / path.name).write_bytes(path.read_bytes())
    result = CliRunner().invoke(app, ["plot", str(copy)])
    assert result.exit_code == 0, result.output
    for plot in PLOTS:
        for extension in ("png", "svg"):
            name = f"{plot}.{extension}"
            if name not in MEASURED:
                assert (copy / name).read_bytes() == (report / name).read_bytes(), name


@pytest.mark.parametrize("damage, message", [("", "scaling.csv lacks column(s) strategy, devices, speedup"),
                                             ("strategy,devices,speedup\n", "scaling.csv has no rows")])
def test_plot_of_a_damaged_report_is_an_input_error(report, tmp_path, damage, message):
    copy = tmp_path / "copy"
    shutil.copytree(report, copy)
    (copy / "scaling.csv").write_text(damage)
    result = CliRunner().invoke(app, ["plot", str(copy)])
    assert isinstance(result.exception, InputError), result.output
    assert message in str(result.exception)


def test_plot_refuses_to_redraw_over_a_plot_you_edited_and_records_what_it_redraws(report, scenario_path, tmp_path):
    from simbench.atomic import changed_files

    copy = tmp_path / "copy"
    shutil.copytree(report, copy)
    (copy / "scaling.svg").write_text("<svg>my annotations</svg>")
    result = CliRunner().invoke(app, ["plot", str(copy)])
    assert isinstance(result.exception, InputError) and "scaling.svg changed since simbench wrote" in str(
        result.exception)
    assert (copy / "scaling.svg").read_text() == "<svg>my annotations</svg>"
    (copy / "scaling.svg").unlink()
    assert CliRunner().invoke(app, ["plot", str(copy)]).exit_code == 0
    assert changed_files(copy) == []  # the marker holds the redrawn files' hashes: the folder stays replaceable
    assert run(scenario_path, copy).exit_code == 0


def test_plot_of_a_folder_that_is_no_report(tmp_path):
    result = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert "resolved.yaml" in str(result.exception)


def test_list_shows_strategies_histograms_and_presets():
    result = CliRunner().invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    for expected in ("spfhp", "lpfhp", "unpad-exchange", "vts-bucketed", "wikipedia_512", "squad_1_1_384",
                     "bert-large", "a100", "cs-2"):
        assert expected in result.output


def test_report_folder_module_reads_what_it_wrote(report):
    scenario, histogram, tables = folder.read_report(report)
    assert scenario.name == "smoke" and histogram.name == "squad_1_1_384"
    assert len(tables.scaling) == 8 * 3


def test_a_profile_with_unlimited_bandwidth_writes_strict_json(tmp_path):
    """cs-2 has no intra-node link (inf, no limit): summary.json says "inf" rather than writing invalid JSON."""
    import json

    from typer.testing import CliRunner

    from simbench.cli import app

    result = CliRunner().invoke(app, ["run", "vts", "--quick", "--out", str(tmp_path / "vts"), "--quiet"])
    assert result.exit_code == 0, result.output
    (summary,) = (tmp_path / "vts").glob("vts-wiki512/summary.json")  # the file holds two scenarios
    record = json.loads(summary.read_text(), parse_constant=lambda name: 1 / 0)
    values = {row["field"]: row["value"] for row in record["hardware_provenance"]}
    assert values["intra_node_bytes_per_s"] == "inf"  # no intra-node link on a wafer: no limit
