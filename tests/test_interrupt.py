"""Ctrl-C (SIGINT to the whole process group, as a terminal sends it) at any moment of a run: one line,
exit status 130, no traceback, no process left in the group, nothing partial in the output folder; and a run
that ends normally leaves no process of its group behind either."""

import os
import signal
import subprocess
import sys
import time

import pytest

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIKI512 = os.path.join(CHECKOUT, "scenarios", "wiki512.yaml")
SMALL = """name: small
dataset: {histogram: squad_1_1_384}
strategies: [spfhp, nnlshp, unpad]
devices: [1, 8]
steps: 20
"""


def as_a_shell_starts_it() -> None:
    """In the child before it runs simbench: SIGINT at its default and unblocked, as a shell starts a command,
    whatever this test process inherited or was left with (CI once ran it with SIGINT ignored: every run then
    finished despite the Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def start_run(scenario, out, cache, *options):
    """`simbench run` in a session of its own (its pid is its process group's id), with two workers."""
    environment = {**os.environ, "SIMBENCH_WORKERS": "2", "SIMBENCH_CACHE": str(cache),
                   "PYTHONPATH": os.pathsep.join([CHECKOUT, os.environ.get("PYTHONPATH", "")])}
    # cwd: `python -m` looks in the current folder first, which may hold another checkout's simbench.
    return subprocess.Popen([sys.executable, "-m", "simbench.cli", "run", str(scenario), "--out", str(out), *options],
                            env=environment, cwd=os.path.dirname(str(out)), start_new_session=True,
                            preexec_fn=as_a_shell_starts_it, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def group_left(group: int) -> bool:
    """Whether a live process of the group is left (a zombie has ended; where no init reaps orphans, as in some
    containers, an interrupted run's resource tracker stays one)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def settle(group: int, seconds: float = 2.0) -> bool:
    """Whether processes of the group are still there `seconds` after the run's own exit (none should be)."""
    deadline = time.monotonic() + seconds
    while group_left(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = group_left(group)
    if left:
        os.killpg(group, signal.SIGKILL)
    return left


@pytest.mark.parametrize("seconds", [0.6, 2.0, 5.0, 9.0])
def test_ctrl_c_at_any_moment_is_one_line_and_leaves_nothing(tmp_path, seconds):
    out = tmp_path / "wiki512"
    run = start_run(WIKI512, out, tmp_path / "cache", "--quiet")
    time.sleep(seconds)
    if run.poll() is not None:
        pytest.skip("the run ended before the signal")
    os.killpg(run.pid, signal.SIGINT)
    _, stderr = run.communicate(timeout=60)
    # The run's own exit is immediate, but its workers are its children: none may outlive it.
    assert not group_left(run.pid) or not settle(run.pid, 0.5), "processes of the run's group outlived it"
    assert run.returncode == 130, stderr
    assert stderr == "interrupted\n", stderr
    assert not out.exists()
    assert [path.name for path in tmp_path.iterdir() if path.name != "cache"] == []  # no staging folder either


def test_ctrl_c_leaves_progress_lines_and_one_more(tmp_path):
    run = start_run(WIKI512, tmp_path / "wiki512", tmp_path / "cache")
    time.sleep(4.0)
    os.killpg(run.pid, signal.SIGINT)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 130
    assert "Traceback" not in stderr and stderr.endswith("interrupted\n"), stderr
    assert not settle(run.pid, 0.5)


def test_a_finished_run_leaves_no_process_in_its_group(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    run = start_run(path, tmp_path / "small", tmp_path / "cache", "--quiet")
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr
    assert stderr.startswith("wrote ") and stderr.count("\n") == 1, stderr  # no warning of a leaked resource
    assert not group_left(run.pid), "processes of the run's group outlived it"
    assert (tmp_path / "small" / "summary.md").exists()


SWEEP = """name: seeds
base:
  dataset: {histogram: squad_1_1_384}
  strategies: [spfhp:3, unpad]
  steps: 20
axes:
  seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
  devices: [1, 8]
"""


def test_ctrl_c_of_a_sweep_on_a_local_dask_cluster_is_one_line_without_a_workers_traceback(tmp_path):
    """Dask's workers are forked from the sweep's process and would run its Ctrl-C handler, each printing the
    traceback of its own stop; they start with SIGINT blocked instead, and the sweep ends them."""
    pytest.importorskip("distributed")
    path = tmp_path / "seeds.yaml"
    path.write_text(SWEEP)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([CHECKOUT, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.Popen([sys.executable, "-m", "simbench.cli", "sweep", str(path), "--out", str(tmp_path / "out"),
                            "--workers", "2"], env=environment, cwd=str(tmp_path), start_new_session=True,
                           preexec_fn=as_a_shell_starts_it, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    while not any("cells done" in line for line in lines):  # the workers are running cells
        line = run.stderr.readline()
        if not line:
            pytest.skip("the sweep ended before a cell was done")
        lines.append(line)
    os.killpg(run.pid, signal.SIGINT)
    _, rest = run.communicate(timeout=120)
    stderr = "".join(lines) + rest
    if run.returncode == 0:
        pytest.skip("the sweep finished before the signal")
    assert run.returncode == 130, stderr
    assert "Traceback" not in stderr and stderr.endswith("interrupted\n"), stderr
    assert not settle(run.pid, 2.0), "processes of the sweep's group outlived it"


WORKER_KILLED_MID_SEND = '''
import sys, time
from simbench.workers import ReportWorkers

SIZE = 300_000_000  # a result that takes the worker most of a second to send


def main(fraction):
    workers = ReportWorkers(processes=1)
    workers.submit(int, 0).result()  # started and idle
    start = time.perf_counter()
    workers.submit(bytes, SIZE).result()
    whole = time.perf_counter() - start
    try:
        with workers:
            workers.submit(bytes, SIZE)
            time.sleep(fraction * whole)  # the worker is sending its result
            raise RuntimeError("stopped")
    except RuntimeError:
        pass


if __name__ == "__main__":
    main(float(sys.argv[1]))
'''


@pytest.mark.parametrize("fraction", [0.6, 0.75])
def test_a_worker_ended_while_sending_its_result_does_not_hold_the_process_at_exit(tmp_path, fraction):
    """Interrupted while a worker sends a large result (a packing): the worker is ended mid-message, and the
    pool's reader, waiting for the rest, must not hold the interpreter's exit (a Ctrl-C of `run` once printed
    `interrupted` and then never ended)."""
    script = tmp_path / "mid_send.py"
    script.write_text(WORKER_KILLED_MID_SEND)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([CHECKOUT, os.environ.get("PYTHONPATH", "")])}
    ended = subprocess.run([sys.executable, str(script), str(fraction)], env=environment, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert ended.returncode == 0 and ended.stderr == "", ended.stderr


def _exit_cut_short_despite(hang: str) -> None:
    """`_exit_within` in a fresh interpreter whose exit would hang on `hang`, a line of Python: the exit is cut
    short after its grace time, with the status the interrupt gives."""
    program = f"import atexit, threading, time\nfrom simbench.cli import _exit_within\n{hang}\n_exit_within(130, 1.0)\n"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([CHECKOUT, os.environ.get("PYTHONPATH", "")])}
    start = time.monotonic()
    ended = subprocess.run([sys.executable, "-c", program], env=environment, timeout=30, capture_output=True)
    assert ended.returncode == 130, ended.stderr
    assert time.monotonic() - start < 15


def test_an_exit_that_hangs_after_the_interrupt_is_cut_short():
    """The interpreter's exit after an interrupt once waited forever on a helper thread."""
    _exit_cut_short_despite("atexit.register(time.sleep, 60)")


def test_an_exit_that_hangs_joining_an_executors_threads_is_cut_short():
    """Where concurrent.futures joins its executors' threads at exit (threading's exit hooks, run while the main
    thread is still alive), a thread blocked for good once held an interrupted `run` alive (CI, Ctrl-C at 5 s)."""
    _exit_cut_short_despite("threading._register_atexit(time.sleep, 60)  # as concurrent.futures registers its join")


def test_a_caught_exit_after_the_interrupt_is_not_cut_short():
    """A caller that catches the exit (as a test of `main` does) goes on past the grace time."""
    from simbench.cli import _exit_within

    with pytest.raises(SystemExit) as caught:
        _exit_within(130, 0.1)
    assert caught.value.code == 130
    time.sleep(0.5)  # the timer has fired, and this process is still here
