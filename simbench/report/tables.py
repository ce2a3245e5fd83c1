"""The report's tables and their CSV files: what `run` writes and `plot` reads back.

    >>> import tempfile
    >>> from simbench.report.results import build_tables
    >>> from simbench.report.tables import read_tables, write_tables
    >>> from simbench.scenario import Scenario
    >>> scenario = Scenario(name="demo", dataset={"histogram": "squad_1_1_384"}, strategies=["sort", "unpad"],
    ...                     devices=[1, 8], steps=5)
    >>> tables = build_tables(scenario, scenario.dataset.load())
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     write_tables(tables, folder)
    ...     read_tables(folder).scaling.columns[:4].tolist()
    ['strategy', 'devices', 'speedup', 'tokens_per_s']
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd

from simbench.errors import InputError

# Enough digits to round-trip the figures that matter, few enough to keep the CSVs readable.
FLOAT_FORMAT = "%.10g"
# Tables every report has rows in, and the columns the summary and plots index them by.
REQUIRED_COLUMNS = {"packing": ("label", "efficiency"), "scaling": ("strategy", "devices", "speedup"),
                    "breakdown": ("strategy", "devices")}


@dataclass(frozen=True, eq=False)
class ReportTables:
    """Everything a report's summary and plots are made from; one CSV per field."""

    packing: pd.DataFrame  # one row per packer plan: Packing.metrics() plus its LP bound
    scaling: pd.DataFrame  # one row per (strategy, devices): speed-up, tokens/s, sequences/s, step time
    breakdown: pd.DataFrame  # one row per (strategy, devices): mean seconds per step by cause
    latency: pd.DataFrame  # per-(step, device) speed-up samples of content-dependent plans
    gumbel: pd.DataFrame  # per strategy: Gumbel location and scale fitted to `latency`
    extrapolation: pd.DataFrame  # per (strategy, devices): expected speed-up from the Gumbel fit
    timeline: pd.DataFrame  # per (sample, stage) of one VTS batch: enter, finish, leave seconds
    timings: pd.DataFrame  # solve seconds per packer: measured, so it differs between runs

    @staticmethod
    def file_names() -> dict[str, str]:
        return {field.name: f"{field.name}.csv" for field in fields(ReportTables)}


def write_tables(tables: ReportTables, folder: Path) -> None:
    for name, file_name in ReportTables.file_names().items():
        getattr(tables, name).to_csv(Path(folder) / file_name, index=False, float_format=FLOAT_FORMAT,
                                     lineterminator="\n")


def read_tables(folder: Path) -> ReportTables:
    """Read a report's tables back; a missing or unreadable file is named in the error."""
    frames = {}
    for name, file_name in ReportTables.file_names().items():
        path = Path(folder) / file_name
        try:
            frames[name] = pd.read_csv(path)
        except FileNotFoundError:
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
    return ReportTables(**frames)
