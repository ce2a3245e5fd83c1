"""Start-up time of the command line, as a user meets it: a fresh `simbench` process each round
(targets on this 2-core machine: `simbench --help` under 0.25 s, `simbench list` under 0.3 s)."""

import subprocess
import sys

import pytest

# The installed `simbench` script is this call; starting it through the interpreter keeps the
# benchmark on the checkout it runs in, whatever is installed.
SIMBENCH = [sys.executable, "-c", "from simbench.cli import main; main()"]
TARGET_SECONDS = {"--help": 0.25, "list": 0.3}


@pytest.mark.parametrize("command", list(TARGET_SECONDS))
def test_cli_start_up(benchmark, command):
    def run_once():
        return subprocess.run([*SIMBENCH, command], capture_output=True, text=True, check=True)

    completed = benchmark.pedantic(run_once, rounds=3, iterations=1, warmup_rounds=1)
    assert "Usage" in completed.stdout if command == "--help" else "Packers and batchers" in completed.stdout
    benchmark.extra_info["target_seconds"] = TARGET_SECONDS[command]
