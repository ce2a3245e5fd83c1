"""HiGHS solvers that print nothing: the LP bound's and the exact packing search's, created through one door.

HiGHS prints its banner from C++ straight to file descriptor 1 while a `Highs` object is built (highspy 1.16
does), before `output_flag` can be set, so `--json` output would no longer parse.
"""

from __future__ import annotations

import os
import sys
import threading


# fd 1 belongs to the whole process: one constructor at a time points it away and back.
_STDOUT_FD_LOCK = threading.Lock()


def silent_highs():
    """A new `highspy.Highs()` whose construction prints nothing on stdout, its own output switched off.

    HiGHS prints its banner from C++ straight to file descriptor 1 while the object is built (highspy
    1.16 does), before `output_flag` can be set, so `--json` output would no longer parse. Python's
    `redirect_stdout` cannot catch a C printf: fd 1 itself points at the null device meanwhile.
    """
    import highspy

    with _STDOUT_FD_LOCK:
        try:
            sys.stdout.flush()  # what Python already wrote goes out before fd 1 moves
            saved_fd = os.dup(1)
        except (AttributeError, OSError, ValueError):  # no stdout at all: nothing to keep clean
            return _quiet(highspy.Highs())
        null_fd = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null_fd, 1)
            return _quiet(highspy.Highs())
        finally:
            _flush_c_stdout()  # a banner still in C's buffer goes to the null device, not later to stdout
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
            os.close(null_fd)


def _flush_c_stdout() -> None:
    import ctypes

    try:
        ctypes.CDLL(None).fflush(None)
    except (AttributeError, OSError, TypeError):  # no C library to reach this way (Windows)
        pass


def _quiet(highs):
    highs.setOptionValue("output_flag", False)
    return highs
