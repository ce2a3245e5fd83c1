"""Child processes that never outlive the command: started with SIGINT held back (a Ctrl-C is the command's
to report, once), and ending within PARENT_CHECK_SECONDS of the process they work for, however it ends.

    >>> from simbench.processes import sigint_held
    >>> with sigint_held():
    ...     pass
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# How often a child checks that the process it works for is still there.
PARENT_CHECK_SECONDS = 0.2


@contextmanager
def sigint_held() -> Iterator[None]:
    """SIGINT held back in this thread (delivered when the block ends): a process spawned meanwhile inherits
    it blocked, so a Ctrl-C while it starts Python cannot print its KeyboardInterrupt traceback."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def deaf_to_sigint() -> None:
    """In a child: ignore SIGINT from now on (it reaches the whole process group; the process the child works
    for hears it, ends the child and reports the stop once), then unblock it (blocked since it was started)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def exit_with(parent: int) -> None:
    """End this child within PARENT_CHECK_SECONDS of `parent`, however that one ends (SIGKILL included,
    which runs no clean-up in it): a child is reparented when its parent dies, and without this its pipes
    close only when it next looks at them (workers stayed 30 s and more)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(1)  # no clean-up: the work it would finish is for no one

    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=watch, name="simbench: exit with the parent", daemon=True).start()
