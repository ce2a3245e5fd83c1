"""`simbench bench`: run the performance benchmarks (pytest-benchmark) under tests/benchmarks/."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import typer

from simbench.commands.common import command
from simbench.errors import InputError

# The benchmarks are tests, not package data: they exist only in a source checkout, beside its
# pyproject.toml (an installed wheel's parent folder is site-packages, which may hold anything).
CHECKOUT_DIR = Path(__file__).resolve().parents[2]
BENCHMARKS_DIR = CHECKOUT_DIR / "tests" / "benchmarks"


def bench(
    keyword: str = typer.Option(None, "-k", help="only benchmarks whose name matches this expression"),
    quick: bool = typer.Option(False, "--quick", help="one round per benchmark, as CI runs them"),
    save: str = typer.Option(None, "--save", help="save the results as JSON under .benchmarks/ with this name"),
    check: bool = typer.Option(False, "--check", help="fail when a benchmark misses its target (seconds scaled by "
                               "the machine's load, or a ratio to a reference measured in the same run)"),
) -> None:
    """Measure the speed targets: packers, LP bound, assignment, simulator and the full scenario run."""
    if not (CHECKOUT_DIR / "pyproject.toml").is_file() or not BENCHMARKS_DIR.is_dir():
        raise InputError(f"`simbench bench` runs the benchmarks of a source checkout (tests/benchmarks/), not found "
                         f"beside this simbench ({CHECKOUT_DIR / 'simbench'}): clone the repository and "
                         f"`pip install -e '.[dev]'` there")
    if importlib.util.find_spec("pytest_benchmark") is None:
        # Without the plug-in pytest fails on --benchmark-only with a usage error that names no fix.
        raise InputError("`simbench bench` needs pytest-benchmark: pip install -e '.[dev]'")
    pytest_command = [sys.executable, "-m", "pytest", str(BENCHMARKS_DIR), "--benchmark-only", "-p", "no:cacheprovider",
               "--benchmark-columns=min,median,max,rounds", "--benchmark-sort=name"]
    if keyword:
        pytest_command += ["-k", keyword]
    if quick:
        pytest_command += ["--benchmark-min-rounds=1", "--benchmark-max-time=0.5"]
    if save:
        pytest_command += [f"--benchmark-save={save}"]
    if check:
        pytest_command += ["--check-targets"]
    raise typer.Exit(subprocess.call(pytest_command))


def register(app: typer.Typer) -> None:
    app.command()(command(bench))
