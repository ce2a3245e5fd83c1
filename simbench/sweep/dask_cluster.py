"""A sweep's tasks on Dask: the scheduler's address checked before any work, a local cluster of forked
single-thread workers or a remote scheduler, and Dask's own logging kept quiet while the sweep runs; a plug-in call
stuck in a local worker ends the sweep, naming its cells."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import time

from simbench.errors import InputError
from simbench.plugins import WATCHDOG_FOLDER_VARIABLE, PluginTimeout, stuck_calls
from simbench.sweep.cells import SweepCell
from simbench.sweep.tasks import CellOutcome, _failure_record, packing_jobs, run_cells, run_packing


# Where a Dask scheduler can be: an address of one of these transports, host and port.
SCHEDULER_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss")
_SCHEDULER_ADDRESS = re.compile(r"(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.-]+)"
                                r":(?P<port>\d{1,5})")
SCHEDULER_TIMEOUT_SECONDS = 5


def scheduler_address(scheduler: str | None) -> tuple[str, str] | None:
    """The Dask scheduler to use, (address, where it was given), from `scheduler` or DASK_SCHEDULER_ADDRESS;
    None for a local cluster. Its form is checked here, before any connection or work."""
    if scheduler is not None:
        address, origin = scheduler, "--scheduler"
    elif os.environ.get("DASK_SCHEDULER_ADDRESS") is not None:
        address, origin = os.environ["DASK_SCHEDULER_ADDRESS"], "DASK_SCHEDULER_ADDRESS"
    else:
        return None
    match = _SCHEDULER_ADDRESS.fullmatch(address.strip())
    if (address.strip().startswith("inproc://") and len(address.strip()) > len("inproc://")) or (
            match and (match["scheme"] is None or match["scheme"] in SCHEDULER_SCHEMES)
            and 1 <= int(match["port"]) <= 65_535):
        return address.strip(), origin
    raise InputError(f"{origin} must be a Dask scheduler's address, [{'|'.join(SCHEDULER_SCHEMES)}://]HOST:PORT such "
                     f"as tcp://10.0.0.5:8786, found {address!r}"
                     + ("; correct it, or unset it to run on this machine" if origin != "--scheduler" else ""))


def _connect(address: tuple[str, str]):
    from distributed import Client

    where, origin = address
    try:
        return Client(where, timeout=SCHEDULER_TIMEOUT_SECONDS)
    except (OSError, TimeoutError, ValueError, TypeError) as error:
        unset = " and unset DASK_SCHEDULER_ADDRESS" if origin == "DASK_SCHEDULER_ADDRESS" else ""
        raise InputError(f"cannot reach the Dask scheduler at {where} (from {origin}) within "
                         f"{SCHEDULER_TIMEOUT_SECONDS} s ({type(error).__name__}: {error}): start it "
                         f"(`dask scheduler`) or correct the address; or leave out --scheduler{unset} to run on "
                         "this machine (--workers N)") from None


def _run_on_dask(todo, jobs, finished, workers, address) -> None:
    try:
        import distributed  # noqa: F401
        from distributed import Client, as_completed
    except ImportError:
        raise InputError("sweeps on Dask need the extra: pip install 'simbench-seq[sweep]' (or --workers 0 to run "
                         "the cells one after another here)") from None
    from simbench.processes import sigint_held

    # A local cluster's workers leave here the line of a plug-in call stuck in C code, for which a worker's watchdog
    # ended it (`simbench.plugins._Watchdog`); a remote cluster's workers print it in their logs, and its scheduler
    # retries the cells as for any lost worker.
    stuck_folder = tempfile.mkdtemp(prefix="simbench-stuck-") if address is None else None
    try:
        # Ctrl-C is for this process alone, which ends the cluster: the threads the cluster starts here inherit
        # SIGINT blocked, and so does every worker process they fork, which would otherwise run this process's
        # handler and print its traceback (a worker's "Process Dask Worker process (from Nanny)").
        with sigint_held():
            client = _connect(address) if address is not None else Client(_local_cluster(workers, stuck_folder))
        _run_tasks(client, as_completed, todo, jobs, finished, stuck_folder)
        calls = stuck_calls(stuck_folder) if stuck_folder is not None else []  # with those ended while it closed
    finally:
        if stuck_folder is not None:
            shutil.rmtree(stuck_folder, ignore_errors=True)
    if calls:
        raise _stuck(calls)


def _run_tasks(client, as_completed, todo, jobs, finished, stuck_folder: str | None) -> None:
    """The packings and batches of cells on `client`'s cluster, each finished cell told to `finished`, until all
    are done or a worker was ended for a stuck plug-in call (its line in `stuck_folder`); then the cluster closed."""
    # Here as in a local cluster's processes (`_local_cluster`), Dask's own messages below CRITICAL are for no one
    # while the sweep runs: a cell's failure is recorded with its traceback, and a cluster shut down by Ctrl-C
    # or a lost scheduler logs lost connections and cancelled tasks.
    silenced = contextlib.ExitStack()
    silenced.enter_context(_dask_logs_silenced())
    try:
        packed = {key: client.submit(run_packing, job, key=f"pack-{key}", pure=False) for key, job in jobs.items()}
        tasks = {}
        for number, batch in enumerate(_batches(todo, sum(client.nthreads().values()))):
            needed = {job.key: packed[job.key] for cell in batch for job in packing_jobs(cell)}
            tasks[client.submit(run_cells, batch, needed, key=f"cells-{number}-{batch[0].index}", pure=False)] = batch
        for future in as_completed(tasks):
            batch, at = tasks[future], time.perf_counter()
            if future.status == "error" and stuck_folder is not None and stuck_calls(stuck_folder):
                return  # as `run` ends for a stuck plug-in, the sweep ends: every other cell would wait as long
            if future.status == "error":  # the task itself failed (a worker lost, say): every cell of it did
                outcomes = [CellOutcome(failure=_failure_record(cell, future.exception())) for cell in batch]
            else:
                outcomes = future.result()
            for cell, outcome in zip(batch, outcomes):
                finished(cell, outcome, at)
    finally:
        cluster = client.cluster
        client.close()
        if cluster is not None:
            cluster.close()
        silenced.close()


def _stuck(calls: list[tuple[str, str]]) -> PluginTimeout:
    """One line for the plug-in calls stuck in C code whose workers were ended: each call with the cells it was for."""
    cells: dict[str, list[str]] = {}
    for owner, message in calls:
        cells.setdefault(message, []).extend([owner] if owner else [])
    text = "; ".join(f"{', '.join(owners)}: {message}" if owners else message for message, owners in cells.items())
    return PluginTimeout(f"{text}; the sweep ended there (--resume runs the cells it did not finish)")


@contextlib.contextmanager
def _dask_logs_silenced():
    """Dask's log handlers in this process (its logging configuration's) raised to CRITICAL, then put back."""
    handlers = [handler for handler in logging.getLogger("distributed").handlers
                if isinstance(handler, logging.StreamHandler)]
    levels = [handler.level for handler in handlers]
    for handler in handlers:
        handler.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for handler, level in zip(handlers, levels):
            handler.setLevel(level)


def _local_cluster(workers: int | None, stuck_folder: str):
    """A cluster of `workers` processes (default: one per core), one thread each, no dashboard, and no logging of
    Dask's own below CRITICAL (see `_run_on_dask`); a worker's watchdog writes its line in `stuck_folder`, and the
    cells of a task whose worker dies fail at once (the scheduler would otherwise retry them on 3 more workers,
    each stuck as long, or killed by the same memory)."""
    import sys

    import dask
    from distributed import LocalCluster

    # Dask sets MALLOC_TRIM_THRESHOLD_ for the workers it spawns, in this process's environment too, so
    # every process spawned from here later inherits it: it fixes glibc's mmap threshold at 128 KiB, every
    # array a cell allocates is then mapped and zeroed afresh, and a spawned worker's cell took twice the CPU.
    settings = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                # Leave the cores to the cells: no sampling profiler in the workers, and the event loops'
                # health checks less often (together 0.08 s of CPU per second idle, 0.02 without).
                "distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
                "distributed.admin.system-monitor.interval": "5s",
                f"distributed.nanny.environ.{WATCHDOG_FOLDER_VARIABLE}": stuck_folder,
                "distributed.scheduler.allowed-failures": 0}
    if sys.platform == "linux":
        # Forked workers start with what this process imported (the cell's modules, below) instead of each
        # importing them again: 2.3 s of CPU to start two spawned workers, 0.1 s forked.
        import simbench.experiment  # noqa: F401 - cells fit no Gumbels, so scipy.stats is not needed
        settings["distributed.worker.multiprocessing-method"] = "fork"
    with dask.config.set(settings):
        return LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                            dashboard_address=None, silence_logs=logging.CRITICAL)


def _batches(cells: list[SweepCell], slots: int) -> list[list[SweepCell]]:
    """Consecutive cells (which share packings) in tasks of a quarter of each slot's share of what is left:
    large at first, so the scheduler handles few, and small at the end, so no worker waits long for another."""
    batches, start = [], 0
    while start < len(cells):
        size = max(1, (len(cells) - start) // (4 * max(slots, 1)))
        batches.append(cells[start:start + size])
        start += size
    return batches
