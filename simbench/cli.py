"""The `simbench` command line: every module in `simbench.commands` adds its commands here.

User mistakes (`InputError`, invalid scenarios) print one clear line and exit with status 2;
anything else is a bug and keeps its traceback. Command modules import their heavy dependencies
inside the commands, so that `simbench --help` and `simbench list` start at once.
"""

import importlib
import pkgutil
import sys

import typer

import simbench
import simbench.commands
from simbench.errors import InputError

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
    try:
        (build_app([named]) if named in command_modules() else sys.modules[__name__].app)()
    except InputError as error:
        _print_error(str(error))
        sys.exit(2)
    except MemoryError:
        _print_error("out of memory: this input needs more memory than the machine has; try fewer steps, "
                     "devices or strategies, a smaller histogram, or a strategy that scales (see `simbench list`)")
        sys.exit(2)
    except KeyboardInterrupt:
        # Outputs are written atomically, so an interrupted run has nothing to report but the stop.
        _print_error("interrupted", prefix="")
        sys.exit(130)


def _print_error(message: str, prefix: str = "error: ") -> None:
    from rich.console import Console
    from rich.text import Text

    # soft_wrap: one line however long, so that the file:line prefix stays greppable.
    Console(stderr=True).print(Text(prefix, style="bold red") + Text(message), soft_wrap=True, highlight=False)


if __name__ == "__main__":
    main()
