"""`simbench pack`: the JSON-lines contract, the table, baseline checks and one-line errors.

Error paths run the real entry point in a subprocess to see the exit code and the absent traceback.
"""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from simbench.cli import app
from simbench.strategies import available_strategies
from simbench.strategies.baseline import BaselineRecord, write_baseline

RUNNER = CliRunner()
SMALL_COUNTS = {length: (length * 7) % 5 for length in range(1, 65)}
KEYS = {"label", "strategy", "max_depth", "sequences", "packs", "tokens", "padding_tokens", "efficiency", "packing_factor",
        "strategies_used", "depth_used", "seconds", "lower_bound_packs", "gap_to_bound", "bound_seconds",
        "bound_depth", "proven_optimal", "proof"}


def run_simbench(*arguments):
    return subprocess.run([sys.executable, "-c", "from simbench.cli import main; main()", *arguments],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def small_histogram(tmp_path):
    path = tmp_path / "small.csv"
    path.write_text("length,count\n" + "".join(f"{length},{count}\n" for length, count in SMALL_COUNTS.items()))
    return path


def test_json_lines_for_one_strategy_match_table_5():
    result = RUNNER.invoke(app, ["pack", "squad_1_1_384", "--strategy", "spfhp", "--max-depth", "2", "--json",
                                 "--bound"])
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.strip().splitlines()
    metrics = json.loads(line)
    assert set(metrics) == KEYS
    assert (metrics["label"], metrics["strategy"], metrics["max_depth"], metrics["sequences"]) == (
        "spfhp:2", "spfhp", 2, 88641)
    assert (metrics["packs"], metrics["tokens"], metrics["padding_tokens"]) == (45335, 17408640, 2159161)
    assert 0 < metrics["efficiency"] < 1 and round(metrics["efficiency"], 5) == 0.87597
    assert metrics["lower_bound_packs"] <= metrics["packs"]
    assert metrics["gap_to_bound"] == pytest.approx(metrics["packs"] / metrics["lower_bound_packs"] - 1)


def test_json_lines_for_all_strategies(small_histogram):
    result = RUNNER.invoke(app, ["pack", str(small_histogram), "--strategy", "all", "--max-depth", "3",
                                 "--seed", "4", "--batch-size", "8", "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [metrics["strategy"] for metrics in lines] == list(available_strategies())
    for metrics in lines:
        assert metrics["sequences"] == sum(SMALL_COUNTS.values())
        assert metrics["tokens"] == metrics["padding_tokens"] + sum(length * count for length, count in SMALL_COUNTS.items())
        if metrics["strategy"] in ("sort", "token-budget", "group-by-length", "pad-to-longest"):  # batchers: shapes vary
            assert metrics["lower_bound_packs"] is None and "gap_to_bound" not in metrics
        else:
            assert metrics["packs"] >= metrics["lower_bound_packs"] and metrics["gap_to_bound"] >= 0


def test_table_reads_like_the_papers_table_1(small_histogram):
    result = RUNNER.invoke(app, ["pack", str(small_histogram), "--max-length", "80"])
    assert result.exit_code == 0, result.output
    for text in ("depth", "strategy", "strategies used", "padding tokens", "efficiency %", "packing factor",
                 "gap to LP bound", "small: 130 sequences, max length 80", *available_strategies()):
        assert text in result.stdout


def test_a_strategy_that_cannot_run_at_this_depth_is_skipped_when_running_all():
    result = RUNNER.invoke(app, ["pack", "squad_1_1_384", "--max-depth", "8", "--json"])
    assert result.exit_code == 0, result.output
    names = [json.loads(line)["strategy"] for line in result.stdout.strip().splitlines()]
    assert "nnlshp" not in names and "spfhp" in names
    assert "skipped nnlshp" in result.stderr


def test_check_baseline_passes_on_the_records():
    result = RUNNER.invoke(app, ["pack", "squad_1_1_384", "--strategy", "spfhp", "--check-baseline"])
    assert result.exit_code == 0, result.output
    assert "5 of 5 records met, 0 regressions" in result.stdout


def test_check_baseline_fails_with_a_table_of_regressions(tmp_path):
    baseline = tmp_path / "baseline.csv"
    write_baseline([BaselineRecord("squad_1_1_384", "spfhp", 2, 0, 32, 0.9),
                    BaselineRecord("squad_1_1_384", "spfhp", 3, 0, 32, 0.9)], baseline)
    result = RUNNER.invoke(app, ["pack", "squad_1_1_384", "--strategy", "spfhp", "--check-baseline",
                                 "--baseline", str(baseline)])
    assert result.exit_code == 1
    assert "regressions against baseline.csv" in result.stdout
    assert "90.000000" in result.stdout and "87.597187" in result.stdout
    assert "1 of 2 records met, 1 regressions" in result.stdout


def test_check_baseline_json_reports_every_record(tmp_path):
    baseline = tmp_path / "baseline.csv"
    write_baseline([BaselineRecord("squad_1_1_384", "ffd", None, 0, 32, 0.9)], baseline)
    result = RUNNER.invoke(app, ["pack", "squad_1_1_384", "--check-baseline", "--baseline", str(baseline), "--json"])
    assert result.exit_code == 0
    (line,) = result.stdout.strip().splitlines()
    assert json.loads(line)["regression"] is False


def test_unknown_strategy_lists_the_known_ones():
    completed = run_simbench("pack", "squad_1_1_384", "--strategy", "nope")
    assert completed.returncode == 2
    message = " ".join(completed.stderr.split())
    # 'nope' is no misspelling of 'none': no suggestion, only the list; a swapped pair of letters gets one.
    assert "unknown strategy 'nope'; known strategies: none, sort, greedy, spfhp" in message
    assert "did you mean 'spfhp'?" in " ".join(run_simbench("pack", "squad_1_1_384", "-s", "spfph").stderr.split())
    assert "Traceback" not in completed.stderr


def test_bad_histogram_names_file_and_line_without_traceback(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("length,count\n1,3\n2,-1\n")
    completed = run_simbench("pack", str(path), "--json")
    assert completed.returncode == 2
    assert f"{path}:3: count must not be negative" in " ".join(completed.stderr.split())
    assert "Traceback" not in completed.stderr and completed.stdout == ""


def test_max_length_below_the_longest_sequence_is_an_input_error():
    completed = run_simbench("pack", "squad_1_1_384", "--strategy", "spfhp", "--max-length", "100")
    assert completed.returncode == 2
    assert "longer than --max-length 100" in " ".join(completed.stderr.split())
    assert "Traceback" not in completed.stderr


@pytest.mark.parametrize("command, name", [("pack", "--max-length"), ("bound", "--max-length")])
@pytest.mark.parametrize("max_length", ["0", "-5", "100000000000"])
def test_max_length_outside_its_range_is_an_input_error(tmp_path, command, name, max_length):
    # 0 used to fall back to the histogram's length silently, and a huge one to run out of memory.
    path = tmp_path / "empty.csv"
    path.write_text("length,count\n1,0\n8,0\n")
    completed = run_simbench(command, str(path), "--max-length", max_length)
    assert completed.returncode == 2
    assert f"{name} must be a whole number in 1..1,048,576, found {max_length}" in " ".join(completed.stderr.split())
    assert "Traceback" not in completed.stderr


def test_a_folder_or_binary_file_as_histogram_is_an_input_error(tmp_path):
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00bin")
    for path, message in ((tmp_path, "cannot read the histogram: Is a directory"),
                          (binary, "not a UTF-8 text file (byte 0)")):
        completed = run_simbench("pack", str(path), "--strategy", "spfhp")
        assert completed.returncode == 2
        assert f"{path}: {message}" in " ".join(completed.stderr.split())
        assert "Traceback" not in completed.stderr


def test_empty_histogram_has_a_lower_bound_of_zero_packs(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("length,count\n1,0\n8,0\n")
    result = RUNNER.invoke(app, ["pack", str(path), "--strategy", "ffd", "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    assert (metrics["packs"], metrics["lower_bound_packs"]) == (0, 0)


def test_a_folder_as_baseline_is_an_input_error(tmp_path):
    completed = run_simbench("pack", "squad_1_1_384", "--check-baseline", "--baseline", str(tmp_path))
    assert completed.returncode == 2
    assert f"{tmp_path}: cannot read the baseline: Is a directory" in " ".join(completed.stderr.split())
    assert "Traceback" not in completed.stderr


@pytest.mark.parametrize("option, message", [
    (("--seed", "-1"), "--seed must be a whole number >= 0, found -1"),
    (("--batch-size", "0"), "--batch-size must be a whole number >= 1, found 0"),
    (("--time-limit", "-1"), "--time-limit must be a finite number >= 0, found -1.0")])
def test_negative_seed_empty_batches_and_negative_time_limits_are_input_errors(option, message):
    # A negative seed reached numpy's default_rng, which raised a traceback.
    completed = run_simbench("pack", "squad_1_1_384", "--strategy", "all", *option)
    assert completed.returncode == 2
    assert message in " ".join(completed.stderr.split())
    assert "Traceback" not in completed.stderr and completed.stdout == ""


def test_bench_without_pytest_benchmark_says_what_to_install(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "pytest_benchmark" else real_find_spec(name, *args))
    result = RUNNER.invoke(app, ["bench", "--quick"])
    assert "needs pytest-benchmark" in str(result.exception)


def test_check_baseline_refuses_a_max_length_it_would_ignore():
    result = RUNNER.invoke(app, ["pack", "squad_1_1_384", "--check-baseline", "--max-length", "400"])
    assert "leave out --max-length" in str(result.exception)


def test_error_message_stays_on_one_line_however_long(tmp_path):
    path = tmp_path / ("a_rather_long_folder_name_" * 4) / "bad.csv"
    path.parent.mkdir()
    path.write_text("length,count\n1,3\n2,-1\n")
    completed = run_simbench("pack", str(path))
    assert completed.stderr.count("\n") == 1 and f"{path}:3: count must not be negative" in completed.stderr


def test_interrupt_exits_quietly_with_status_130(monkeypatch, capsys):
    import simbench.cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(simbench.cli, "app", interrupted)
    with pytest.raises(SystemExit) as caught:
        simbench.cli.main()
    assert caught.value.code == 130
    assert "interrupted" in capsys.readouterr().err


def test_each_gap_is_to_the_bound_at_the_depth_the_packing_had_as_in_a_report(small_histogram):
    from simbench.experiment import run_experiment
    from simbench.scenario import Scenario

    result = RUNNER.invoke(app, ["pack", str(small_histogram), "--json", "--bound"])
    assert result.exit_code == 0, result.output
    metrics = {record["strategy"]: record for record in map(json.loads, result.stdout.splitlines())}
    # Padding, one sequence per pack, is bounded at depth 1: no gap (not 100 % to packs it may not fill).
    assert (metrics["none"]["bound_depth"], metrics["none"]["gap_to_bound"]) == (1, 0.0)
    assert metrics["nnlshp"]["max_depth"] == metrics["nnlshp"]["bound_depth"] == 3  # its default depth, not "max"
    scenario = Scenario(name="gaps", dataset={"histogram": str(small_histogram)}, strategies=["none", "nnlshp"],
                        devices=[1], steps=2, outputs={"lp_bounds": True})
    packing = run_experiment(scenario, scenario.dataset.load()).packing.set_index("strategy")
    for name in ("none", "nnlshp"):
        assert packing.loc[name, "gap_to_bound"] == pytest.approx(metrics[name]["gap_to_bound"])
    table = RUNNER.invoke(app, ["pack", str(small_histogram), "--strategy", "nnlshp"]).stdout
    assert "(3 used)" not in table and "max" not in table.split("nnlshp")[0].splitlines()[-1]


def test_optimal_states_its_proof_in_json_and_in_the_table(small_histogram):
    result = RUNNER.invoke(app, ["pack", str(small_histogram), "--strategy", "optimal", "--max-depth", "3", "--json",
                                 "--bound"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    assert (metrics["proven_optimal"], metrics["proof"]) == (True, "proven optimal (LP bound)")
    assert metrics["packs"] == metrics["lower_bound_packs"]
    table = RUNNER.invoke(app, ["pack", str(small_histogram), "--strategy", "optimal", "--max-depth", "3"]).stdout
    assert "proof" in table and "proven optimal (LP bound)" in table


def test_a_time_limit_of_zero_leaves_the_gap_open_and_says_why():
    # Wikipedia at depth 3: the heuristics and the LP rounding stay 2 packs over the bound without the search.
    result = RUNNER.invoke(app, ["pack", "wikipedia_512", "--strategy", "optimal", "--max-depth", "3", "--json",
                                 "--time-limit", "0"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    assert metrics["proven_optimal"] is False
    assert metrics["proof"] == "open: 2 packs over the bound (time limit of 0 s)"
