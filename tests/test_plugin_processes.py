"""A plug-in strategy packs in a child process that is killed when it overruns: one that sleeps, loops or
holds the interpreter's lock ends the real command within its timeout, with one line and exit status 2,
and leaves no process behind; one that raises is named with what it raised."""

import json
import signal
import time

import pytest

psutil = pytest.importorskip("psutil")

from child_processes import HANG_SECONDS, alive, run_watching_children, start_simbench  # noqa: E402

PLUGIN = """
import numpy as np
from simbench.strategies import Strategy
from simbench.strategies.packing import Packing


def alone(histogram, max_length, max_depth, options):
    return Packing.from_rows("alone", max_length, max_depth, histogram.lengths[:, None], histogram.counts)


def sleeps(histogram, max_length, max_depth, options):
    import time
    time.sleep(3600)


def loops(histogram, max_length, max_depth, options):
    while True:
        pass


def holds_the_lock(histogram, max_length, max_depth, options):
    import re
    re.match(r"(a+)+$", "a" * 64 + "b")  # backtracks for ages inside C, never letting go of the GIL


def leaves_a_thread(histogram, max_length, max_depth, options):
    import threading
    import time
    threading.Thread(target=time.sleep, args=(3600,)).start()  # not a daemon: it would keep a process alive
    raise ValueError("no packs today")


ALONE, SLEEPS, LOOPS = (Strategy("alone", "one a row", alone), Strategy("sleeps", "sleeps", sleeps),
                        Strategy("loops", "loops", loops))
HOLDS, THREAD = Strategy("holds", "holds the GIL", holds_the_lock), Strategy("thread", "raises", leaves_a_thread)
"""
ENTRY_POINTS = "".join(f"{name} = stoppable_plugin:{item}\n" for name, item in
                       [("alone", "ALONE"), ("sleeps", "SLEEPS"), ("loops", "LOOPS"), ("holds", "HOLDS"),
                        ("thread", "THREAD")])


@pytest.fixture
def installed(tmp_path):
    """A folder that installs the plug-ins above (a module and its distribution's entry points)."""
    (tmp_path / "stoppable_plugin.py").write_text(PLUGIN)
    metadata = tmp_path / "stoppable_plugin-1.0.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: stoppable-plugin\nVersion: 1.0\n")
    (metadata / "entry_points.txt").write_text("[simbench.strategies]\n" + ENTRY_POINTS)
    return tmp_path


@pytest.mark.parametrize("name", ["sleeps", "loops", "holds"])
def test_a_plugin_that_never_returns_ends_the_command_with_one_line_and_no_process_left(installed, name):
    status, _, stderr, started = run_watching_children(installed, "pack", "squad_1_1_384", "--strategy", name)
    assert status == 2, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert f"the plug-in strategy {name!r} did not return within 3 s and was stopped" in stderr
    assert started, "the plug-in did not run in a child process"
    time.sleep(2)
    left = alive(started)
    for process in left:
        process.kill()
    assert not left, [process.cmdline() for process in left]


def test_a_plugin_that_raises_is_named_with_what_it_raised_even_with_a_thread_left_running(installed):
    status, _, stderr, started = run_watching_children(installed, "pack", "squad_1_1_384", "--strategy",
                                                       "thread")
    assert status == 2 and "Traceback" not in stderr, stderr
    assert "the plug-in strategy 'thread' failed: ValueError: no packs today" in stderr
    time.sleep(2)
    assert not alive(started)


def test_a_well_behaved_plugin_packs_in_its_process_as_it_would_here(installed):
    command = start_simbench(installed, "pack", "squad_1_1_384", "--strategy", "alone", "--json")
    stdout, stderr = command.communicate(timeout=HANG_SECONDS)
    assert command.returncode == 0, stderr
    from simbench.histogram import load_histogram

    histogram = load_histogram("squad_1_1_384")
    record = json.loads(stdout)
    # One sequence a row: as many packs as sequences, every slot of a row but its sequence padding.
    assert record["packs"] == record["sequences"] == histogram.sequences
    assert record["padding_tokens"] == histogram.sequences * histogram.max_length - histogram.real_tokens


def test_killing_the_command_while_a_plugin_packs_leaves_no_process(installed):
    command = start_simbench(installed, "pack", "squad_1_1_384", "--strategy", "sleeps")
    parent = psutil.Process(command.pid)
    deadline = time.monotonic() + HANG_SECONDS
    while not parent.children(recursive=True) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the plug-in's process started and sleeping
    started = parent.children(recursive=True)
    command.send_signal(signal.SIGKILL)
    command.communicate()
    time.sleep(2)
    left = alive(started)
    for process in left:
        process.kill()
    assert started and not left, [process.cmdline() for process in left]


def _guarded_sum(answers) -> None:
    from simbench.plugins import guarded

    answers.put(guarded("the demo plug-in", sum, [1, 2], timeout=HANG_SECONDS))


def test_a_process_that_may_not_start_processes_runs_the_plugin_in_a_thread():
    """A Dask worker is a daemonic process: starting the plug-in's process there failed every cell."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    daemon = context.Process(target=_guarded_sum, args=(answers,), daemon=True)
    daemon.start()
    try:
        assert answers.get(timeout=HANG_SECONDS) == 3
    finally:
        daemon.join(HANG_SECONDS)
