"""A simbench command run with plug-ins from a folder, every process it starts watched: what the tests of plug-ins
that never return need (tests/test_plugin_processes.py, tests/test_plugin_calls.py)."""

import os
import subprocess
import sys
import time

import psutil

HANG_SECONDS = 60  # catches a command that never ends, never a slow machine


def start_simbench(folder, *arguments, timeout_seconds: float = 3) -> subprocess.Popen:
    """`python -m simbench.cli ARGUMENTS` in `folder`, whose plug-ins it imports, with this checkout's simbench, no
    worker processes and SIMBENCH_PLUGIN_TIMEOUT `timeout_seconds`."""
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment = {**os.environ, "SIMBENCH_PLUGIN_TIMEOUT": str(timeout_seconds), "SIMBENCH_WORKERS": "0",
                   "PYTHONPATH": os.pathsep.join([checkout, str(folder), os.environ.get("PYTHONPATH", "")])}
    # cwd: `python -m` looks in the current folder first, which may hold another checkout's simbench.
    return subprocess.Popen([sys.executable, "-m", "simbench.cli", *arguments], env=environment, cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_watching_children(folder, *arguments, timeout_seconds: float = 3):
    """(exit status, stdout, stderr, every process the command started while it ran); a command still running
    after HANG_SECONDS is killed and fails the test."""
    command = start_simbench(folder, *arguments, timeout_seconds=timeout_seconds)
    parent, seen = psutil.Process(command.pid), set()
    deadline = time.monotonic() + HANG_SECONDS
    while command.poll() is None and time.monotonic() < deadline:
        try:
            seen.update(parent.children(recursive=True))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    if command.poll() is None:
        command.kill()
    stdout, stderr = command.communicate()
    assert time.monotonic() < deadline, f"{arguments}: no answer within {HANG_SECONDS} s"
    return command.returncode, stdout, stderr, seen


def alive(processes) -> list:
    """The processes still running (not zombies)."""
    return [process for process in processes if process.is_running() and process.status() != psutil.STATUS_ZOMBIE]
