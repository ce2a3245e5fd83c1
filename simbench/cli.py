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

app = typer.Typer(
    help="Simulate and benchmark training transformers on variable-length data.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Plain help: rich's formatter alone costs more start-up time than the rest of `simbench --help`.
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"simbench {simbench.__version__}")
        raise typer.Exit()


@app.callback()
def simbench_app(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    """Simulate and benchmark training transformers on variable-length data."""


for module_info in sorted(pkgutil.iter_modules(simbench.commands.__path__), key=lambda info: info.name):
    if module_info.name != HELPERS_MODULE:
        importlib.import_module(f"simbench.commands.{module_info.name}").register(app)


def main() -> None:
    try:
        app()
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
