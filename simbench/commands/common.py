"""What the commands share: library errors in option names, option parsing, JSON lines, progress bars.

Kept import-light (typer and the standard library) so that `simbench --help` loads it in no time.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator

from simbench.errors import InputError


def command(function: Callable, **names: str) -> Callable:
    """`function` whose library errors call each value by the command's option for it (`max_length`
    becomes `--max-length`); `names` adds options whose library name differs (`devices="--fit-devices"`)."""
    options = {**_option_names(function), **names}

    @functools.wraps(function)
    def run(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except InputError as error:
            raise error.renamed(options) from None

    return run


def _option_names(function: Callable) -> dict[str, str]:
    names = {}
    for name, parameter in inspect.signature(function).parameters.items():
        long_options = [flag for flag in getattr(parameter.default, "param_decls", ()) or () if flag.startswith("--")]
        if long_options:
            names[name] = long_options[0]
    return names


def parse_counts(text: str, option: str) -> list[int]:
    """Comma-separated whole numbers such as `1,8,64`; their bounds are the library's to check."""
    counts = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()):  # "²".isdigit() is true, and int() refuses it
            raise InputError(f"{option} must be comma-separated whole numbers >= 1, found {part!r} in {text!r}")
        counts.append(int(part))
    return counts


def parse_strategies(values: Iterable[str] | None) -> list[str] | None:
    """A repeatable `--strategy` whose values may each list several, comma-separated (`-s spfhp:3,unpad`), as
    `--devices 1,8` does; a plan's name holds `:` and `=` but never a comma."""
    if values is None:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def parse_model(text: str):
    """A model preset name, or dimensions written `layers=2,hidden=128,heads=2,ffn=512`."""
    from simbench.costmodels.model import get_model

    if "=" not in text:
        return get_model(text)
    dimensions = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if not value.strip().isdigit():
            raise InputError(f"model dimension {key.strip()!r} needs a whole number, found {value.strip()!r}")
        dimensions[key.strip()] = int(value)
    return get_model(dimensions)


def print_json_lines(records: Iterable[dict]) -> None:
    """One JSON object per line, each flushed as it comes, so that a pipe reads results as they finish."""
    for record in records:
        print(json.dumps({key: _plain(value) for key, value in record.items()}), flush=True)


def _plain(value):
    """JSON-ready values: numpy numbers to Python, NaN to null."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


@contextlib.contextmanager
def stdout_to_stderr(active: bool = True) -> Iterator[None]:
    """While active, whatever is written to stdout goes to stderr, from Python or from a C library (the
    process's file descriptor 1 itself), so that a command's --json output stays the only thing on stdout."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        _flush_c_streams()  # a C library's buffered output belongs to stderr too
        os.dup2(saved, 1)
        os.close(saved)


def _flush_c_streams() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to ask (not a POSIX process)
        pass


def progress_bar(console, quiet: bool = False):
    """The commands' progress bar; off when `quiet` or when `console` is no terminal (a pipe or a CI log
    would keep a stray blank line where the transient bar was: `stage_lines` speaks there instead)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=quiet or not console.is_terminal)


def stage_lines(console=None, quiet: bool = False) -> Callable[[str], None] | None:
    """Where no live bar shows (stderr is a pipe, a CI log, a notebook), one line per finished stage with
    the seconds since the start, so a long run is never silent; None in a terminal or when `quiet`.

    `console`: the rich console a command's progress bar shares; None for plain stderr, which spares a
    command without a bar (`pack`) importing rich, a tenth of its start-up."""
    if quiet or (console.is_terminal if console is not None else sys.stderr.isatty()):
        return None
    start = time.perf_counter()

    def report(stage: str) -> None:
        line = f"[{time.perf_counter() - start:7.1f} s] {stage}"
        if console is None:
            print(line, file=sys.stderr, flush=True)
        else:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
            console.file.flush()

    return report


# A long timing run, piped, says how far it is at most this often.
STEP_LINE_SECONDS = 10.0


def step_lines(stage: Callable[[str], None] | None, what: str,
               every_seconds: float = STEP_LINE_SECONDS) -> Callable[[int], None] | None:
    """A library progress callback (called once per unit of work with the total) that speaks through `stage`
    (`stage_lines`: where no live bar shows) at the first unit, at most every `every_seconds` and at the last, e.g.
    `[   12.0 s] timed 40 of 300 steps`; None when `stage` is None (a terminal's bar shows instead)."""
    if stage is None:
        return None
    done, last = 0, -float("inf")

    def advance(total: int) -> None:
        nonlocal done, last
        done += 1
        now = time.perf_counter()
        if done == 1 or done >= total or now - last >= every_seconds:
            stage(f"{what} {done:,} of {total:,} steps")
            last = now

    return advance


FORCE_HELP = ("replace the output file if it exists, or if another run writes it meanwhile (never one the command "
              "reads)")
QUIET_HELP = "no progress: neither the live bar in a terminal nor the line per finished stage elsewhere"


def say(message: str, *, stderr: bool = True) -> None:
    """One plain line (to stderr unless asked): no rich highlighting, never folded, so paths stay greppable."""
    from rich.console import Console

    Console(stderr=stderr).print(message, highlight=False, soft_wrap=True)


def print_table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[str]], *, left: Iterable[str] = (),
                no_wrap: bool = False, stderr: bool = False, **table_options) -> None:
    """A rich table: the `left` columns (names, labels) left-justified, the numbers right-justified, at least as wide
    as its longest words need: a narrow terminal or a pipe (80 columns to rich) would cut every number short; prose
    still folds. `no_wrap` keeps every cell on one line."""
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    left, columns, rows = set(left), list(columns), [list(row) for row in rows]
    table = Table(title=title, **table_options)
    for index, column in enumerate(columns):
        cells = [str(row[index]) for row in rows]
        prose = not no_wrap and any(len(cell.split()) > 1 for cell in cells)
        # Its header and its cells' longest word: the least it may take cutting none short. A column of single
        # words (numbers, names) takes exactly that, so that rich folds only the prose to fit.
        least = max(map(len, [column, *(word for cell in cells for word in (cell.split() if prose else [cell]))]))
        table.add_column(column, justify="left" if column in left else "right", no_wrap=no_wrap,
                         **({"min_width": least} if prose else {"width": least}))
    for row in rows:
        table.add_row(*row)
    console = Console(stderr=stderr)
    console.width = max(console.width, Measurement.get(console, console.options.update_width(10**4), table).minimum)
    console.print(table)


def advancing(progress, task):
    """A library progress callback (called once per unit of work with the total) driving a rich bar."""
    return lambda total: progress.update(task, total=total, advance=1)


UNPADDED_HELP = ("un-padded (and packed-varlen) attention: grouped (one call per length), jagged (nested tensors), "
                 "flash_varlen (flash_attn package) or torch_varlen (torch's varlen kernel; both CUDA only); "
                 "default: flash_varlen where installed, else torch_varlen on CUDA, grouped on CPU")
WALL_CLOCK_HELP = "time single-threaded CPU steps by the wall clock instead of the process's CPU seconds"


def field_values(settings: list[str]) -> dict[str, float]:
    """`--set FIELD=VALUE` options as profile overrides (the profile's own validation checks each field)."""
    values = {}
    for setting in settings:
        field, _, text = setting.partition("=")
        try:
            values[field.strip()] = float(text)
        except ValueError:
            raise InputError(f"--set takes FIELD=VALUE with a number, found {setting!r}") from None
    return values
