"""A plug-in cost model's and plan's calls, made many times a run, are interrupted when they overrun: one that
sleeps or loops ends `simbench run` and `simulate` within SIMBENCH_PLUGIN_TIMEOUT with one line and exit
status 2, writes no report and leaves no process behind; one that raises is named with what it raised; a
well-behaved one prices as before."""

import signal
import time

import numpy as np
import pytest

pytest.importorskip("psutil")  # the processes a command starts are watched with it

from child_processes import alive, run_watching_children as watched  # noqa: E402

PLUGIN = """
import itertools
import time

import numpy as np
from simbench.costmodels import CostModelType, StepCosts
from simbench.sim.batching import unpadded_batches
from simbench.sim.plans import BatchSource, ExecutionPlan, PlanType
from simbench.costmodels.base import ExecutionMode
from simbench.sim.pricing import price_batches


class Flat:
    def __init__(self, behaviour):
        self.behaviour = behaviour

    def step_costs(self, batches, mode):
        if self.behaviour == "sleeps":
            time.sleep(3600)
        if self.behaviour == "loops":
            while True:
                try:
                    while True:
                        pass
                except Exception:  # swallows the first interruption, and loops again
                    pass
        if self.behaviour == "swallows":
            while True:
                try:
                    time.sleep(3600)
                except BaseException:  # swallows every interruption
                    pass
        if self.behaviour == "holds":
            sum(itertools.repeat(1, 10 ** 13))  # a loop in C that holds the interpreter and never looks at signals
        if self.behaviour == "raises":
            raise ValueError("no prices today")
        zeros = np.zeros(batches.batches)
        return StepCosts(np.full(batches.batches, 0.25), zeros, zeros)

    def allreduce_seconds(self, devices):
        return 0.0


def flat(behaviour):
    return CostModelType(behaviour, behaviour, lambda model, hardware, gpus: Flat(behaviour))


FLAT, SLEEPS, LOOPS, SWALLOWS, RAISES, HOLDS = map(flat, ("flat", "sleeps", "loops", "swallows", "raises", "holds"))


class SleepingSource(BatchSource):
    kind = "sleeping"

    def chunk(self, steps, devices):
        time.sleep(3600)


class Sleeping(PlanType):
    def build(self, parameters):
        return ExecutionPlan(self.name, SleepingSource.kind, ExecutionMode.UNPADDED)


SLEEPING = Sleeping("sleeping", "sleeps when asked for batches", SleepingSource)
"""
ENTRY_POINTS = ("[simbench.costmodels]\n"
                + "".join(f"{name} = stuck_plugin:{name.upper()}\n" for name in ("flat", "sleeps", "loops", "swallows",
                                                                                   "raises", "holds"))
                + "[simbench.plans]\nsleeping = stuck_plugin:SLEEPING\n")
SCENARIO = ("name: stuck\ndataset: {{histogram: squad_1_1_384}}\ncost_model: {cost_model}\ndevices: [1, 2]\nsteps: 4\n"
            "batch_size: 4\noutputs: {{lp_bounds: false}}\nstrategies: [{strategy}]\n")


@pytest.fixture
def installed(tmp_path):
    """A folder that installs the plug-ins above (a module and its distribution's entry points)."""
    (tmp_path / "stuck_plugin.py").write_text(PLUGIN)
    metadata = tmp_path / "stuck_plugin-1.0.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: stuck-plugin\nVersion: 1.0\n")
    (metadata / "entry_points.txt").write_text(ENTRY_POINTS)
    return tmp_path


def run_watching_children(folder, *arguments, timeout_seconds=3):
    """(exit status, stdout, stderr); fails where any process the command started outlives it by a second."""
    status, stdout, stderr, seen = watched(folder, *arguments, timeout_seconds=timeout_seconds)
    time.sleep(1)
    left = alive(seen)
    for process in left:
        process.kill()
    assert not left, [process.cmdline() for process in left]
    return status, stdout, stderr


def one_line(stderr: str) -> str:
    """The command's one error line (progress lines before it are the run's own)."""
    errors = [line for line in stderr.splitlines() if not line.startswith("[")]
    assert "Traceback" not in stderr and len(errors) == 1 and errors[0].startswith("error: "), stderr
    return errors[0]


@pytest.mark.parametrize("cost_model, strategy, named", [
    ("sleeps", "unpad", "the plug-in cost model 'sleeps' (step_costs)"),
    ("loops", "unpad", "the plug-in cost model 'loops' (step_costs)"),
    ("flat", "sleeping", "the plug-in strategy 'sleeping' (chunk)"),
])
def test_a_stuck_plugin_call_ends_run_within_its_timeout_and_writes_no_report(installed, cost_model, strategy, named):
    (installed / "s.yaml").write_text(SCENARIO.format(cost_model=cost_model, strategy=strategy))
    status, _, stderr = run_watching_children(installed, "run", "s.yaml", "--out", "report")
    assert status == 2, stderr
    assert f"{named} did not return within 3 s and was stopped" in one_line(stderr)
    assert not (installed / "report").exists()
    assert not [path.name for path in installed.iterdir() if "report" in path.name]  # nor a staging folder


def test_a_plugin_call_that_swallows_every_interruption_still_ends_the_command(installed):
    """The last resort: the error line and exit status 2 at once, two interruptions after the timeout."""
    (installed / "s.yaml").write_text(SCENARIO.format(cost_model="swallows", strategy="unpad"))
    status, _, stderr = run_watching_children(installed, "run", "s.yaml", "--out", "report")
    assert status == 2, stderr
    assert "the plug-in cost model 'swallows' (step_costs) did not return within 3 s" in one_line(stderr)
    assert not (installed / "report").exists()


def test_a_plugin_call_stuck_in_c_code_holding_the_interpreter_is_ended_by_the_watchdog(installed):
    """No signal handler runs while a C loop holds the interpreter's lock: the watchdog process ends the command
    (SIGKILL) a grace after the timeout, and its one error line, not a thread dump, says why."""
    from simbench.plugins import WATCHDOG_GRACE_SECONDS

    (installed / "s.yaml").write_text(SCENARIO.format(cost_model="holds", strategy="unpad"))
    status, stdout, stderr = run_watching_children(installed, "run", "s.yaml", "--out", "report")
    assert status == -signal.SIGKILL and stdout == "", stderr
    assert (f"the plug-in cost model 'holds' (step_costs) did not return within 3 s and could not be stopped (it "
            "holds the interpreter, in C code): the command was ended") in one_line(stderr)
    assert WATCHDOG_GRACE_SECONDS > 2  # after the timer's own last resort, which needs the interpreter
    assert not (installed / "report").exists()


SWEEP = ("name: stuck\nbase: {dataset: {histogram: squad_1_1_384}, devices: [1], steps: 4, batch_size: 4, "
         "outputs: {lp_bounds: false}, strategies: [unpad]}\naxes: {cost_model: [flat, holds]}\n")


def test_a_plugin_call_stuck_in_c_code_in_a_sweeps_dask_worker_ends_the_sweep_naming_its_cell(installed):
    """The worker's watchdog ends the worker; the sweep names the cell and the call in one line, exits 2 as `run`
    does for a stuck plug-in, keeps the cell that finished, and leaves no worker, nanny or watchdog behind."""
    from simbench import sweep as sweeps

    (installed / "s.yaml").write_text(SWEEP)
    status, stdout, stderr = run_watching_children(installed, "sweep", "s.yaml", "--out", "out", "--workers", "2",
                                                   timeout_seconds=1)
    assert status == 2 and stdout == "", stderr
    line = one_line("\n".join(line for line in stderr.splitlines() if not line.startswith(("sweep ", "1/2 "))))
    assert line.startswith("error: cell 1 (cost_model=holds): the plug-in cost model 'holds' (step_costs) did not "
                           "return within 1 s and could not be stopped (it holds the interpreter, in C code): its "
                           "worker process was ended"), stderr
    assert "--resume runs the cells it did not finish" in line
    assert sorted(sweeps.read_results(installed / "out")["cell"].unique()) == [0]


def test_the_watchdog_is_disarmed_between_calls():
    """A deadline left after a call would end the command during simbench's own work between calls."""
    from simbench.plugins import _DEADLINE, PluginFailure, _Watchdog, in_time

    assert in_time("a call", sum, [1, 2], timeout=5) == 3
    assert _Watchdog.process.poll() is None and _DEADLINE.unpack_from(_Watchdog.page, 0) == (0.0,)
    with pytest.raises(PluginFailure, match="a call failed: ValueError"):
        in_time("a call", int, "x", timeout=5)
    assert _DEADLINE.unpack_from(_Watchdog.page, 0) == (0.0,)


def test_the_watchdog_shows_the_call_due_first_of_those_under_way_in_several_threads():
    """A Dask worker's calls run in threads, each armed: the page holds the earliest deadline and its call's line,
    which names what the calls were for (a sweep's cell)."""
    import time

    from simbench.plugins import _DEADLINE, _LENGTH, _Watchdog, calls_for, guarded_here

    def shown():
        offset = _DEADLINE.size + _LENGTH.size
        line = _Watchdog.page[offset:offset + _LENGTH.unpack_from(_Watchdog.page, _DEADLINE.size)[0]].decode()
        return _DEADLINE.unpack_from(_Watchdog.page, 0)[0] - time.monotonic(), line

    late = _Watchdog.arm("the late call", 600)
    with calls_for("cell 3 (model=tiny)"):
        early = _Watchdog.arm("the early call", 5)
    seconds, line = shown()
    assert 5 < seconds <= 8.5 and line.startswith("error: cell 3 (model=tiny): the early call did not return within 5 s")
    _Watchdog.disarm(early)
    seconds, line = shown()
    assert seconds > 600 and line.startswith("error: the late call did not return within 600 s")
    _Watchdog.disarm(late)
    assert shown()[0] < 0 and _Watchdog.calls == {}
    assert guarded_here("a call", sum, [1, 2], timeout=5) == 3 and _Watchdog.calls == {}
    assert _DEADLINE.unpack_from(_Watchdog.page, 0) == (0.0,)


def test_a_stuck_plugin_plan_ends_simulate_within_its_timeout(installed):
    status, stdout, stderr = run_watching_children(installed, "simulate", "squad_1_1_384", "-s", "sleeping",
                                                   "--devices", "1", "--steps", "4")
    assert status == 2 and stdout == "", stderr
    assert "the plug-in strategy 'sleeping' (chunk) did not return within 3 s and was stopped" in one_line(stderr)


def test_a_plugin_cost_model_that_raises_is_named_with_what_it_raised(installed):
    (installed / "s.yaml").write_text(SCENARIO.format(cost_model="raises", strategy="unpad"))
    status, _, stderr = run_watching_children(installed, "run", "s.yaml", "--out", "report")
    assert status == 2, stderr
    assert "the plug-in cost model 'raises' (step_costs) failed: ValueError: no prices today" in one_line(stderr)


def test_a_well_behaved_plugin_cost_model_prices_every_step(installed):
    (installed / "s.yaml").write_text(SCENARIO.format(cost_model="flat", strategy="unpad"))
    status, _, stderr = run_watching_children(installed, "run", "s.yaml", "--out", "report")
    assert status == 0, stderr
    import pandas as pd

    scaling = pd.read_csv(installed / "report" / "scaling.csv")
    assert np.allclose(scaling["step_seconds_mean"], 0.25)  # whatever each batch holds


def test_the_timer_is_off_after_a_call_and_a_nested_call_runs_under_the_outer_one():
    import signal

    from simbench.plugins import PluginTimeout, in_time

    handler = signal.getsignal(signal.SIGALRM)
    assert in_time("outer", lambda: in_time("inner", sum, [1, 2], timeout=0.5) + 1, timeout=5) == 4
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) == handler
    with pytest.raises(PluginTimeout, match="outer did not return within 0.2 s"):
        in_time("outer", lambda: in_time("inner", time.sleep, 30, timeout=60), timeout=0.2)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) == handler
