"""Sequence-length histograms: the input to every strategy.

    >>> from simbench.histogram import LengthHistogram
    >>> h = LengthHistogram.from_lengths([3, 5, 5], max_length=8)
    >>> h.sequences, h.real_tokens, round(h.efficiency, 4)
    (3, 13, 0.5417)
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import numpy as np

from simbench.data import bundled_files
from simbench.errors import InputError, read_text_file
from simbench.validation import MAX_INTEGER_DIGITS, MAX_LENGTH, check_max_length, check_whole_number, json_integer

# Far above any dataset's size, and low enough that tokens (count x length) stay within int64.
MAX_COUNT = 1 << 40


@dataclass(frozen=True, eq=False)
class LengthHistogram:
    """Counts of sequences for each length 1..max_length.

    `counts[i]` is the number of sequences with exactly `i + 1` real tokens.
    """

    counts: np.ndarray
    name: str = "histogram"

    def __post_init__(self):
        counts = np.asarray(self.counts)
        if counts.ndim != 1 or counts.size == 0:
            raise InputError("a histogram needs a 1-D array of counts with at least one length")
        if counts.size > MAX_LENGTH:
            raise InputError(f"a histogram's max length may be at most {MAX_LENGTH:,}, found {counts.size:,}")
        if not np.issubdtype(counts.dtype, np.integer):
            if not np.all(np.isfinite(counts)) or np.any(counts != np.round(counts)):
                raise InputError("histogram counts must be whole numbers")
        if np.any(counts < 0):
            raise InputError(f"histogram counts must not be negative (length {int(np.argmax(counts < 0)) + 1})")
        counts = counts.astype(np.int64)
        counts.setflags(write=False)
        object.__setattr__(self, "counts", counts)

    @classmethod
    def from_counts(cls, counts, name: str = "histogram") -> LengthHistogram:
        return cls(np.asarray(counts), name=name)

    @classmethod
    def from_lengths(cls, lengths, max_length: int, name: str = "histogram") -> LengthHistogram:
        """Histogram of an array of per-sequence lengths (vectorized: 16M lengths in ~0.1 s)."""
        max_length = check_max_length(max_length)
        lengths = np.asarray(lengths)
        if lengths.size and (lengths.min() < 1 or lengths.max() > max_length):
            bad = int(np.count_nonzero((lengths < 1) | (lengths > max_length)))
            raise InputError(f"{bad} sequence lengths lie outside 1..{max_length}")
        if not np.issubdtype(lengths.dtype, np.integer) and np.any(lengths != np.round(lengths)):
            # The cast below would cut 3.5 to 3 and count it as a length-3 sequence.
            fractional = lengths[lengths != np.round(lengths)]
            raise InputError(f"sequence lengths must be whole numbers, found {fractional[0]}")
        counts = np.bincount(lengths.astype(np.int64, copy=False), minlength=max_length + 1)[1:]
        return cls(counts, name=name)

    @property
    def max_length(self) -> int:
        return int(self.counts.size)

    @property
    def lengths(self) -> np.ndarray:
        """The lengths 1..max_length, aligned with `counts`."""
        return np.arange(1, self.max_length + 1, dtype=np.int64)

    @property
    def sequences(self) -> int:
        return int(self.counts.sum())

    @property
    def real_tokens(self) -> int:
        """Exact however large: 2^40 sequences of 2^20 tokens would wrap numpy's int64 (to 0, say)."""
        if self.sequences * self.max_length < 2**63:
            return int(self.counts @ self.lengths)
        present = np.flatnonzero(self.counts)
        return sum(int(count) * int(length) for count, length in zip(self.counts[present], self.lengths[present]))

    @property
    def longest(self) -> int:
        """Length of the longest sequence present (0 when empty)."""
        nonzero = np.flatnonzero(self.counts)
        return int(nonzero[-1] + 1) if nonzero.size else 0

    @property
    def padding_tokens(self) -> int:
        """Padding needed when every sequence is padded to max_length."""
        return self.sequences * self.max_length - self.real_tokens

    @property
    def efficiency(self) -> float:
        """Real tokens over all token slots when padding to max_length."""
        slots = self.sequences * self.max_length
        return self.real_tokens / slots if slots else 1.0

    @property
    def theoretical_speedup(self) -> float:
        """Slots over real tokens: the speed-up of removing every padding token for free if a step cost
        its tokens. Not a ceiling: attention costs the square of a row's length, so un-padded strategies
        save more than the padding tokens' share (packed-varlen reaches 5.4x against 5.08x at 8k); the
        ceiling is simbench.costmodels.ideal's."""
        return 1.0 / self.efficiency

    def sample_lengths(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """Lengths of `size` sequences drawn with replacement in proportion to the counts."""
        if not self.sequences:
            raise InputError(f"histogram {self.name} holds no sequences to draw from")
        return rng.choice(self.lengths, size=size, p=self.counts / self.sequences)

    def expand(self) -> np.ndarray:
        """Every sequence's length, in order of length (the dataset, up to order)."""
        return np.repeat(self.lengths, self.counts)

    def to_csv(self, path: Path) -> None:
        rows = "\n".join(f"{length},{count}" for length, count in zip(self.lengths, self.counts))
        Path(path).write_text(f"length,count\n{rows}\n")


def bundled_histograms() -> dict[str, Traversable]:
    """Bundled histograms by name (file stem), read from the package's data."""
    return bundled_files("histograms", ".csv")


def load_histogram(name_or_path: str | Path) -> LengthHistogram:
    """Load a histogram from a CSV/JSON file, or a bundled one by its name (e.g. `wikipedia_512`)."""
    bundled = bundled_histograms()
    if str(name_or_path) in bundled:
        with resources.as_file(bundled[str(name_or_path)]) as path:
            return _load_csv(path)
    path = Path(name_or_path)
    if not path.exists():
        known = ", ".join(bundled) or "none"
        raise InputError(f"no such histogram file or bundled histogram (bundled: {known})",
                         source=str(name_or_path))
    if path.suffix.lower() == ".json":
        return _load_json(path)
    return _load_csv(path)


def _load_csv(path: Path) -> LengthHistogram:
    source = str(path)
    reader = csv.reader(io.StringIO(read_text_file(path, "histogram")))
    try:
        rows = list(reader)
    except csv.Error as error:  # e.g. a field over the csv module's 131,072-character limit
        raise InputError(f"not a histogram CSV: {error}", source=source, line=reader.line_num) from None
    rows = [(number, row) for number, row in enumerate(rows, start=1) if row and any(cell.strip() for cell in row)]
    if not rows:
        raise InputError("the file is empty; expected a header `length,count` and one row per length",
                         source=source)
    header_line, header = rows[0]
    if [cell.strip().lower() for cell in header] != ["length", "count"]:
        raise InputError(f"expected the header `length,count`, found `{','.join(header)}`",
                         source=source, line=header_line)
    pairs: dict[int, int] = {}
    for line, row in rows[1:]:
        if len(row) != 2:
            raise InputError(f"expected two columns `length,count`, found {len(row)}", source=source, line=line)
        length = _whole_number(row[0], "length", source, line)
        count = _whole_number(row[1], "count", source, line)
        if length < 1:
            raise InputError(f"length must be at least 1, found {length}", source=source, line=line)
        if length > MAX_LENGTH:
            raise InputError(f"length may be at most {MAX_LENGTH:,}, found {length:,}", source=source, line=line)
        if count < 0:
            raise InputError(f"count must not be negative, found {count}", source=source, line=line)
        if count > MAX_COUNT:
            raise InputError(f"count may be at most {MAX_COUNT:,}, found {count:,}", source=source, line=line)
        if length in pairs:
            raise InputError(f"length {length} appears twice", source=source, line=line)
        pairs[length] = count
    if not pairs:
        raise InputError("no data rows after the header", source=source)
    return _from_pairs(pairs, path.stem)


def _load_json(path: Path) -> LengthHistogram:
    source = str(path)
    text = read_text_file(path, "histogram")
    try:
        data = json.loads(text, parse_int=json_integer)
    except InputError as error:  # an integer of thousands of digits: at the line that holds it
        long_number = re.search(r"\d{%d}" % (MAX_INTEGER_DIGITS + 1), text)
        raise error.located(source, text.count("\n", 0, long_number.start()) + 1 if long_number else None) from None
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON: {error.msg}", source=source, line=error.lineno) from None
    except RecursionError:
        raise InputError("not a histogram: the JSON is nested thousands of levels deep", source=source) from None
    counts = data.get("counts") if isinstance(data, dict) else None
    if isinstance(counts, list):
        pairs = {index + 1: count for index, count in enumerate(counts)}
    elif isinstance(counts, dict):
        pairs = {}
        for key, count in counts.items():
            length = _whole_number(key, "length", source, None)
            if length in pairs:  # "10" and "010" are one length: refuse rather than keep one count
                raise InputError(f"length {length} appears twice (as {key!r} and an earlier key)", source=source)
            pairs[length] = count
    else:
        raise InputError('expected {"counts": [count of length 1, ...]} or {"counts": {"length": count}}',
                         source=source)
    for length, count in pairs.items():
        try:
            check_whole_number(count, f"count of length {length}", minimum=0)
        except InputError as error:
            raise error.located(source) from None
        if count > MAX_COUNT:
            raise InputError(f"count of length {length} may be at most {MAX_COUNT:,}, found {count:,}", source=source)
    if not pairs:
        raise InputError("no counts", source=source)
    if min(pairs) < 1:
        raise InputError(f"length must be at least 1, found {min(pairs)}", source=source)
    if max(pairs) > MAX_LENGTH:
        raise InputError(f"length may be at most {MAX_LENGTH:,}, found {max(pairs):,}", source=source)
    try:
        max_length = check_max_length(data.get("max_length", max(pairs)))
    except InputError as error:
        raise error.located(source) from None
    if max(pairs) > max_length:
        raise InputError(f"length {max(pairs)} is above max_length {max_length}", source=source)
    pairs.setdefault(max_length, 0)
    return _from_pairs(pairs, path.stem)


def _from_pairs(pairs: dict[int, int], name: str) -> LengthHistogram:
    counts = np.zeros(max(pairs), dtype=np.int64)
    for length, count in pairs.items():
        counts[length - 1] = count
    return LengthHistogram(counts, name=name)


def _whole_number(text: str, what: str, source: str, line: int | None) -> int:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{what} must be a whole number, found {text.strip()!r}", source=source, line=line) from None
    if not value.is_integer():
        raise InputError(f"{what} must be a whole number, found {text.strip()!r}", source=source, line=line)
    return int(value)
