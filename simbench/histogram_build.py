r"""Bring your own data: a length histogram from a file of lengths, token lists or raw text, or a dataset folder.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from simbench.histogram_build import build_histogram, read_lengths
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = Path(folder, "lengths.txt").write_text("3\n5\n600\n0\n")
    ...     built = build_histogram(read_lengths(Path(folder, "lengths.txt")), max_length=512, truncate=False)
    >>> built.histogram.sequences, built.too_long, built.empty
    (2, 1, 1)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simbench.errors import InputError, bounded_lines
from simbench.histogram import LengthHistogram
from simbench.validation import check_max_length, json_integer

Tokenizer = Callable[[str], int]  # text -> number of tokens
Progress = Callable[[int], None]  # bytes read so far
PROGRESS_LINES = 1 << 16
# .npy lengths read and converted this many at a time (32 MB of 64-bit values).
NPY_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class BuiltHistogram:
    """A histogram and what happened to the sequences that did not fit in it."""

    histogram: LengthHistogram
    sequences_read: int
    too_long: int  # sequences longer than max_length
    truncated: bool  # True: too-long sequences were cut to max_length; False: left out
    empty: int  # sequences with no tokens, left out (a histogram starts at length 1)
    tokens_read: int = 0
    tokens_beyond: int = 0  # tokens past max_length in the too-long sequences: what truncation cuts

    def describe(self) -> str:
        """What was counted and what was left out or cut, for the user."""
        slots = self.histogram.sequences * self.histogram.max_length
        lines = [f"{self.sequences_read} sequences read; {self.histogram.sequences} in the histogram "
                 f"({self.histogram.real_tokens} tokens, {_percent(slots - self.histogram.real_tokens, slots)} % "
                 f"padding at max length {self.histogram.max_length})"]
        if self.too_long:
            fate = "truncated to max length" if self.truncated else "left out (pass --truncate to keep them, cut)"
            lines.append(f"{self.too_long} sequences longer than {self.histogram.max_length} tokens: {fate}; "
                         f"over-length share {_percent(self.too_long, self.sequences_read)} % of the sequences, "
                         f"{_percent(self.tokens_beyond, self.tokens_read)} % of the tokens lie past "
                         f"{self.histogram.max_length}")
        if self.empty:
            lines.append(f"{self.empty} empty sequences (0 tokens): left out")
        return "\n".join(lines)


def _percent(part: int, whole: int) -> str:
    """`part` as a percentage of `whole` (0 of nothing), to two decimals, rounded half up; in whole numbers
    throughout, so that a part of a whole never shows more than 100 % however large both are."""
    if not whole:
        return "0.00"
    hundredths = (20_000 * part + whole) // (2 * whole)
    return f"{hundredths // 100}.{hundredths % 100:02d}"


def _exact_sum(values: np.ndarray) -> int:
    """The sum of up to 2^22 non-negative int64 values below 2^62, exactly, as a Python int: in two halves
    of 31 bits whose sums cannot wrap (np.sum of four lengths of 2^62 - 1 wraps int64)."""
    return (int((values >> 31).sum()) << 31) + int((values & (2**31 - 1)).sum())


def build_histogram(lengths: np.ndarray, max_length: int, *, truncate: bool, name: str = "histogram") -> BuiltHistogram:
    """Count `lengths` into 1..max_length; longer ones are cut or left out, empty ones left out."""
    max_length = check_max_length(max_length)
    lengths = np.asarray(lengths)
    if lengths.size and lengths.min() < 0:
        # Counted neither as empty nor as too long, they would vanish from the report.
        raise InputError(f"lengths must not be negative; element {int(np.argmin(lengths))} is {int(lengths.min())}")
    counts = np.zeros(max_length + 1, dtype=np.int64)
    too_long = tokens_read = tokens_beyond = 0
    # A chunk at a time, so that 100M 32-bit lengths never take a 64-bit copy of them all.
    for start in range(0, lengths.size, NPY_CHUNK_ELEMENTS):
        chunk = lengths[start:start + NPY_CHUNK_ELEMENTS].astype(np.int64)
        over = chunk > max_length
        too_long += int(np.count_nonzero(over))
        tokens_read += _exact_sum(chunk)
        tokens_beyond += _exact_sum(chunk[over]) - max_length * int(np.count_nonzero(over))
        counts += np.bincount(np.minimum(chunk, max_length) if truncate else chunk[~over], minlength=max_length + 1)
    histogram = LengthHistogram(counts[1:], name=name)
    return BuiltHistogram(histogram, int(lengths.size), too_long, truncate, int(counts[0]), tokens_read, tokens_beyond)


def whitespace_tokenizer(text: str) -> int:
    return len(text.split())


def load_tokenizer(path: Path | None) -> Tokenizer:
    """Whitespace tokens by default; with `path`, a Hugging Face `tokenizers` JSON file, or a tokenizer
    folder (`transformers`, with the chat template that chat rows are rendered with)."""
    if path is None:
        return whitespace_tokenizer
    if Path(path).is_dir():
        from simbench.histogram_hf import TransformersTokenizer

        return TransformersTokenizer(Path(path))
    try:
        from tokenizers import Tokenizer as HuggingFaceTokenizer
    except ImportError:
        raise InputError("--tokenizer needs the `tokenizers` package (pip install tokenizers); "
                         "without it, whitespace tokens are counted", source=str(path)) from None
    try:
        tokenizer = HuggingFaceTokenizer.from_file(str(path))
    except Exception as error:  # the package raises a bare Exception for unreadable files
        raise InputError(f"not a `tokenizers` tokenizer file: {error}", source=str(path)) from None
    return lambda text: len(tokenizer.encode(text).ids)


def read_lengths(path: Path, *, column: str | None = None, tokenizer: Tokenizer | None = None,
                 progress: Progress | None = None, split: str | None = None) -> np.ndarray:
    """Per-sequence lengths from `path`, chosen by its suffix.

    .npy: an integer array of lengths. .jsonl: `column` of each JSON line. .parquet: `column`.
    A folder: a Hugging Face dataset (`save_to_disk`, or Parquet shards), `column` of its `split`.
    Other files: one sequence per line, a length, or with `tokenizer` raw text to tokenize.
    A column holds lengths, token lists or (with `tokenizer`) text, in datasets also chat messages.
    `progress(bytes)` is told how far line-by-line reading has got.
    """
    progress = progress or (lambda read_bytes: None)
    path = Path(path)
    if path.is_dir():
        from simbench.histogram_hf import read_dataset_lengths

        return read_dataset_lengths(path, column=column, split=split, tokenizer=tokenizer)
    if split is not None:
        raise InputError(f"--split {split} applies to dataset folders", source=str(path))
    if not path.is_file():
        raise InputError("no such file", source=str(path))
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".parquet") and column is None:
        raise InputError(f"a {suffix} file needs --column NAME: the column of lengths, token lists or text",
                         source=str(path))
    if suffix not in (".jsonl", ".parquet") and column is not None:
        raise InputError(f"--column {column} applies to .jsonl and .parquet files; a {suffix or 'text'} file "
                         "has one length or text per line", source=str(path))
    if suffix == ".npy":
        return _read_npy(path)
    if suffix == ".jsonl":
        return _read_jsonl(path, column, tokenizer, progress)
    if suffix == ".parquet":
        return _read_parquet(path, column, tokenizer)
    if tokenizer is not None:
        return np.fromiter((tokenizer(line.rstrip("\r\n")) for _, line in _lines(path, progress)), dtype=np.int64)
    return _read_length_lines(path, progress)


def _lines(path: Path, progress: Progress) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line, reporting the bytes read every PROGRESS_LINES lines."""
    read_bytes = 0
    try:
        handle = path.open("rb")
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror or error}", source=str(path)) from None
    with handle:
        # A line at a time, each bounded: a one-line file of gigabytes is refused, not read into memory.
        for line_number, raw in bounded_lines(handle, str(path), "file of lengths or text"):
            read_bytes += len(raw)
            if line_number % PROGRESS_LINES == 0:
                progress(read_bytes)
            # A byte-order mark (spreadsheet exports) before the first line is not part of its text.
            yield line_number, raw.decode("utf-8-sig" if line_number == 1 else "utf-8", errors="replace")
    progress(read_bytes)


def _read_length_lines(path: Path, progress: Progress) -> np.ndarray:
    lengths = []
    for line_number, line in _lines(path, progress):
        text = line.strip()
        if text:
            lengths.append(_length(text, str(path), line_number))
    return np.asarray(lengths, dtype=np.int64)


def _read_npy(path: Path) -> np.ndarray:
    """The lengths of a 1-D integer .npy array, without a widening copy: in the file's own type where
    it is 32 bits or narrower, else read a chunk at a time into 32 bits where every length fits
    (100M 64-bit lengths then take 400 MB, never 800 MB beside a second copy)."""
    _check_npy_size(path)
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise InputError(f"not a readable .npy array: {error}", source=str(path)) from None
    if not isinstance(mapped, np.ndarray):
        raise InputError("expected one .npy array of lengths, found an .npz archive", source=str(path))
    if mapped.ndim != 1 or not np.issubdtype(mapped.dtype, np.integer):
        raise InputError(f"expected a 1-D integer array of lengths, found shape {mapped.shape} of {mapped.dtype}",
                         source=str(path))
    dtype, size, offset = mapped.dtype, mapped.size, mapped.offset
    del mapped  # pages read through a mapping would count as this process's memory until it is closed
    if np.can_cast(dtype, np.int32):
        lengths = np.fromfile(path, dtype=dtype, count=size, offset=offset)
    else:
        high = _npy_largest(path, dtype, size, offset)
        if high > np.iinfo(np.int64).max:
            raise InputError(f"a length of {high:.3g} tokens is no sequence's; expected whole numbers below 2^63",
                             source=str(path))
        lengths = np.empty(size, dtype=np.int32 if high <= np.iinfo(np.int32).max else np.int64)
        for start, chunk in _npy_chunks(path, dtype, size, offset):
            lengths[start:start + chunk.size] = chunk
    if lengths.size and lengths.min() < 0:
        raise InputError(f"lengths must not be negative; element {int(np.argmin(lengths))} is {int(lengths.min())}",
                         source=str(path))
    return lengths


def _check_npy_size(path: Path) -> None:
    """An empty or truncated .npy named as such: numpy says "No data left in file" (click then prints only
    "Aborted!") or "mmap length is greater than file size"."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            version = np.lib.format.read_magic(handle)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                           (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            if read_header is None:
                return  # a newer format: np.load reads it
            shape, _, dtype = read_header(handle)
            offset = handle.tell()
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror or error}", source=str(path)) from None
    except (ValueError, EOFError, SyntaxError, TypeError):
        if size == 0:
            raise InputError("the file is empty (0 bytes), not a .npy array of lengths", source=str(path)) from None
        return  # not a .npy header: np.load says what is wrong with it
    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if size - offset < expected:
        raise InputError(f"truncated: its header promises {int(np.prod(shape, dtype=object)):,} values of {dtype} "
                         f"({expected:,} bytes) but {size - offset:,} bytes follow it", source=str(path))


def _npy_chunks(path: Path, dtype: np.dtype, size: int, offset: int) -> Iterator[tuple[int, np.ndarray]]:
    with path.open("rb") as handle:
        handle.seek(offset)
        for start in range(0, size, NPY_CHUNK_ELEMENTS):
            yield start, np.fromfile(handle, dtype=dtype, count=min(NPY_CHUNK_ELEMENTS, size - start))


def _npy_largest(path: Path, dtype: np.dtype, size: int, offset: int) -> int:
    """The largest value (0 for none), read a chunk at a time."""
    return max((int(chunk.max()) for _, chunk in _npy_chunks(path, dtype, size, offset)), default=0)


def _read_jsonl(path: Path, column: str, tokenizer: Tokenizer | None, progress: Progress) -> np.ndarray:
    lengths = []
    for line_number, line in _lines(path, progress):
        if not line.strip():
            continue
        try:
            record = json.loads(line, parse_int=json_integer)
        except InputError as error:
            raise error.located(str(path), line_number) from None
        except json.JSONDecodeError as error:
            raise InputError(f"not valid JSON: {error.msg}", source=str(path), line=line_number) from None
        except RecursionError:
            raise InputError("JSON nested too deep to be a record of lengths, tokens or text", source=str(path),
                             line=line_number) from None
        if not isinstance(record, dict) or column not in record:
            raise InputError(f"no column {column!r} in this record", source=str(path), line=line_number)
        lengths.append(_value_length(record[column], tokenizer, str(path), line=line_number))
    return np.asarray(lengths, dtype=np.int64)


def _read_parquet(path: Path, column: str, tokenizer: Tokenizer | None) -> np.ndarray:
    import pyarrow.parquet

    from simbench.histogram_hf import column_lengths

    try:
        schema = pyarrow.parquet.read_schema(path)
    except (pyarrow.ArrowException, OSError) as error:
        raise InputError(f"not a readable Parquet file: {error}", source=str(path)) from None
    if column not in schema.names:
        raise InputError(f"no column {column!r}; columns: {', '.join(schema.names)}", source=str(path))
    try:
        values = pyarrow.parquet.read_table(path, columns=[column]).column(column)
    except (pyarrow.ArrowException, OSError) as error:  # corrupt pages: a bad snappy block, a short page
        raise InputError(f"not a readable Parquet file: {error}", source=str(path)) from None
    return column_lengths(values, column, tokenizer, str(path))


def _value_length(value, tokenizer: Tokenizer | None, source: str, *, line: int | None = None,
                  row: int | None = None) -> int:
    where = f"row {row}: " if row else ""
    if isinstance(value, list):
        return len(value)
    if isinstance(value, str):
        if tokenizer is None:
            raise InputError(f"{where}found text where a length or token list was expected; "
                             f"pass --tokenize (or --tokenizer FILE) to count its tokens", source=source, line=line)
        return tokenizer(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return _storable(value, source, line)
    raise InputError(f"{where}expected a length (whole number >= 0), a token list or text, found {value!r}",
                     source=source, line=line)


def _length(text: str, source: str, line: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"expected a length (whole number), found {text[:40]!r}; "
                         f"to count the tokens of raw text, pass --tokenize", source=source, line=line) from None
    if value < 0:
        raise InputError(f"a length must not be negative, found {value}", source=source, line=line)
    return _storable(value, source, line)


def _storable(length: int, source: str, line: int | None) -> int:
    # Over-length sequences are counted, not stored; but a length past int64 is no sequence's at all.
    if length >= 2**62:
        raise InputError(f"a length of {length:.3g} tokens is no sequence's; expected a whole number below 2^62",
                         source=source, line=line)
    return length

