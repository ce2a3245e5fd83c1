"""A timing grid's lines: primitive-shape timings (padded rows, flat variable-length batches and rows of packed
documents under a mask, of model slices) as `simbench calibrate --grid` writes them, read and bounded line by line
(`load_timing_grid`), and which of them a fit holds out (`GridTiming.held_out`).

The grid's format is the stored H200 grid's (simbench/data/measurements/h200-2026-11): one JSON object
a line with model, layers, kind, rows, row_length, documents, tokens, first_ms and median_ms. Its kinds:
`padded` rows (one sequence filling each, no documents), `varlen` (one flat row of documents, attention within
each), and rows of documents packed end to end under a `dense-mask` (a dense block-diagonal attn_mask) or a
`block-mask` (FlexAttention's document mask), each row filled exactly by its documents, listed row after row.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from simbench.calibrate.jsonlines import JsonLine, json_lines
from simbench.costmodels.model import MODEL_PRESETS
from simbench.errors import InputError

# A copy of ../shared/measurements/h200-2026-11 (one NVIDIA H200, PyTorch 2.11, bf16, eager; its README says how).
SHIPPED_GRID = Path(str(resources.files("simbench.data"))) / "measurements" / "h200-2026-11" / "grid.jsonl"
KINDS = ("padded", "varlen", "dense-mask", "block-mask")
# Kinds whose rows hold packed documents under a mask (their attention implementations' rates are fitted on them).
MASK_KINDS = ("dense-mask", "block-mask")
# The shortest step time a grid line may state: a forward and backward pass through a layer launches kernels
# for microseconds at least, so a shorter time is a unit mistake, and would drive the rates past their bounds.
STEP_MS_MIN = 1e-3
GRID_FIELDS = ("model", "layers", "kind", "rows", "row_length", "documents", "tokens", "first_ms", "median_ms")
# A line is a few bytes but its dimensions multiply, so its work is bounded before any is done. Its tokens x
# layers x model width: the largest step a grid times (16,384 tokens) through every layer of the widest preset
# (126 layers of 16,384) is 2^35; twice that is the bound.
TIMING_WORK_MAX = 1 << 36
# Batch elements (padded rows, varlen documents) the fit prices at each of its thousands of evaluations, at about
# a microsecond each: a line may hold 16 times the shipped grid's largest (256), the grid 9 times its 1,795 in all,
# so that pricing a grid costs at most about twice what pricing the shipped one does.
TIMING_ELEMENTS_MAX = 4_096
GRID_ELEMENTS_MAX = 16_384
# Lines a grid may hold: every evaluation of the fit prices each, so that a fit and its uncertainty end within
# seconds on 2 cores (the shipped grid holds 54, a model's GPU grid about 30).
GRID_TIMINGS_MAX = 512
# FlashAttention's varlen kernels work on 128-token tiles of keys for head sizes up to 128: chosen, not
# fitted (the grid's 64-token documents, slower than its 128-token ones at equal tokens, agree).
VARLEN_TILE_TOKENS = 128
# A held-out timing: a mix of document lengths, or rows whose length is not a multiple of the tile (the
# grid's "new shapes"). The others fit the profile; these test it.
HELD_OUT_RULE = ("varlen batches of mixed document lengths and padded or masked rows whose length is not a "
                 "multiple of 128")


@dataclass(frozen=True)
class GridTiming:
    """One timed configuration of the grid: a model slice, a batch shape and its step times."""

    model: str
    layers: int
    kind: str
    rows: int
    row_length: int
    documents: tuple[int, ...] | None
    first_seconds: float
    median_seconds: float

    @property
    def tokens(self) -> int:
        return self.rows * self.row_length

    @property
    def held_out(self) -> bool:
        """Varlen batches of mixed document lengths and rows whose length is not a multiple of the tile (masked
        rows' documents, whatever their lengths, are what their attention rate is fitted on)."""
        if self.kind == "varlen":
            return len(set(self.documents)) > 1
        return self.row_length % VARLEN_TILE_TOKENS != 0

    @property
    def first_sight_seconds(self) -> float:
        """The first step's time beyond the repeated steps' median: what the shape's being new cost, if it was."""
        return self.first_seconds - self.median_seconds

    @property
    def shape_key(self) -> tuple:
        """What makes a shape new to the process that timed it: the slice, the attention path and the tensor
        shape (a varlen batch's documents change only its cumulative lengths, not its shape)."""
        return self.model, self.layers, self.kind, self.rows, self.row_length


def load_timing_grid(path: str | Path) -> list[GridTiming]:
    """Read a timing grid (JSON lines); a bad line is an InputError naming the file and line."""
    timings, elements = [], 0
    for line in json_lines(path, "timing grid", GRID_FIELDS):
        if len(timings) == GRID_TIMINGS_MAX:
            raise line.error(f"the timing grid holds more than {GRID_TIMINGS_MAX:,} timings, more than its fit may "
                             "price at every step; split the grid")
        timings.append(_timing_of_line(line))
        elements += timing_elements(timings[-1])
        if elements > GRID_ELEMENTS_MAX:
            raise line.error(f"the timing grid's lines up to here hold {elements:,} padded rows and varlen documents, "
                             f"more than the {GRID_ELEMENTS_MAX:,} its fit may price at every step; split the grid")
    if not timings:
        raise InputError("the timing grid holds no timings", source=str(path))
    return timings


def _timing_of_line(line: JsonLine) -> GridTiming:
    record, bad = line.record, line.error
    if record["model"] not in MODEL_PRESETS:
        raise bad(f"unknown model {record['model']!r} (model presets: {', '.join(MODEL_PRESETS)})")
    if record["kind"] not in KINDS:
        raise bad(f"kind must be one of {', '.join(KINDS)}, found {record['kind']!r}")
    line.whole_numbers(("layers", "rows", "row_length"), 1 << 24)
    for key in ("first_ms", "median_ms"):
        value = record[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not STEP_MS_MIN <= value < 1e7:
            raise bad(f"{key} must be a time in milliseconds from {STEP_MS_MIN:g} (a microsecond: no training "
                      f"step of a layer is shorter) to 1e7, found {value!r}")
    documents = record["documents"]
    if record["kind"] == "padded":
        if documents is not None:
            raise bad("a padded timing has no documents (null)")
    else:
        documents = _documents_of_line(line)
    timing = GridTiming(record["model"], record["layers"], record["kind"], record["rows"], record["row_length"],
                        documents, record["first_ms"] / 1e3, record["median_ms"] / 1e3)
    try:
        check_timing_work(timing)
    except InputError as error:
        raise bad(error.message) from None
    return timing


def _documents_of_line(line: JsonLine) -> tuple[int, ...]:
    """A varlen or masked line's documents: whole lengths filling its rows exactly, row after row (a varlen
    timing is one row)."""
    record, kind = line.record, line.record["kind"]
    documents, rows, row_length = record["documents"], record["rows"], record["row_length"]
    if (not isinstance(documents, list) or not documents
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in documents)):
        raise line.error(f"a {kind} timing's documents must be a list of whole lengths >= 1")
    if kind == "varlen" and rows != 1:
        raise line.error(f"a varlen timing is one row of documents, found {rows} rows")
    ends = np.cumsum(documents)
    if ends[-1] != rows * row_length or not np.isin(row_length * np.arange(1, rows + 1), ends).all():
        raise line.error(f"a {kind} timing's documents fill its {rows} x {row_length} rows exactly, row after row; "
                         f"found {int(ends[-1])} document tokens" + ("" if ends[-1] != rows * row_length
                                                                     else " with a document across two rows"))
    return tuple(documents)


def document_rows(documents, row_length: int) -> np.ndarray:
    """The row each document lies in, documents laid end to end, row after row, each row filled exactly."""
    return (np.cumsum(documents) - 1) // row_length


def timing_elements(timing: GridTiming) -> int:
    """The batch elements pricing a timing handles: its padded rows, or its varlen documents."""
    return timing.rows if timing.documents is None else len(timing.documents)


def check_timing_work(timing: GridTiming) -> None:
    """InputError where a timing's dimensions multiply past what a timed step holds (`TIMING_WORK_MAX`) or what
    pricing it at every step of a fit may take (`TIMING_ELEMENTS_MAX`): every reader of timing lines checks
    each line here before any work."""
    width = MODEL_PRESETS[timing.model].hidden
    work = timing.tokens * timing.layers * width
    if work > TIMING_WORK_MAX:
        raise InputError(f"rows x row_length x layers x model width = {timing.rows:,} x {timing.row_length:,} x "
                         f"{timing.layers:,} x {width:,} = {work:,}, more than {TIMING_WORK_MAX:,} (twice the largest "
                         "step a grid times through every layer of the widest model)")
    elements = timing_elements(timing)
    if elements > TIMING_ELEMENTS_MAX:
        what = "rows" if timing.documents is None else "documents"
        raise InputError(f"{elements:,} {what} in one timing, more than {TIMING_ELEMENTS_MAX:,} (the fit prices each "
                         "at every step)")
