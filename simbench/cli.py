"""The `simbench` command line: every module in `simbench.commands` adds its commands here.

User mistakes (`InputError`, invalid scenarios) print one clear line and exit with status 2;
anything else is a bug and keeps its traceback. Command modules import their heavy dependencies
inside the commands, so that `simbench --help` and `simbench list` start at once.
"""

import os
import signal
import sys
from pathlib import Path


class _Interrupted(BaseException):
    """Ctrl-C, raised instead of KeyboardInterrupt: click turns that into "Aborted!" and exit status 1."""


def _interrupt(signum, frame) -> None:
    # Once: a second Ctrl-C must not interrupt the clean-up (ending the workers, removing a staging folder).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise _Interrupted


def _interrupt_while_importing(signum, frame) -> None:
    # Nothing started yet, nothing to clean up: the one line, and out.
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def _take_ctrl_c(handler=_interrupt) -> None:
    """Ctrl-C ends the command with one line (see `main`), unless whoever started it ignores SIGINT."""
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _interrupt_while_importing):
        signal.signal(signal.SIGINT, handler)


# As the command (not when a test or a program imports this module), before the imports below take their
# tenth of a second: a Ctrl-C during them is one line too.
if Path(sys.argv[0]).name in ("simbench", "cli.py", "__main__.py"):
    _take_ctrl_c(_interrupt_while_importing)

import importlib  # noqa: E402
import pkgutil  # noqa: E402

import typer  # noqa: E402

import simbench  # noqa: E402
import simbench.commands  # noqa: E402
from simbench.errors import InputError  # noqa: E402

HELPERS_MODULE = "common"  # shared by the commands, adds none of its own


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"simbench {simbench.__version__}")
        raise typer.Exit()


def simbench_app(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    """Simulate and benchmark training transformers on variable-length data."""


def command_modules() -> list[str]:
    """The modules of `simbench.commands` that add commands, by name."""
    return sorted(info.name for info in pkgutil.iter_modules(simbench.commands.__path__) if info.name != HELPERS_MODULE)


def build_app(modules: list[str] | None = None) -> typer.Typer:
    """The command line with the commands of `modules` (of every command module when None)."""
    app = typer.Typer(
        help="Simulate and benchmark training transformers on variable-length data.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        # Plain help: rich's formatter alone costs more start-up time than the rest of `simbench --help`.
        rich_markup_mode=None,
    )
    app.callback()(simbench_app)
    for module in command_modules() if modules is None else modules:
        importlib.import_module(f"simbench.commands.{module}").register(app)
    return app


def __getattr__(name: str):
    # `app`, every command, is built on first use: `main` builds only the command it runs.
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    # A command line that names a command whose module has its name (`pack`, `calibrate-decoder`) builds that
    # command alone: importing the others and typer's conversion of their signatures were a tenth of a cold
    # `simbench pack`. Anything else (`--help`, `list`, a typo) gets every command and typer's own messages.
    named = sys.argv[1].replace("-", "_") if len(sys.argv) > 1 else None
    _take_ctrl_c()
    try:
        (build_app([named]) if named in command_modules() else sys.modules[__name__].app)()
    except InputError as error:
        _print_error(str(error))
        sys.exit(2)
    except MemoryError:
        _print_error("out of memory: this input needs more memory than the machine has; try fewer steps, "
                     "devices or strategies, a smaller histogram, or a strategy that scales (see `simbench list`)")
        sys.exit(2)
    except (_Interrupted, KeyboardInterrupt):
        # Outputs are written atomically, so an interrupted run has nothing to report but the stop.
        _print_error("interrupted", prefix="")
        _exit_within(130, EXIT_GRACE_SECONDS)


# How long an interrupted command's exit may take before it is cut short (a normal one takes under a second).
EXIT_GRACE_SECONDS = 10.0


def _exit_within(status: int, seconds: float) -> None:
    """Exit with `status`, cut short after `seconds`. Every `with` block has cleaned up by now (workers ended,
    staging folders removed); the interpreter's exit then joins multiprocessing's and concurrent.futures' helper
    threads, and one blocked on a pipe a terminated worker held kept an interrupted `run` alive after its one
    line (CI, under load, Ctrl-C at 5 s). The exit runs as usual (its queues' semaphores released), with a timer
    that ends the process if it is still exiting by then. A caller that catches the SystemExit (a test calling
    `main`) goes on: its main thread is alive, and the timer leaves it be."""
    import threading

    timer = threading.Timer(seconds, _end_a_hung_exit, (status,))
    timer.daemon = True
    timer.start()
    sys.exit(status)


def _end_a_hung_exit(status: int) -> None:
    """End the process at once, its child processes first, if it is exiting (a process that caught the SystemExit
    goes on). The interpreter's exit first runs threading's exit hooks, where concurrent.futures joins its
    executors' threads (the wait CI saw hang), with the main thread still alive; it then stops the main thread
    and joins the other threads and atexit's hooks. `threading._SHUTTING_DOWN` marks the first part: private, so
    read with a default, the main thread's state covering the rest."""
    import multiprocessing
    import threading

    if threading.main_thread().is_alive() and not getattr(threading, "_SHUTTING_DOWN", False):
        return
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(timeout=2)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _print_error(message: str, prefix: str = "error: ") -> None:
    from rich.console import Console
    from rich.text import Text

    # soft_wrap: one line however long, so that the file:line prefix stays greppable.
    Console(stderr=True).print(Text(prefix, style="bold red") + Text(message), soft_wrap=True, highlight=False)


if __name__ == "__main__":
    main()
