"""Reads MLPerf BERT training logs into per-step throughputs, for fitting the straggler model.

    >>> from simbench.sim.stragglers.mlperf_logs import parse_mlperf_lines
    >>> run = parse_mlperf_lines(["0: python run_pretraining.py --train_batch_size=6",
    ...                           '0: :::MLLOG {"key": "global_batch_size", "value": 48}',
    ...                           "0: {'training_steps': 1, 'seq/s': 40.0}", "0: {'training_steps': 2, 'seq/s': 48.0}"])
    >>> run.gpus, run.per_gpu_batch, run.per_gpu_sequences_per_s(after_step=1).tolist()
    (8, 6, [6.0])

`parse_mlperf_log(path)` reads the same from a result file, gzipped or not; `parse_step_csv(path)`
reads a plain per-step CSV (see there), and `read_training_log(path)` either, by the file's content.
"""

from __future__ import annotations

import ast
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simbench.errors import (MAX_TEXT_FILE_BYTES, InputError, bounded_lines, check_decompressed_bytes,
                             read_text_file)

_STEP_MARK = "{'training_steps'"
_EVENT_MARK = ":::MLLOG"
_BATCH_OPTION = re.compile(r"--train_batch_size=(\d+)")
_ACCUMULATION_OPTION = re.compile(r"--gradient_accumulation_steps=(\d+)")
_RANK_PREFIX = re.compile(r"^\s*(\d+):")
# A step's throughput is a positive, finite number below what any cluster reaches (10^5 GPUs at 10^4
# sequences per second each is 10^9): 0, negatives, 1e999 or 1e307 are a broken log, whose statistics
# would overflow to inf or NaN.
SEQUENCES_PER_S_MAX = 1e12
STEP_SECONDS_MIN = 1e-6
MAX_LOG_LINE_BYTES = 2**20  # an MLPerf log's lines are about 1.5 KB
# Step and event lines parsed (each ~10 us): a BERT run's log holds a few thousand; 64 MiB of short
# step lines would be 2 million and take half a minute.
MAX_PARSED_LINES = 300_000  # a microsecond: no training step of a transformer is shorter


@dataclass(frozen=True, eq=False)
class MlperfRun:
    """One training run: a row per optimizer step, the run's setup and what could not be read.

    `steps` has `step` (the log's training_steps), `sequences_per_s` (the log's global `seq/s`)
    and the log's other numeric fields; `events` maps each MLLOG key to its first value.
    """

    source: str
    steps: pd.DataFrame
    events: dict
    gpus: int
    per_gpu_batch: int
    unpadded: bool
    malformed_lines: int

    def steps_after(self, step: int) -> pd.DataFrame:
        """Steps past warm-up (the first steps include compilation and cache warm-up)."""
        return self.steps[self.steps["step"] > step]

    def per_gpu_sequences_per_s(self, after_step: int = 0) -> pd.Series:
        """Each step's throughput per GPU (the log's `seq/s` is the whole cluster's)."""
        return self.steps_after(after_step)["sequences_per_s"] / self.gpus


def parse_mlperf_log(path: str | Path) -> MlperfRun:
    """Parse a (possibly gzipped) MLPerf BERT result log."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such MLPerf log file", source=str(path))
    compressed = _head(path, 2) == b"\x1f\x8b"
    opener = gzip.open if compressed else open
    try:
        if compressed:
            with gzip.open(path, "rb") as handle:
                check_decompressed_bytes(handle, str(path), "MLPerf log", MAX_TEXT_FILE_BYTES)
        with opener(path, "rb") as handle:
            # Bounded as read too: a plain file's lines, and a gzip's that passed the measure above.
            lines = bounded_lines(handle, str(path), "MLPerf log", max_bytes=MAX_TEXT_FILE_BYTES,
                                  max_line_bytes=MAX_LOG_LINE_BYTES)
            return parse_mlperf_lines((raw.decode("utf-8", errors="replace") for _, raw in lines), source=str(path))
    except (OSError, EOFError, zlib.error) as error:
        raise InputError(f"cannot read the log: {error}", source=str(path)) from None


def read_training_log(path: str | Path) -> MlperfRun:
    """An MLPerf result log, or a per-step CSV when the file's first line is a CSV header with `gpus`."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such training log file", source=str(path))
    head = _head(path, 4096)
    if head[:2] != b"\x1f\x8b" and "gpus" in _csv_header(head):
        return parse_step_csv(path)
    return parse_mlperf_log(path)


def _head(path: Path, size: int) -> bytes:
    """The file's first bytes, without reading the rest (a log can be large)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError as error:
        raise InputError(f"cannot read the log: {error.strerror or error}", source=str(path)) from None


def _csv_header(head: bytes) -> list[str]:
    lines = head.decode("utf-8-sig", errors="replace").splitlines()
    return [field.strip() for field in lines[0].split(",")] if lines else []


CSV_METADATA = ("gpus", "per_gpu_batch", "unpadded")
CSV_THROUGHPUTS = ("sequences_per_s", "seq/s", "step_seconds")


def parse_step_csv(path: str | Path) -> MlperfRun:
    """A plain per-step log: one row per optimizer step with a throughput column and the run's setup.

    Columns: `gpus`, `per_gpu_batch`, `unpadded` (true/false; the same on every row), one of
    `sequences_per_s`, `seq/s` (the whole cluster's) or `step_seconds`, and optionally `step`
    (numbered from 1 otherwise)::

        step,gpus,per_gpu_batch,unpadded,step_seconds
        1,8,32,true,0.245
    """
    path = Path(path)
    text = read_text_file(path, "per-step CSV log")
    try:
        frame = pd.read_csv(io.StringIO(text), skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise InputError(f"not a readable CSV: {error}", source=str(path)) from None
    missing = [column for column in CSV_METADATA if column not in frame.columns]
    throughput = next((column for column in CSV_THROUGHPUTS if column in frame.columns), None)
    if missing or throughput is None:
        needed = missing + ([] if throughput else ["one of " + " / ".join(CSV_THROUGHPUTS)])
        raise InputError(f"missing column(s): {', '.join(needed)}; found {', '.join(map(str, frame.columns))}",
                         source=str(path))
    if frame.empty:
        raise InputError("no step rows after the header", source=str(path))
    setup = {column: _constant_column(frame, column, path) for column in CSV_METADATA}
    gpus, batch = (_whole_positive(setup[key], key, path) for key in ("gpus", "per_gpu_batch"))
    unpadded = str(setup["unpadded"]).strip().lower()
    if unpadded not in ("true", "false", "1", "0", "yes", "no"):
        raise InputError(f"`unpadded` must be true or false, found {setup['unpadded']!r}", source=str(path), line=2)
    values = pd.to_numeric(frame[throughput], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
    if bad.size:
        raise InputError(f"`{throughput}` must be a positive number, found {str(frame[throughput].iloc[bad[0]])!r}",
                         source=str(path), line=int(bad[0]) + 2)
    with np.errstate(over="ignore"):
        sequences_per_s = gpus * batch / values if throughput == "step_seconds" else values
    if throughput == "step_seconds":
        short = np.flatnonzero(values < STEP_SECONDS_MIN)
        if short.size:
            raise InputError(f"`step_seconds` must be at least {STEP_SECONDS_MIN:g} (no training step is shorter), "
                             f"found {str(frame[throughput].iloc[short[0]])!r}", source=str(path),
                             line=int(short[0]) + 2)
    fast = np.flatnonzero(sequences_per_s > SEQUENCES_PER_S_MAX)
    if fast.size:
        raise InputError(f"a throughput of {sequences_per_s[fast[0]]:.3g} sequences/s is beyond any cluster "
                         f"(at most {SEQUENCES_PER_S_MAX:.0e})", source=str(path), line=int(fast[0]) + 2)
    steps = (pd.to_numeric(frame["step"], errors="coerce").to_numpy() if "step" in frame.columns
             else np.arange(1, len(frame) + 1))
    if not (np.all(np.isfinite(steps)) and np.all(np.diff(steps) > 0)):
        raise InputError("`step` must be increasing whole numbers", source=str(path))
    table = pd.DataFrame({"step": steps.astype(np.int64), "sequences_per_s": sequences_per_s})
    return MlperfRun(str(path), table, {}, gpus, batch, unpadded in ("true", "1", "yes"), 0)


def _constant_column(frame: pd.DataFrame, column: str, path: Path):
    values = frame[column]
    differs = np.flatnonzero(values.astype(str).to_numpy() != str(values.iloc[0]))
    if differs.size:
        raise InputError(f"`{column}` must be the same on every row: {values.iloc[0]!r} then "
                         f"{values.iloc[differs[0]]!r}", source=str(path), line=int(differs[0]) + 2)
    return values.iloc[0]


def _whole_positive(value, key: str, path: Path) -> int:
    number = pd.to_numeric(value, errors="coerce")
    if not (np.isfinite(number) and number >= 1 and float(number).is_integer()):
        raise InputError(f"`{key}` must be a whole number of at least 1, found {value!r}", source=str(path), line=2)
    return int(number)


def parse_mlperf_lines(lines: Iterable[str], source: str = "log") -> MlperfRun:
    """Parse log lines: step dicts (`0: {'training_steps': ...}`), MLLOG events and the command line.

    Lines that look like a step or an event but do not parse are skipped and counted.
    """
    steps: dict[int, dict] = {}
    events: dict = {}
    ranks: set[int] = set()
    batch_options: set[int] = set()
    accumulation_options: set[int] = set()
    unpadded = False
    malformed = 0
    parsed = 0
    for number, line in enumerate(lines, start=1):
        rank = _RANK_PREFIX.match(line)
        if rank:
            ranks.add(int(rank.group(1)))
        if _STEP_MARK in line or _EVENT_MARK in line:
            parsed += 1
            if parsed > MAX_PARSED_LINES:
                raise InputError(f"more than {MAX_PARSED_LINES:,} step and event lines, far more than any training "
                                 "log holds", source=source, line=number)
        if _STEP_MARK in line:
            record = _step_record(line[line.index(_STEP_MARK):].strip())
            if record is None:
                malformed += 1
            else:
                _check_throughput(record["sequences_per_s"], source, number)
                steps.setdefault(record["step"], record)  # when several ranks log a step, the first line wins
            continue
        if _EVENT_MARK in line:
            try:
                event = json.loads(line[line.index(_EVENT_MARK) + len(_EVENT_MARK):])
                events.setdefault(event["key"], event.get("value"))
            except (ValueError, KeyError, TypeError, RecursionError):  # ValueError: JSON's, or an endless integer's
                malformed += 1
            continue
        if "run_pretraining.py" in line:
            batch_options.update(int(value) for value in _BATCH_OPTION.findall(line))
            accumulation_options.update(int(value) for value in _ACCUMULATION_OPTION.findall(line))
            unpadded = unpadded or "--unpad" in line.split()
    if not steps:
        raise InputError("no step lines like `0: {'training_steps': ..., 'seq/s': ...}` found", source=source)
    per_gpu_batch = _single_value(batch_options, "--train_batch_size", source)
    accumulation = _single_value(accumulation_options, "--gradient_accumulation_steps", source) or 1
    gpus = _gpu_count(events, per_gpu_batch, accumulation, ranks, source)
    frame = pd.DataFrame(sorted(steps.values(), key=lambda record: record["step"])).reset_index(drop=True)
    global_batch = events.get("global_batch_size")
    # An event value is whatever the log's JSON holds; only a whole number gives a per-GPU batch.
    if not per_gpu_batch and isinstance(global_batch, int) and not isinstance(global_batch, bool):
        per_gpu_batch = global_batch // gpus
    return MlperfRun(source, frame, events, gpus, per_gpu_batch or 0, unpadded, malformed)


def _check_throughput(sequences_per_s: float, source: str, line: int) -> None:
    if not (0 < sequences_per_s <= SEQUENCES_PER_S_MAX):  # NaN fails too
        raise InputError(f"a step's seq/s must be positive and at most {SEQUENCES_PER_S_MAX:.0e}, found "
                         f"{sequences_per_s!r}", source=source, line=line)


def _step_record(text: str) -> dict | None:
    try:
        raw = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("training_steps"), int):
        return None
    throughput = raw.get("seq/s")
    if isinstance(throughput, bool) or not isinstance(throughput, (int, float)):
        return None
    try:
        sequences_per_s = float(throughput)
    except OverflowError:  # a whole number of hundreds of digits
        sequences_per_s = float("inf")
    record = {"step": raw["training_steps"], "sequences_per_s": sequences_per_s}
    for key, value in raw.items():
        if key not in ("training_steps", "seq/s") and isinstance(value, (int, float)) and not isinstance(value, bool):
            record[key] = value
    return record


def _single_value(values: set[int], option: str, source: str) -> int | None:
    if len(values) > 1:
        raise InputError(f"the command lines disagree on {option}: {sorted(values)}", source=source)
    return next(iter(values), None)


def _gpu_count(events: dict, per_gpu_batch: int | None, accumulation: int, ranks: set[int], source: str) -> int:
    """GPUs from the global batch over the per-GPU batch; the ranks seen in line prefixes otherwise."""
    global_batch = events.get("global_batch_size")
    if isinstance(global_batch, int) and per_gpu_batch:
        gpus, remainder = divmod(global_batch, per_gpu_batch * accumulation)
        if remainder == 0 and gpus > 0:
            return gpus
    if ranks:
        return max(ranks) + 1
    raise InputError("cannot tell the GPU count: no global_batch_size event with --train_batch_size, "
                     "and no rank prefixes", source=source)
