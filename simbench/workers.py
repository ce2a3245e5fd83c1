"""Side processes for a run: its LP bounds and plots (pure, picklable work) run beside the simulation.

Started first, the workers import matplotlib while the main process packs, compute the LP bounds while
it simulates, then draw the plots; bounds come back as values and plots as file contents, so the report
folder is still written by the main process alone, atomically. With one core, or when none are started,
the same functions run in the calling process.

    >>> from simbench.workers import ReportWorkers
    >>> with ReportWorkers(processes=0) as workers:
    ...     workers.submit(sum, [1, 2, 3]).result()
    6
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

from simbench.processes import deaf_to_sigint, exit_with, sigint_held
from simbench.validation import check_whole_number

# Two cores is what the main job is sized for; more plots than that rarely wait.
PROCESSES_MAX = 2
# Set to 0 to compute everything in the calling process (tests do; so may a machine short of memory).
PROCESSES_VARIABLE = "SIMBENCH_WORKERS"
# While waiting on a worker, `waiting(seconds)` is told this often, so that a run's progress lines never stop
# for longer (a piped run should never fall silent for more than a few seconds).
HEARTBEAT_SECONDS = 3.0


class ReportWorkers:
    """A small pool of spawned processes (not forked: the progress bar's thread must not be copied mid-write).

    Its processes end before the `with` block does, whether it succeeds, fails or is interrupted: a Ctrl-C
    reaches the whole process group, but workers never act on it (they start with SIGINT blocked and then
    ignore it); the process they work for hears it, terminates them and reports the stop once.
    """

    def __init__(self, processes: int | None = None, preload: tuple[str, ...] = (), start: tuple[str, ...] = ()):
        """`preload` names the modules the workers will need later (the plots', which load matplotlib: a second):
        `warm_up` has them imported. `start` names those their first jobs need: the workers are started now and
        import them at once, while the caller is still busy with its own imports. The caller names both, as this
        module sits below them."""
        if processes is None:
            processes = _processes_asked()
        self.executor, self.processes, self.preload = None, processes, tuple(preload)
        if processes > 0:
            self.executor = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_start_worker, initargs=(os.getpid(),))
            if start:
                for _ in range(processes):  # each submit to a pool with no idle process starts one
                    self.submit(_import_all, tuple(start))

    def warm_up(self) -> None:
        """Have each worker import `preload` now, when the caller's work leaves them idle (a run: while its main
        process simulates). Imported as a worker started, they delayed the packings it was given first, on the
        main job's critical path."""
        if self.executor is not None and self.preload:
            for _ in range(self.processes):
                self.submit(_import_all, self.preload)

    def submit(self, function, *arguments) -> Future:
        """Run `function(*arguments)` in a worker, or here and now without workers."""
        if self.executor is not None:
            with sigint_held():  # a submit may spawn a worker: it must not start able to hear SIGINT
                return self.executor.submit(function, *arguments)
        future = Future()
        future.set_result(function(*arguments))
        return future

    def result(self, future: Future, waiting: Callable[[float], None] | None = None):
        """`future.result()`, telling `waiting(seconds so far)` every HEARTBEAT_SECONDS until it comes."""
        return result_of(future, waiting)

    def started(self, jobs: dict[Hashable, tuple]) -> dict[Hashable, Future | tuple]:
        """The jobs `key: (function, *arguments)` submitted to the workers now, for `completed` to collect while
        the caller does other work; without workers, as they were: they run one by one as they are collected."""
        if self.executor is None:
            return dict(jobs)
        return {key: job if isinstance(job, Future) else self.submit(*job) for key, job in jobs.items()}

    def completed(self, jobs: dict[Hashable, tuple | Future], waiting: Callable[[float], None] | None = None,
                  every: float = HEARTBEAT_SECONDS) -> Iterator[tuple[Hashable, object]]:
        """(key, result) of each job `key: (function, *arguments)` (or of each `started` one) as it finishes: in
        the workers, all at once, in the order they finish; without workers, one after another here, each yielded
        as soon as it is done. `waiting(seconds so far)` hears every `every` seconds that nothing has finished."""
        if self.executor is None:
            for key, (function, *arguments) in jobs.items():
                yield key, function(*arguments)
            return
        pending = {future: key for key, future in self.started(jobs).items()}
        start = time.perf_counter()
        while pending:
            done, _ = wait(pending, timeout=every, return_when=FIRST_COMPLETED)
            if not done and waiting is not None:
                waiting(time.perf_counter() - start)
            for future in done:
                yield pending.pop(future), future.result()

    def __enter__(self) -> ReportWorkers:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if self.executor is None:
            return
        processes = list((getattr(self.executor, "_processes", None) or {}).values())
        if kind is not None:
            # Failed or interrupted: what the workers are doing is for no one; they end now, not when done. The
            # pool is not waited for: with a worker killed mid-write its shutdown could wait forever.
            for process in processes:
                process.terminate()
            for process in processes:
                process.join()
            # A worker killed while sending a large result leaves the pool's reader waiting for the rest, and the
            # interpreter's exit joins that thread: this process's own end of the pipe closed, the reader sees the
            # end instead (every worker's end is closed with it), and the pool's thread ends.
            results = getattr(self.executor, "_result_queue", None)
            if results is not None:
                results._writer.close()
            # Its queues' semaphores live on until exit: the resource tracker ends with the process, a moment after.
            self.executor.shutdown(wait=False, cancel_futures=True)
            return
        # Done: every job's result is in, so nothing is lost by ending the workers rather than waiting for each to
        # tear down its interpreter (half a second of the main job's, with matplotlib loaded).
        for process in processes:
            process.terminate()
        self.executor.shutdown(wait=True, cancel_futures=True)
        for process in processes:
            process.join()
        _stop_resource_tracker()


def _processes_asked() -> int:
    """SIMBENCH_WORKERS if set, else two processes where there are two cores to run them."""
    cores = os.cpu_count() or 1
    text = os.environ.get(PROCESSES_VARIABLE)
    if text is None:
        return min(PROCESSES_MAX, cores) if cores > 1 else 0
    return check_whole_number(int(text) if text.strip().isdigit() else text, PROCESSES_VARIABLE, minimum=0)


def _stop_resource_tracker() -> None:
    """End multiprocessing's resource tracker, a process the pool started beside its workers that would
    otherwise outlive the command by a moment (it is started again if anything needs it)."""
    from multiprocessing import resource_tracker

    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:
        stop()


def _start_worker(parent: int) -> None:
    # The process it works for ends the workers on Ctrl-C: a worker's own KeyboardInterrupt would only print a
    # traceback (SIGINT reaches the whole process group). Blocked since it was spawned, ignored from now on.
    deaf_to_sigint()
    exit_with(parent)


def _import_all(modules: tuple[str, ...]) -> None:
    for module in modules:
        importlib.import_module(module)


def result_of(future: Future, waiting: Callable[[float], None] | None = None, every: float = HEARTBEAT_SECONDS):
    """`future.result()`, telling `waiting(seconds so far)` every `every` seconds until it comes."""
    start = time.perf_counter()
    while True:
        done, _ = wait([future], timeout=every)
        if done:
            return future.result()
        if waiting is not None:
            waiting(time.perf_counter() - start)
