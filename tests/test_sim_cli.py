"""`simbench simulate`: JSON lines, the table, and one-line errors for bad input."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from simbench.cli import app
from simbench.commands.common import parse_counts, parse_strategies
from simbench.errors import InputError

RUNNER = CliRunner()


def test_json_prints_one_object_per_strategy_and_device_count():
    result = RUNNER.invoke(app, ["simulate", "squad_1_1_384", "--strategy", "spfhp:2", "-s", "unpad",
                                 "--devices", "1,4", "--steps", "5", "--batch-size", "4", "--json"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(record["strategy"], record["devices"]) for record in records] == [
        ("none", 1), ("none", 4), ("pad-to-longest", 1), ("pad-to-longest", 4), ("spfhp:2", 1), ("spfhp:2", 4),
        ("unpad", 1), ("unpad", 4)]
    for record in records:
        assert {"strategy", "devices", "speedup", "tokens_per_s", "sequences_per_s", "step_seconds_mean",
                "engine"} <= set(record)
        assert record["speedup"] > 0 and record["engine"] in ("simpy", "vectorized")
        assert record["reference"] == "pad-to-longest"


def test_baseline_names_what_every_speedup_is_over():
    result = RUNNER.invoke(app, ["simulate", "squad_1_1_384", "-s", "unpad", "--baseline", "sort", "--devices", "1,4",
                                 "--steps", "5", "--batch-size", "4", "--json"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert {record["strategy"] for record in records} == {"none", "sort", "unpad"}
    assert {record["reference"] for record in records} == {"sort"}
    assert all(record["speedup"] == 1.0 for record in records if record["strategy"] == "sort")


def test_comma_separated_strategies_simulate_as_the_repeated_option_does():
    # A plan's own `:` and `=` survive; only commas separate.
    arguments = ["simulate", "squad_1_1_384", "--devices", "1,2", "--steps", "4", "--batch-size", "4", "--json"]
    repeated = RUNNER.invoke(app, [*arguments, "-s", "spfhp:3", "-s", "unpad", "-s", "vts-bucketed:window=2"])
    listed = RUNNER.invoke(app, [*arguments, "-s", "spfhp:3, unpad,vts-bucketed:window=2"])
    assert repeated.exit_code == 0 and listed.exit_code == 0, listed.output
    assert listed.stdout == repeated.stdout
    assert {json.loads(line)["strategy"] for line in listed.stdout.splitlines()} >= {"spfhp:3", "unpad"}
    assert parse_strategies(["a:1,b", "c:x=2"]) == ["a:1", "b", "c:x=2"] and parse_strategies(None) is None


def test_table_names_every_strategy():
    result = RUNNER.invoke(app, ["simulate", "squad_1_1_384", "-s", "vts", "--devices", "2", "--steps", "3",
                                 "--batch-size", "4", "--engine", "vectorized"])
    assert result.exit_code == 0, result.output
    assert "vts" in result.stdout and "none" in result.stdout and "vectorized" in result.stdout


def test_bad_device_list_is_an_input_error_naming_the_bad_entry():
    assert parse_counts("1, 8,64", "--devices") == [1, 8, 64]
    with pytest.raises(InputError, match="'two'"):
        parse_counts("1,two,4", "--devices")


def test_bad_strategy_exits_with_one_line_and_no_traceback():
    completed = subprocess.run([sys.executable, "-c", "from simbench.cli import main; main()", "simulate",
                                "squad_1_1_384", "-s", "nosuch", "--devices", "1"],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert "unknown strategy 'nosuch'" in completed.stderr.replace("\n", " ")
    assert "Traceback" not in completed.stderr


@pytest.mark.parametrize("arguments, message", [
    (["--seed", "-1"], "seed must be a whole number >= 0, found -1"),
    (["--devices", "99999999999999"], "--devices must be whole numbers in 1..1,048,576, found 99999999999999"),
    (["--devices", "1048577"], "--devices must be whole numbers in 1..1,048,576, found 1048577"),
    (["--devices", "1,,2"], "found ''"),
])
def test_bad_seed_and_oversized_clusters_are_input_errors(arguments, message):
    result = RUNNER.invoke(app, ["simulate", "squad_1_1_384", "-s", "unpad", "--devices", "1", "--steps", "2",
                                 *arguments])
    assert isinstance(result.exception, InputError), result.output
    assert message in str(result.exception)


def test_errors_through_a_pipe_start_on_the_first_line():
    completed = subprocess.run([sys.executable, "-c", "from simbench.cli import main; main()", "simulate",
                                "squad_1_1_384", "-s", "unpad", "--devices", "1", "--steps", "2", "--seed", "-1"],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert completed.stderr.startswith("error: --seed must be a whole number >= 0")


def test_starting_the_cli_imports_nothing_heavy():
    # `simbench --help` would wait for these; each command imports what it needs when it runs.
    code = ("import sys, simbench.cli; "
            "print(sorted(m for m in ('numpy', 'pandas', 'scipy', 'matplotlib', 'torch', 'rich', 'pydantic', 'yaml') "
            "if m in sys.modules))")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "[]"


def test_version_prints_the_package_version():
    import simbench

    result = RUNNER.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"simbench {simbench.__version__}"


def test_table_says_what_each_speedup_is_over_and_warns_when_a_step_outdraws_the_dataset(tmp_path):
    tiny = tmp_path / "tiny.csv"
    tiny.write_text("length,count\n10,30\n50,40\n64,30\n")  # 100 sequences
    result = RUNNER.invoke(app, ["simulate", str(tiny), "-s", "vts", "-s", "spfhp:3", "--devices", "1,16",
                                 "--steps", "3", "--batch-size", "8", "--engine", "vectorized"])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip() + "@" + line.split("│")[2].strip(): line for line in result.stdout.splitlines()
            if line.startswith("│")}
    assert "vts-padded" in rows["vts@1"] and "pad-to-longest" in rows["spfhp:3@1"]
    # 1 device x 8 packs of at most 3 sequences is fewer than 100; 16 x 8 padded sequences are more.
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning")]
    assert len(warnings) == 1 and "the dataset has 100" in warnings[0] and "from 16 devices" in warnings[0]


def test_outside_a_terminal_each_finished_stage_is_a_line_and_quiet_silences_them(tmp_path):
    tiny = tmp_path / "tiny.csv"
    tiny.write_text("length,count\n10,300\n50,400\n64,300\n")
    arguments = ["simulate", str(tiny), "-s", "spfhp:2", "--devices", "1,2", "--steps", "2", "--batch-size", "2",
                 "--baseline", "none"]
    lines = RUNNER.invoke(app, arguments).stderr.splitlines()
    stages = [line.split("] ", 1)[1] for line in lines if line.startswith("[")]
    assert stages == ["packed none: 1,000 packs in " + stages[0].rsplit(" in ", 1)[1],
                      "simulated none on 1, 2 devices", stages[2], "simulated spfhp:2 on 1, 2 devices"]
    assert stages[2].startswith("packed spfhp:2: ")
    assert all(float(line[1:line.index(" s]")]) >= 0 for line in lines if line.startswith("["))
    assert RUNNER.invoke(app, [*arguments, "--quiet"]).stderr == ""
    packed = RUNNER.invoke(app, ["pack", str(tiny), "-s", "spfhp"]).stderr
    assert packed.startswith("[") and "packed spfhp:max: " in packed
    assert RUNNER.invoke(app, ["pack", str(tiny), "-s", "spfhp", "-q"]).stderr == ""


REPLICA_SCENARIO = """
name: replicas
dataset: {histogram: squad_1_1_384}
model: llama-3.1-70b
hardware: {profile: h100-sxm, overrides: {hbm_capacity_bytes: 1.0e15}}  # of figures, not memory: HBM without limit
gpus_per_replica: 8
strategies: [spfhp:3, unpad]
devices: [1, 4, 128]
batch_size: 4
steps: 10
seed: 3
compare_at: as-configured
outputs: {lp_bounds: false}
"""


def test_gpus_per_replica_gives_the_figures_of_the_scenario_key(tmp_path):
    from simbench.experiment import run_experiment
    from simbench.scenario import parse_scenarios

    (scenario,) = parse_scenarios(REPLICA_SCENARIO, source="replicas.yaml", base_dir=tmp_path)
    scaling = run_experiment(scenario).scaling.set_index(["strategy", "devices"])
    result = RUNNER.invoke(app, ["simulate", "squad_1_1_384", "-s", "spfhp:3", "-s", "unpad", "--model", "llama-3.1-70b",
                                 "--hardware", "h100-sxm", "--gpus-per-replica", "8", "--devices", "1,4,128",
                                 "--batch-size", "4", "--steps", "10", "--seed", "3", "--json",
                                 "--set", "hbm_capacity_bytes=1.0e15"])  # as the scenario: figures, not memory
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == len(scaling) == 12  # none, the baseline pad-to-longest, spfhp:3, unpad
    for record in records:
        expected = scaling.loc[(record["strategy"], record["devices"])]
        assert record["gpus"] == 8 * record["devices"] == expected["gpus"]
        for column in ("speedup", "tokens_per_s", "tokens_per_s_per_gpu", "step_seconds_mean"):
            assert record[column] == expected[column], column
    # A replica of 8 GPUs is faster than one GPU but not 8 times: per-GPU throughput drops.
    one_gpu = RUNNER.invoke(app, ["simulate", "squad_1_1_384", "-s", "spfhp:3", "--model", "llama-3.1-70b", "--hardware",
                                  "h100-sxm", "--devices", "1", "--batch-size", "4", "--steps", "10", "--seed", "3",
                                  "--json", "--set", "hbm_capacity_bytes=1.0e15"])
    single = {record["strategy"]: record for record in map(json.loads, one_gpu.stdout.splitlines())}
    replica = scaling.loc[("spfhp:3", 1)]
    assert single["spfhp:3"]["tokens_per_s"] < replica["tokens_per_s"] < 8 * single["spfhp:3"]["tokens_per_s"]


@pytest.mark.parametrize("value", [0, -2])
def test_gpus_per_replica_refuses_what_the_scenario_key_refuses(tmp_path, value):
    from simbench.scenario import parse_scenarios

    result = RUNNER.invoke(app, ["simulate", "squad_1_1_384", "-s", "spfhp", "--gpus-per-replica", str(value),
                                 "--devices", "1", "--steps", "2"])
    assert isinstance(result.exception, InputError), result.output
    assert str(result.exception) == f"--gpus-per-replica must be a whole number >= 1, found {value}"
    message = f"replicas.yaml:6: gpus_per_replica: must be a whole number >= 1, found {value}"
    with pytest.raises(InputError, match=message):
        parse_scenarios(REPLICA_SCENARIO.replace("gpus_per_replica: 8", f"gpus_per_replica: {value}"),
                        source="replicas.yaml", base_dir=tmp_path)


def test_a_table_piped_into_80_columns_cuts_no_number_or_header_short(capsys):
    """A pipe is 80 columns to rich: a table wider than that widens to its headers and its cells' longest words
    (with no_wrap, whole cells) instead of cutting them with an ellipsis; prose still folds."""
    from simbench.commands.common import print_table

    columns = [f"column {index}" for index in range(11)]
    numbers = [f"{index * 1_234_567.891:,.3f}" for index in range(11)]
    print_table("wide", columns, [numbers, ["a long prose cell that may fold " * 3, *numbers[1:]]], left=["column 0"])
    text = capsys.readouterr().out
    assert "…" not in text
    assert all(header in text for header in columns) and all(number in text for number in numbers[1:])
    assert max(len(line) for line in text.splitlines()) < 300  # the prose folded, not laid out on one line
    print_table(None, ["label", "value"], [["packed-varlen:lpfhp:max", "proven optimal (LP bound)"]] * 30,
                no_wrap=True)
    assert "proven optimal (LP bound)" in capsys.readouterr().out
