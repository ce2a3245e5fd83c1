"""A timing grid's lines of documents (varlen batches, rows under a mask), parsed from any input: a line is taken
exactly when its documents fill its rows row after row, and is then priced with each document in its own row."""

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.calibrate.grid_prices import _batch_set
from simbench.calibrate.grid_timings import load_timing_grid
from simbench.errors import InputError


def _fills_rows(documents: list[int], rows: int, row_length: int) -> bool:
    """Brute force: lay the documents one by one; each row must close exactly on a document's end."""
    filled, row = 0, 0
    for document in documents:
        if document < 1:
            return False
        filled += document
        if filled > row_length:
            return False
        if filled == row_length:
            filled, row = 0, row + 1
    return filled == 0 and row == rows


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(["dense-mask", "block-mask", "varlen"]), rows=st.integers(1, 4),
       row_length=st.integers(1, 40), documents=st.lists(st.integers(-2, 45), min_size=0, max_size=12))
def test_a_line_of_documents_is_taken_exactly_when_they_fill_its_rows(tmp_path_factory, kind, rows, row_length,
                                                                         documents):
    path = tmp_path_factory.mktemp("grid") / "grid.jsonl"
    record = {"model": "bert-large", "layers": 1, "kind": kind, "rows": rows, "row_length": row_length,
              "documents": documents, "tokens": rows * row_length, "first_ms": 2.0, "median_ms": 1.0}
    path.write_text(json.dumps(record) + "\n")
    fills = _fills_rows(documents, rows, row_length) and (kind != "varlen" or rows == 1)
    try:
        timings = load_timing_grid(path)
    except InputError as error:
        assert not fills, error
        assert str(error).startswith(f"{path}:1: ")  # the file and line
        return
    assert fills
    batch = _batch_set(timings)
    # Each row holds documents summing to its length, in the order listed.
    per_row = np.bincount(batch.sequence_row, weights=batch.sequence_lengths, minlength=rows)
    assert per_row.tolist() == [row_length] * rows
    assert batch.sequence_lengths.tolist() == documents
