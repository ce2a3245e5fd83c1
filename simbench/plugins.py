"""Third-party code under guard: a plug-in is loaded, and a plug-in strategy called, in a watchdog thread,
so that any exception it raises (SystemExit and KeyboardInterrupt included) is reported as that plug-in's
failure, and one that does not return is given up on after SIMBENCH_PLUGIN_TIMEOUT seconds.

    >>> from simbench.plugins import guarded
    >>> guarded("the demo plug-in", sum, [1, 2], timeout=5)
    3
    >>> guarded("the demo plug-in", exit, 0, timeout=5)
    Traceback (most recent call last):
    ...
    simbench.plugins.PluginFailure: the demo plug-in failed: SystemExit: 0
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from simbench.errors import InputError

TIMEOUT_VARIABLE = "SIMBENCH_PLUGIN_TIMEOUT"
# A plug-in's import is a module load: a minute is far beyond any. A plug-in packer may pack a large
# histogram exactly: half an hour, unless the variable says otherwise.
LOAD_TIMEOUT_SECONDS = 60.0
CALL_TIMEOUT_SECONDS = 1800.0


class PluginFailure(InputError):
    """A plug-in raised `error` (kept, for a test battery to say what the plug-in itself raised)."""

    def __init__(self, message: str, error: BaseException):
        super().__init__(message)
        self.error = error


class PluginTimeout(InputError):
    """A plug-in did not return in time; its thread was abandoned."""


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
    """`function(*arguments)`, run in a daemon thread: its value, or an InputError naming `what` when it
    raises anything (an InputError it raises is passed on as it is: a plug-in's own refusal) or has not
    returned after `timeout` seconds (the thread is abandoned; it ends with the process)."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = function(*arguments)
        except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: the plug-in's, not ours
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"simbench: {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise PluginTimeout(f"{what} did not return within {timeout:g} s and was abandoned: fix it, or allow it more "
                         f"time with {TIMEOUT_VARIABLE}=SECONDS")
    error = outcome.get("error")
    if isinstance(error, InputError):
        raise error
    if error is not None:
        raise PluginFailure(f"{what} failed: {type(error).__name__}: {error}", error) from None
    return outcome["value"]
