"""An experiment's tables as CSV files: what `run` writes and `plot` reads back.

    >>> import tempfile
    >>> from simbench.experiment import run_experiment
    >>> from simbench.report.tables import read_tables, write_tables
    >>> from simbench.scenario import Scenario
    >>> scenario = Scenario(name="demo", dataset={"histogram": "squad_1_1_384"}, strategies=["sort", "unpad"],
    ...                     devices=[1, 8], steps=5)
    >>> tables = run_experiment(scenario)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     written = write_tables(tables, folder)
    ...     read_tables(folder).scaling.columns[:4].tolist()
    ['strategy', 'devices', 'speedup', 'tokens_per_s']
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

import pandas as pd

from simbench.errors import InputError
from simbench.experiment import ExperimentResult

# The scenario as run, beside its tables: what `recommend` and `plot` read a report folder's scenario from.
RESOLVED_SCENARIO = "resolved.yaml"
# Enough digits to round-trip the figures that matter, few enough to keep the CSVs readable.
FLOAT_FORMAT = "%.10g"
# Tables every report has rows in, and the columns the summary and plots index them by.
REQUIRED_COLUMNS = {"packing": ("label", "efficiency"), "scaling": ("strategy", "devices", "speedup"),
                    "breakdown": ("strategy", "devices")}


# Tables with a default: a report from before they existed reads back with them empty.
_OPTIONAL = {field.name for field in fields(ExperimentResult) if field.default_factory is not MISSING}


def file_names() -> dict[str, str]:
    """The CSV file of each table of an `ExperimentResult`."""
    return {field.name: f"{field.name}.csv" for field in fields(ExperimentResult)}


# Tables only some runs have (a 4D layout's): written when they hold rows, so that other reports stay as they were.
_WRITTEN_WHEN_FILLED = {"parallel", "memory"}


def write_tables(tables: ExperimentResult, folder: Path) -> list[str]:
    """Write the tables; the file names written."""
    written = []
    for name, file_name in file_names().items():
        frame = getattr(tables, name)
        if name in _WRITTEN_WHEN_FILLED and frame.empty:
            continue
        frame.to_csv(Path(folder) / file_name, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")
        written.append(file_name)
    return written


def read_tables(folder: Path) -> ExperimentResult:
    """Read a report's tables back; a missing or unreadable file is named in the error."""
    frames = {}
    for name, file_name in file_names().items():
        path = Path(folder) / file_name
        try:
            frames[name] = pd.read_csv(path)
        except FileNotFoundError:
            if name in _OPTIONAL:
                frames[name] = pd.DataFrame()  # a report written before this table existed
                continue
            raise InputError(f"not a simbench report: {file_name} is missing", source=str(folder)) from None
        except pd.errors.EmptyDataError:
            frames[name] = pd.DataFrame()
        except pd.errors.ParserError as error:
            raise InputError(f"unreadable CSV: {error}", source=str(path)) from None
    for name, columns in REQUIRED_COLUMNS.items():
        missing = [column for column in columns if column not in frames[name]]
        if missing or frames[name].empty:
            problem = f"lacks column(s) {', '.join(missing)}" if missing else "has no rows"
            raise InputError(f"damaged report: {name}.csv {problem}; run the scenario again", source=str(folder))
    return ExperimentResult(**frames)
