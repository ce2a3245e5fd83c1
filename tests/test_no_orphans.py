"""Worker processes end with the process they work for, however it ends: killed outright (SIGKILL runs no
clean-up in it) or terminated, no worker is left 2 s later."""

import os
import signal
import subprocess
import sys
import time

import pytest

psutil = pytest.importorskip("psutil")

SCENARIO = """name: long
dataset: {histogram: wikipedia_512}
strategies: [spfhp, lpfhp, unpad, sort]
devices: [1, 8, 64]
steps: 1000
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_no_worker_outlives_a_killed_run_by_two_seconds(tmp_path, how):
    path = tmp_path / "long.yaml"
    path.write_text(SCENARIO)
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment = {**os.environ, "SIMBENCH_WORKERS": "2",
                   "PYTHONPATH": os.pathsep.join([checkout, os.environ.get("PYTHONPATH", "")])}
    # cwd: `python -m` looks in the current folder first, which may hold another checkout's simbench.
    run = subprocess.Popen([sys.executable, "-m", "simbench.cli", "run", str(path), "--out", str(tmp_path / "out")],
                           env=environment, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        parent = psutil.Process(run.pid)
        deadline = time.monotonic() + 120
        while len(parent.children(recursive=True)) < 2 and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the workers' watch starts as they do
        workers = parent.children(recursive=True)
        assert len(workers) >= 2 and run.poll() is None, "the run's workers never started, or it ended first"
    except BaseException:
        run.kill()
        raise
    run.send_signal(how)
    run.wait()
    time.sleep(2)
    left = [worker for worker in workers if worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE]
    for worker in left:
        worker.kill()
    assert not left, [worker.cmdline() for worker in left]
