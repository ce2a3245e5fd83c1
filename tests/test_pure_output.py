"""stdout carries results only: `--json` parses line by line, `--quiet` leaves the table alone.

Each command runs the real entry point in a subprocess, since a solver printing from C (HiGHS's
banner) writes to file descriptor 1, which neither CliRunner nor capsys sees.
"""

import json
import subprocess
import sys

import pytest

SMALL_COUNTS = {length: (length * 7) % 5 for length in range(1, 65)}


def run_simbench(*arguments, cwd=None):
    completed = subprocess.run([sys.executable, "-c", "from simbench.cli import main; main()", *arguments],
                               capture_output=True, text=True, timeout=300, cwd=cwd)
    assert completed.returncode == 0, completed.stderr
    return completed


@pytest.fixture(scope="module")
def small_histogram(tmp_path_factory):
    path = tmp_path_factory.mktemp("histogram") / "small.csv"
    path.write_text("length,count\n" + "".join(f"{length},{count}\n" for length, count in SMALL_COUNTS.items()))
    return path


# Every command here solves an LP (the bound, `optimal`), so HiGHS is built in each.
JSON_COMMANDS = {
    "pack": ["pack", "{histogram}", "--strategy", "all", "--max-depth", "3", "--bound", "--json"],
    "bound": ["bound", "{histogram}", "--max-depth", "3", "--json"],
    "simulate": ["simulate", "{histogram}", "--strategy", "all", "--devices", "1,2", "--steps", "3",
                 "--batch-size", "8", "--json"],
    "list": ["list", "--json"],
    "validate": ["validate", "squad384", "--json"],
}


# `bound` prints no progress, so it has no --quiet.
@pytest.mark.parametrize("command, quiet", [("pack", False), ("pack", True), ("bound", False), ("simulate", False),
                                            ("simulate", True), ("list", False), ("validate", False)])
def test_json_stdout_is_one_json_object_per_line(command, quiet, small_histogram):
    arguments = [argument.format(histogram=small_histogram) for argument in JSON_COMMANDS[command]]
    if quiet:
        arguments.append("--quiet")
    lines = run_simbench(*arguments).stdout.splitlines()
    assert lines
    for line in lines:
        assert isinstance(json.loads(line), dict), line


@pytest.mark.parametrize("command", ["pack", "simulate"])
def test_quiet_table_is_all_of_stdout(command, small_histogram):
    arguments = [argument.format(histogram=small_histogram) for argument in JSON_COMMANDS[command][:-1]]
    completed = run_simbench(*arguments, "--quiet")
    assert completed.stdout.lstrip().startswith("small") and "HiGHS" not in completed.stdout
    assert completed.stderr == ""


def test_quiet_run_prints_nothing_on_stdout(small_histogram, tmp_path):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(f"name: small\ndataset:\n  histogram: {small_histogram}\nmodel: bert-large\nhardware: a100\n"
                        "strategies: [none, {name: optimal, max_depth: 3}]\ndevices: [1, 2]\nbatch_size: 8\n"
                        "steps: 3\nseed: 0\n")
    completed = run_simbench("run", str(scenario), "--quiet", "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert completed.stdout == ""
    assert (tmp_path / "report" / "summary.md").is_file()


def test_sweep_and_run_progress_go_to_stderr_leaving_stdout_empty(tmp_path):
    # Their results are files; every line they print (estimate, progress, where the report went) is progress.
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text("name: tiny\nbase:\n  dataset: {histogram: squad_1_1_384}\n  strategies: [spfhp:3, unpad]\n"
                     "  batch_size: 4\n  steps: 3\n  outputs: {plots: [], lp_bounds: false}\n"
                     "axes:\n  devices: [1, 2]\n  batch_size: [4, 8]\nreport: {x: devices, y: batch_size}\n")
    swept = run_simbench("sweep", str(sweep), "--workers", "0", "--out", str(tmp_path / "sweep"))
    assert swept.stdout == "" and "cells done" in swept.stderr and "wrote" in swept.stderr
    ran = run_simbench("run", "squad384", "--quick", "--out", str(tmp_path / "run"))
    assert ran.stdout == "" and "wrote" in ran.stderr and "simulated" in ran.stderr
