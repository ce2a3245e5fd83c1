"""The `simbench` command line: every module in `simbench.commands` adds its commands here.

User mistakes (`InputError`, invalid scenarios) print one clear line and exit with status 2;
anything else is a bug and keeps its traceback.
"""

import importlib
import pkgutil
import sys

import typer
from rich.console import Console
from rich.text import Text

import simbench.commands
from simbench.errors import InputError

app = typer.Typer(
    help="Simulate and benchmark training transformers on variable-length data.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def simbench_app() -> None:
    """Simulate and benchmark training transformers on variable-length data."""

for module_info in sorted(pkgutil.iter_modules(simbench.commands.__path__), key=lambda info: info.name):
    importlib.import_module(f"simbench.commands.{module_info.name}").register(app)


def main() -> None:
    try:
        app()
    except InputError as error:
        # soft_wrap: one line however long, so that the file:line prefix stays greppable.
        Console(stderr=True).print(Text("error: ", style="bold red") + Text(str(error)), soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        # Outputs are written atomically, so an interrupted run has nothing to report but the stop.
        Console(stderr=True).print("interrupted", highlight=False)
        sys.exit(130)
