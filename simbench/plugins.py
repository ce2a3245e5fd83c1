"""Third-party code under guard: a plug-in strategy's packing is made in a child process, killed when it has
not returned after SIMBENCH_PLUGIN_TIMEOUT seconds, and a plug-in's import is tried in a child first, then
made here; any exception it raises (SystemExit and KeyboardInterrupt included) is reported as that
plug-in's failure. A plug-in cost model's or plan's calls, many a run, are made here and interrupted when
late (`in_time`); one stuck in C code that holds the interpreter's lock, which no interruption reaches, is
ended with its command (or, in a sweep's worker, with the worker) by a watchdog process (`_Watchdog`).

    >>> from simbench.plugins import guarded
    >>> guarded("the demo plug-in", sum, [1, 2], timeout=5)
    3
    >>> guarded("the demo plug-in", exit, 0, timeout=5)
    Traceback (most recent call last):
    ...
    simbench.plugins.PluginFailure: the demo plug-in failed: SystemExit: 0
"""

from __future__ import annotations

import itertools
import mmap
import multiprocessing
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from simbench.errors import InputError
from simbench.processes import deaf_to_sigint, exit_with, sigint_held

TIMEOUT_VARIABLE = "SIMBENCH_PLUGIN_TIMEOUT"
# A plug-in's import is a module load: a minute is far beyond any. A plug-in packer may pack a large
# histogram exactly: half an hour, unless the variable says otherwise.
LOAD_TIMEOUT_SECONDS = 60.0
CALL_TIMEOUT_SECONDS = 1800.0


# Set by `in_this_process`: plug-ins called meanwhile run in a thread here, not in a child process.
_IN_THIS_PROCESS: ContextVar[bool] = ContextVar("simbench_plugins_in_this_process", default=False)


class PluginFailure(InputError):
    """A plug-in raised `error` (kept, for a test battery to say what the plug-in itself raised)."""

    def __init__(self, message: str, error: BaseException):
        super().__init__(message)
        self.error = error


class PluginTimeout(InputError):
    """A plug-in did not return in time: its process was killed (or, in a thread, it was abandoned)."""


def timeout_seconds(default: float) -> float:
    """SIMBENCH_PLUGIN_TIMEOUT (seconds, for loads and calls alike) if set, else `default`."""
    text = os.environ.get(TIMEOUT_VARIABLE)
    if text is None:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise InputError(f"{TIMEOUT_VARIABLE} must be a number of seconds above 0, found {text!r}")
    return seconds


def guarded(what: str, function: Callable, *arguments, timeout: float):
    """`function(*arguments)`, run in a child process: its value, or an InputError naming `what` when it
    raises anything (an InputError it raises is passed on as it is: a plug-in's own refusal), ends its process
    without an answer, or has not returned after `timeout` seconds (the process is killed: a plug-in that
    sleeps, loops or holds the interpreter's lock ends with it). A function that cannot be sent to another
    process (a lambda, one defined in a notebook), or a call from a process that may not start one (a Dask
    worker), runs in a thread here instead (`guarded_here`)."""
    # A daemonic process (a Dask worker's) may not start processes: there the plug-in runs in a thread, and a
    # stuck one fails its cell when the thread is abandoned.
    if _IN_THIS_PROCESS.get() or multiprocessing.current_process().daemon:
        return guarded_here(what, function, *arguments, timeout=timeout)
    try:
        payload = pickle.dumps((function, arguments))
    except Exception:  # noqa: BLE001 - pickling raises whatever the objects' own reducers raise
        return guarded_here(what, function, *arguments, timeout=timeout)
    kind, answer = _answer_from_a_child(what, payload, timeout)
    if kind == "unsent":  # importable here but not in a fresh process (a script's __main__, a test's module)
        return guarded_here(what, function, *arguments, timeout=timeout)
    if kind == "returned":
        return answer
    name, message, error = answer
    if isinstance(error, InputError):
        raise error
    raise PluginFailure(f"{what} failed: {name}: {message}", error or _stand_in(name, message)) from None


@contextmanager
def in_this_process() -> Iterator[None]:
    """Within this block `guarded` runs plug-ins in a thread of this process (`guarded_here`): the strategy
    battery checks its author's code as it runs in their process, where state it keeps between calls shows."""
    token = _IN_THIS_PROCESS.set(True)
    try:
        yield
    finally:
        _IN_THIS_PROCESS.reset(token)


def loaded(what: str, entry, timeout: float):
    """The object an entry point names. Its import runs first in a child (`guarded`): one that does not return
    is killed there, with nothing held here; only an import that returned is made again here, under
    `guarded_here`."""
    guarded(what, _load_entry_point, entry.name, entry.value, entry.group, timeout=timeout)
    return guarded_here(what, entry.load, timeout=timeout)


def guarded_here(what: str, function: Callable, *arguments, timeout: float):
    """`function(*arguments)`, run in a daemon thread of this process: as `guarded`, but one that has not
    returned after `timeout` seconds is abandoned (the thread ends with the process). One that holds the
    interpreter's lock in C code keeps this thread from ever returning, too: `_Watchdog` ends the process
    WATCHDOG_GRACE_SECONDS after the timeout (in a sweep's Dask worker, the worker: its sweep names the call)."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = function(*arguments)
        except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: the plug-in's, not ours
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"simbench: {what}", daemon=True)
    watch = _Watchdog.arm(what, timeout)
    try:
        thread.start()
        thread.join(timeout)
    finally:
        _Watchdog.disarm(watch)
    if thread.is_alive():
        raise PluginTimeout(_late(what, timeout, "was abandoned"))
    error = outcome.get("error")
    if isinstance(error, InputError):
        raise error
    if error is not None:
        raise PluginFailure(f"{what} failed: {type(error).__name__}: {error}", error) from None
    return outcome["value"]


# How often a late plug-in call is interrupted again after its timeout, in case it swallowed the first error.
REPEAT_INTERRUPT_SECONDS = 1.0
# The plug-in call under way in this process's main thread, (what, timeout), for the alarm's message, then one
# entry per interruption; empty when none is.
_UNDER_WAY: list[tuple[str, float]] = []


def in_time(what: str, function: Callable, *arguments, timeout: float):
    """`function(*arguments)`, called here: for a plug-in's code that runs many times a command (a cost model
    prices every chunk of steps), where a process per call would cost more than many calls. In the main thread a
    real-time interval timer (SIGALRM, two system calls a call) interrupts a call that has not returned after
    `timeout` seconds, and again every REPEAT_INTERRUPT_SECONDS (a plug-in that swallows the error is stopped
    anyway): the PluginTimeout ends the command as any error does, its writes undone and its processes ended.
    In another thread (a Dask worker's: signals reach only the main thread) it runs as `guarded_here`, under the
    same watchdog. A call made within one under way (a plug-in plan's chunk pricing with a plug-in cost model) runs
    under the outer one's timer. What it raises is named as `what`'s failure (an InputError and a Ctrl-C pass as they are). A call
    that the timer cannot reach (stuck in C code that holds the interpreter's lock: no Python signal handler runs)
    is ended with the whole command by `_Watchdog`, WATCHDOG_GRACE_SECONDS after its timeout."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return guarded_here(what, function, *arguments, timeout=timeout)
    if _UNDER_WAY:
        return function(*arguments)
    previous = signal.signal(signal.SIGALRM, _interrupt_late_call)
    _UNDER_WAY.append((what, timeout))
    watch = _Watchdog.arm(what, timeout)
    signal.setitimer(signal.ITIMER_REAL, timeout, REPEAT_INTERRUPT_SECONDS)
    try:
        return function(*arguments)
    except (InputError, KeyboardInterrupt):
        raise
    except _StillLate:
        raise PluginTimeout(_late(what, timeout, "was stopped")) from None
    except BaseException as error:  # noqa: BLE001 - SystemExit included: the plug-in's, not ours
        raise PluginFailure(f"{what} failed: {type(error).__name__}: {error}", error) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _Watchdog.disarm(watch)
        _UNDER_WAY.clear()
        signal.signal(signal.SIGALRM, previous)


class _StillLate(BaseException):
    """Raised into a late call that caught its PluginTimeout and went on: `except Exception` does not catch it."""


def _interrupt_late_call(signum, frame) -> None:
    """At the timeout a PluginTimeout; a second later, where the call caught it, one that `except Exception`
    lets through; a second after that, where even that was caught, the error line and exit status 2 at once (its
    writes are left staged, as by a killed command, for the next command to sweep)."""
    if not _UNDER_WAY:  # an alarm already on its way when the call returned finds nothing to stop
        return
    what, timeout = _UNDER_WAY[0]
    _UNDER_WAY.append(("interrupted", timeout))
    interruptions = len(_UNDER_WAY) - 1
    if interruptions == 1:
        raise PluginTimeout(_late(what, timeout, "was stopped"))
    if interruptions == 2:
        raise _StillLate()
    sys.stderr.write(f"error: {_late(what, timeout, 'was stopped')}\n")
    sys.stderr.flush()
    os._exit(2)


# The timer's last resort ends a late call 2 interruptions (2 s) after its timeout; the watchdog acts only where
# that could not run, a second later.
WATCHDOG_GRACE_SECONDS = 2 * REPEAT_INTERRUPT_SECONDS + 1.0
# How often the watchdog looks at the deadline of the call under way.
WATCHDOG_POLL_SECONDS = 0.1
# Where a watchdog writes its line, a file per process it ended (named by that process's id), instead of stderr: set
# for a local sweep's Dask workers, whose sweep then names the cells and ends (`stuck_calls`).
WATCHDOG_FOLDER_VARIABLE = "SIMBENCH_WATCHDOG_FOLDER"
# The watchdog's shared page: the deadline of the call under way (CLOCK_MONOTONIC seconds, 0 when none is), the
# length of the error line, the line itself.
_DEADLINE = struct.Struct("d")
_LENGTH = struct.Struct("i")
_PAGE_BYTES = 4096
_LINE_BYTES = _PAGE_BYTES - _DEADLINE.size - _LENGTH.size
# The watchdog itself: a bare interpreter (-I -S: no site packages, a few milliseconds to start) that ends the
# process it watches (SIGKILL: no handler of its own could run while the lock is held) when the same deadline is
# past at two looks in a row (a deadline half written is never acted on), writes the error line to its stderr (or,
# first, to its file in the folder it was given), and ends when that process does.
_WATCHDOG_SOURCE = """
import mmap, os, signal, struct, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's to report; this ends with it
signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGINT}})
descriptor, parent, poll, folder = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
page = mmap.mmap(descriptor, {page}, access=mmap.ACCESS_READ)
seen = 0.0
while os.getppid() == parent:
    deadline = struct.unpack_from("d", page, 0)[0]
    if deadline and deadline == seen and time.monotonic() > deadline:
        line = page[{line}:{line} + struct.unpack_from("i", page, {offset})[0]]
        if folder:  # written whole before the process ends, so that whoever hears of its end finds the line
            path = os.path.join(folder, str(parent))
            with open(path + ".partial", "wb") as file:
                file.write(line)
            os.replace(path + ".partial", path)
        os.kill(parent, signal.SIGKILL)
        if not folder:
            os.write(2, line)
        break
    seen = deadline
    time.sleep(poll)
""".format(page=_PAGE_BYTES, offset=_DEADLINE.size, line=_DEADLINE.size + _LENGTH.size)


class _Watchdog:
    """The last resort for a plug-in call that no signal handler can stop: a process of its own, started at a
    process's first plug-in call, reads the deadline each call writes to a shared page (a few stores under a lock,
    3 us a call: a thread per call, as faulthandler's watchdog starts, costs hundreds) and kills the process once
    the deadline is past, after writing the call's error line to its stderr. A command then exits by SIGKILL
    (status 137 in a shell), its writes left staged as by any killed command, for the next to sweep. Calls under
    way in several threads at once (a Dask worker's) each arm it; the page holds the one due first."""

    page: mmap.mmap | None = None
    shown: tuple = ()  # the line the page holds, as (owner, what, timeout)
    process: subprocess.Popen | None = None
    pid: int = 0  # the process the watchdog watches (a forked child starts its own)
    folder: str = ""  # where its line goes instead of stderr (WATCHDOG_FOLDER_VARIABLE), read when it starts
    owner: str = ""  # what the calls are made for, to start the line with (`calls_for`)
    calls: dict[int, tuple[float, tuple]] = {}  # the calls under way, by token: deadline, (owner, what, timeout)
    lock = threading.Lock()
    tokens = itertools.count(1)

    @classmethod
    def arm(cls, what: str, timeout: float) -> int:
        """A token for `disarm`; 0 where no watchdog can run (no SIGKILL)."""
        if not hasattr(signal, "SIGKILL"):
            return 0
        with cls.lock:
            if cls.pid != os.getpid():
                cls._start()
            token = next(cls.tokens)
            cls.calls[token] = (time.monotonic() + timeout + WATCHDOG_GRACE_SECONDS, (cls.owner, what, timeout))
            cls._show()
        return token

    @classmethod
    def disarm(cls, token: int) -> None:
        if token:
            with cls.lock:
                del cls.calls[token]
                cls._show()

    @classmethod
    def _show(cls) -> None:
        """The call due first on the page (deadline 0 when none is under way)."""
        if not cls.calls:
            _DEADLINE.pack_into(cls.page, 0, 0.0)
            return
        deadline, call = min(cls.calls.values()) if len(cls.calls) > 1 else next(iter(cls.calls.values()))
        if call != cls.shown:  # the line is written once for each plug-in member (and owner) a process calls
            _DEADLINE.pack_into(cls.page, 0, 0.0)  # never a deadline with another call's line
            data = cls._line(*call).encode()[:_LINE_BYTES]
            cls.page[_DEADLINE.size + _LENGTH.size:_DEADLINE.size + _LENGTH.size + len(data)] = data
            _LENGTH.pack_into(cls.page, _DEADLINE.size, len(data))
            cls.shown = call
        _DEADLINE.pack_into(cls.page, 0, deadline)

    @classmethod
    def _line(cls, owner: str, what: str, timeout: float) -> str:
        ended = "its worker process was ended" if cls.folder else "the command was ended"
        message = _late(what, timeout, f"could not be stopped (it holds the interpreter, in C code): {ended}")
        return f"{owner}\t{message}" if cls.folder else f"error: {owner}: {message}\n" if owner else f"error: {message}\n"

    @classmethod
    def _start(cls) -> None:
        backing = tempfile.TemporaryFile()  # unlinked: gone with the last process that holds it
        backing.truncate(_PAGE_BYTES)
        cls.page, cls.shown, cls.pid = mmap.mmap(backing.fileno(), _PAGE_BYTES), (), os.getpid()
        cls.folder = os.environ.get(WATCHDOG_FOLDER_VARIABLE, "")
        with sigint_held():  # started with SIGINT blocked: a Ctrl-C meanwhile cannot print its traceback
            cls.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG_SOURCE, str(backing.fileno()), str(cls.pid),
                 str(WATCHDOG_POLL_SECONDS), cls.folder], pass_fds=[backing.fileno()], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL)
        backing.close()

    @classmethod
    def _forget(cls) -> None:
        """In a forked child: none of the parent's calls is under way here, and its lock may have been held."""
        cls.calls, cls.lock, cls.pid = {}, threading.Lock(), 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_Watchdog._forget)


@contextmanager
def calls_for(owner: str) -> Iterator[None]:
    """Within this block the watchdog's line starts with `owner` (a sweep's cell: `cell 3 (devices=8)`), so that
    a process ended for a stuck call says what the call was for; one owner at a time in a process."""
    _Watchdog.owner = owner
    try:
        yield
    finally:
        _Watchdog.owner = ""


def stuck_calls(folder: str) -> list[tuple[str, str]]:
    """(owner, message) of each process a watchdog ended with its line in `folder` (WATCHDOG_FOLDER_VARIABLE)."""
    calls = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".partial"):
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as file:
                owner, _, message = file.read().partition("\t")
            calls.append((owner, message))
    return calls


def _late(what: str, timeout: float, fate: str) -> str:
    return (f"{what} did not return within {timeout:g} s and {fate}: fix it, or allow it more time with "
            f"{TIMEOUT_VARIABLE}=SECONDS")


def _context():
    """Spawn: the child is the command's own, so it ends with it (`exit_with`); a forkserver's child would
    hold the server alive, and the server it, after the command is killed. Never a plain fork, which copies
    the threads of a process that has them (a progress bar's, Dask's) in whatever state they are."""
    return multiprocessing.get_context("spawn")


def _answer_from_a_child(what: str, payload: bytes, timeout: float) -> tuple[str, object]:
    """(kind, answer) from `_answer` run in a child process, which is killed if it has not answered in time."""
    context = _context()
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_answer, args=(sending, list(sys.path), payload), name=f"simbench: {what}")
    try:
        with sigint_held():  # the child ignores Ctrl-C (the command reports it once); it must not hear it starting
            child.start()
        sending.close()
        if not receiving.poll(timeout):
            raise PluginTimeout(_late(what, timeout, "was stopped"))
        try:
            return receiving.recv()
        except EOFError:
            child.join()
            raise PluginFailure(f"{what} ended its process without an answer (exit status {child.exitcode})",
                                _stand_in("SystemExit", str(child.exitcode))) from None
    finally:
        if child.is_alive():
            child.kill()
        if child.pid is not None:
            child.join()
        receiving.close()


def _answer(sending, path: list[str], payload: bytes) -> None:
    """In the child: run the call and send back ("returned", value), ("raised", (type name, message, error or
    None where it cannot travel)) or ("unsent", why) when the call cannot be unpickled here."""
    deaf_to_sigint()
    exit_with(os.getppid())
    sys.path[:] = path  # the caller's, where the plug-in's module was found
    try:
        function, arguments = pickle.loads(payload)
    except BaseException as error:  # noqa: BLE001 - unpickling runs imports: anything may come
        sending.send(("unsent", f"{type(error).__name__}: {error}"))
        return
    try:
        answer = ("returned", function(*arguments))
    except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: the plug-in's, not ours
        answer = ("raised", _portable(error))
    try:
        sending.send(answer)
    except Exception as error:  # noqa: BLE001 - a value that cannot be pickled back
        sending.send(("raised", _portable(TypeError(f"its result cannot be sent back: {error}"))))


def _portable(error: BaseException) -> tuple[str, str, BaseException | None]:
    """An exception as it can travel between processes: its type's name, its message, and itself where it
    survives a pickle round trip (one with its own constructor arguments may not)."""
    try:
        travelled = pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001
        travelled = None
    return type(error).__name__, str(error), travelled


def _stand_in(name: str, message: str) -> Exception:
    """An exception named `name` saying `message`, for one that could not travel back from its process."""
    return type(name, (Exception,), {})(message)


def _load_entry_point(name: str, value: str, group: str) -> None:
    from importlib.metadata import EntryPoint

    EntryPoint(name=name, value=value, group=group).load()
