"""Recorded packer efficiencies and the check that no packer has fallen below its record.

simbench/data/baselines/packer_efficiency.csv (bundled with the package): one row per (histogram, strategy, max_depth, seed, batch_size).

    >>> from simbench.strategies.baseline import compare_with_baseline, load_baseline
    >>> squad = [record for record in load_baseline()
    ...          if record.histogram == "squad_1_1_384" and record.strategy == "spfhp"]
    >>> comparisons = list(compare_with_baseline(squad))   # packs SQuAD again at each recorded depth
    >>> [(c.record.max_depth, round(c.measured_efficiency, 4), c.regressed) for c in comparisons]
    [(2, 0.876, False), (3, 0.9755, False), (4, 0.9755, False), (8, 0.9755, False), (None, 0.9755, False)]
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from simbench.atomic import atomic_file
from simbench.data import bundled_file
from simbench.errors import InputError, read_text_file
from simbench.histogram import load_histogram
from simbench.strategies import PackOptions, get_strategy
from simbench.strategies.packing import Packing

# A pathlib.Path wherever simbench is installed as files (a checkout or an unpacked wheel).
BASELINE_PATH = bundled_file("baselines", "packer_efficiency.csv")
COLUMNS = ["histogram", "strategy", "max_depth", "seed", "batch_size", "efficiency"]
# A record is a floor, with one pack of slack. Most packers are integer algorithms that reproduce
# their records exactly, but nnlshp and optimal round a floating-point solution (an NNLS fit, an LP),
# and another SciPy/BLAS/HiGHS build can land a count on the other side of a rounding: SQuAD's nnlshp
# at depth 3 took 40,335 packs on one build and 40,336 on another before nnlshp settled its ties
# (nnlshp.HALF_TIE). Slack counted in packs means the same on every histogram, where an efficiency
# tolerance would not: one pack is 2.5e-5 of SQuAD's efficiency and 1e-7 of Wikipedia's.
ALLOWED_EXTRA_PACKS = 1


@dataclass(frozen=True)
class BaselineRecord:
    """The efficiency (a fraction) one strategy reached on one histogram with these options."""

    histogram: str
    strategy: str
    max_depth: int | None
    seed: int
    batch_size: int
    efficiency: float

    @property
    def options(self) -> PackOptions:
        return PackOptions(seed=self.seed, batch_size=self.batch_size)


@dataclass(frozen=True)
class Comparison:
    """A record and the efficiency and packs (a batcher's rows) its strategy reaches today."""

    record: BaselineRecord
    measured_efficiency: float
    measured_packs: int

    @property
    def shortfall(self) -> float:
        """Efficiency lost since the record (negative when the packer improved)."""
        return self.record.efficiency - self.measured_efficiency

    @property
    def extra_packs(self) -> float:
        """Packs beyond the record's (negative when the packer improved), in today's packs' mean size.

        Efficiency is real tokens over all tokens, so all tokens grew by record / measured efficiency.
        """
        return self.measured_packs * (1.0 - self.measured_efficiency / self.record.efficiency)

    @property
    def regressed(self) -> bool:
        return round(self.extra_packs, 6) > ALLOWED_EXTRA_PACKS  # rounded: one pack is 1.0, give or take float noise


def load_baseline(path: Path = BASELINE_PATH) -> list[BaselineRecord]:
    """Read the records; a malformed row is an InputError naming the file and line."""
    source = str(path)
    if not Path(path).exists():
        raise InputError("no such baseline file", source=source)
    rows = list(csv.reader(io.StringIO(read_text_file(path, "baseline"))))
    if not rows or [cell.strip() for cell in rows[0]] != COLUMNS:
        raise InputError(f"expected the header `{','.join(COLUMNS)}`", source=source, line=1)
    records = []
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(COLUMNS):
            raise InputError(f"expected {len(COLUMNS)} columns, found {len(row)}", source=source, line=line)
        histogram, strategy, depth, seed, batch_size, efficiency = (cell.strip() for cell in row)
        try:
            record = BaselineRecord(histogram, strategy, int(depth) if depth else None, int(seed),
                                    int(batch_size), float(efficiency))
        except ValueError as error:
            raise InputError(f"bad number: {error}", source=source, line=line) from None
        if not 0.0 < record.efficiency <= 1.0:
            raise InputError(f"efficiency must be a fraction in (0, 1], found {efficiency}", source=source, line=line)
        if record.max_depth is not None and record.max_depth < 1:
            raise InputError(f"max_depth must be at least 1 or empty, found {depth}", source=source, line=line)
        try:
            PackOptions(seed=record.seed, batch_size=record.batch_size)  # its checks, with this line named
        except InputError as error:
            raise InputError(str(error), source=source, line=line) from None
        records.append(record)
    return records


def write_baseline(records: Iterable[BaselineRecord], path: Path = BASELINE_PATH) -> None:
    """Write records in the layout `load_baseline` reads (efficiencies with all their digits)."""
    lines = [",".join(COLUMNS)]
    for record in records:
        depth = "" if record.max_depth is None else str(record.max_depth)
        lines.append(f"{record.histogram},{record.strategy},{depth},{record.seed},{record.batch_size},"
                     f"{record.efficiency!r}")
    with atomic_file(Path(path)) as temporary:
        temporary.write_text("\n".join(lines) + "\n")


def measure_packing(histogram_name: str, strategy: str, max_depth: int | None, options: PackOptions) -> Packing:
    """The packing the strategy makes today of a histogram (file path or bundled name)."""
    histogram = load_histogram(histogram_name)
    return get_strategy(strategy)(histogram, histogram.max_length, max_depth, options)


def compare_with_baseline(records: Iterable[BaselineRecord]) -> Iterator[Comparison]:
    """Measure each record's strategy again, yielding each comparison as it finishes."""
    for record in records:
        packing = measure_packing(record.histogram, record.strategy, record.max_depth, record.options)
        yield Comparison(record, packing.efficiency, packing.packs_total)
