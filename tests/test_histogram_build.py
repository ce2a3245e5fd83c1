"""`simbench histogram build`: every reader gives the same counts, nothing is dropped silently."""

import json
import subprocess
import sys

import numpy as np
import pyarrow
import pyarrow.parquet
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from simbench.cli import app
from simbench.errors import InputError
from simbench.histogram import load_histogram
from simbench.histogram_build import build_histogram, read_lengths

MAX_LENGTH = 32


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(min_value=0, max_value=2 * MAX_LENGTH), max_size=200),
       truncate=st.booleans())
def test_counts_match_the_lengths(tmp_path_factory, lengths, truncate):
    path = tmp_path_factory.mktemp("lengths") / "lengths.txt"
    path.write_text("".join(f"{length}\n" for length in lengths))
    built = build_histogram(read_lengths(path), MAX_LENGTH, truncate=truncate)

    lengths = np.asarray(lengths, dtype=np.int64)
    kept = np.minimum(lengths, MAX_LENGTH) if truncate else lengths[lengths <= MAX_LENGTH]
    expected = np.bincount(kept[kept > 0], minlength=MAX_LENGTH + 1)[1:]
    np.testing.assert_array_equal(built.histogram.counts, expected)
    assert built.sequences_read == lengths.size
    assert built.too_long == int(np.count_nonzero(lengths > MAX_LENGTH))
    assert built.empty == int(np.count_nonzero(lengths == 0))
    # Every sequence read is either in the histogram or accounted for as too long or empty.
    left_out = built.empty + (0 if truncate else built.too_long)
    assert built.histogram.sequences + left_out == built.sequences_read


@settings(max_examples=30, deadline=None)
@given(token_lists=st.lists(st.lists(st.integers(0, 30000), min_size=1, max_size=20), min_size=1, max_size=40))
def test_jsonl_parquet_and_npy_agree(tmp_path_factory, token_lists):
    folder = tmp_path_factory.mktemp("formats")
    lengths = [len(tokens) for tokens in token_lists]
    (folder / "data.jsonl").write_text("".join(json.dumps({"ids": tokens}) + "\n" for tokens in token_lists))
    pyarrow.parquet.write_table(pyarrow.table({"ids": token_lists, "n": lengths}), folder / "data.parquet")
    np.save(folder / "lengths.npy", np.asarray(lengths, dtype=np.int32))

    expected = np.asarray(lengths)
    np.testing.assert_array_equal(read_lengths(folder / "data.jsonl", column="ids"), expected)
    np.testing.assert_array_equal(read_lengths(folder / "data.parquet", column="ids"), expected)
    np.testing.assert_array_equal(read_lengths(folder / "data.parquet", column="n"), expected)
    np.testing.assert_array_equal(read_lengths(folder / "lengths.npy"), expected)


NPY_TYPES = ["<i1", "<u1", "<i2", ">u2", "<i4", "<u4", ">i8", "<i8", "<u8"]


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(NPY_TYPES), values=st.lists(st.integers(0, 2**40), max_size=30),
       chunk=st.integers(1, 7))
def test_npy_lengths_come_back_equal_and_never_wider_than_needed(tmp_path_factory, dtype, values, chunk):
    from simbench import histogram_build

    dtype = np.dtype(dtype)
    values = [value % (int(np.iinfo(dtype).max) + 1) for value in values]
    path = tmp_path_factory.mktemp("npy") / "lengths.npy"
    np.save(path, np.asarray(values, dtype=dtype))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(histogram_build, "NPY_CHUNK_ELEMENTS", chunk)
        lengths = read_lengths(path)
    assert lengths.tolist() == values
    # The file's own type up to 32 bits; wider files come back in 32 bits where the values fit.
    needs_64_bits = max(values, default=0) > np.iinfo(np.int32).max
    assert lengths.itemsize == (dtype.itemsize if np.can_cast(dtype, np.int32) else 8 if needs_64_bits else 4)


@pytest.mark.parametrize("array, message", [
    (np.array([3, -1, 2], dtype=np.int64), "element 1 is -1"),
    (np.array([3, 2**63 + 5], dtype=np.uint64), r"below 2\^63"),
    (np.zeros((2, 2), dtype=np.int32), "1-D integer array"),
    (np.array([1.5]), "1-D integer array"),
])
def test_bad_npy_lengths_are_named(tmp_path, array, message):
    np.save(tmp_path / "lengths.npy", array)
    with pytest.raises(InputError, match=message):
        read_lengths(tmp_path / "lengths.npy")


def test_an_npz_archive_is_not_taken_for_lengths(tmp_path):
    path = tmp_path / "lengths.npy"
    with path.open("wb") as handle:
        np.savez(handle, lengths=np.arange(3))
    with pytest.raises(InputError, match="npz archive"):
        read_lengths(path)


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(0, 3 * MAX_LENGTH), max_size=60), truncate=st.booleans(),
       chunk=st.integers(1, 9))
def test_counting_a_chunk_at_a_time_gives_the_whole_arrays_figures(lengths, truncate, chunk):
    from simbench import histogram_build

    whole = build_histogram(np.asarray(lengths, dtype=np.int32), MAX_LENGTH, truncate=truncate)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(histogram_build, "NPY_CHUNK_ELEMENTS", chunk)
        chunked = build_histogram(np.asarray(lengths, dtype=np.int32), MAX_LENGTH, truncate=truncate)
    np.testing.assert_array_equal(chunked.histogram.counts, whole.histogram.counts)
    assert (chunked.too_long, chunked.empty, chunked.tokens_read) == (whole.too_long, whole.empty, sum(lengths))
    assert chunked.tokens_beyond == whole.tokens_beyond == sum(max(length - MAX_LENGTH, 0) for length in lengths)


def test_raw_text_counts_whitespace_tokens(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the quick brown fox\n\njumps  over\n")
    result = CliRunner().invoke(app, ["histogram", "build", str(path), "--max-length", "8",
                                      "-o", str(tmp_path / "h.csv"), "--tokenize"])
    assert result.exit_code == 0, result.output
    histogram = load_histogram(tmp_path / "h.csv")
    assert histogram.counts[3] == 1 and histogram.counts[1] == 1 and histogram.sequences == 2
    assert "1 empty sequences" in result.output


def test_too_long_sequences_are_reported(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("3\n600\n512\n")
    out = tmp_path / "h.csv"
    result = CliRunner().invoke(app, ["histogram", "build", str(path), "--max-length", "512", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 sequences longer than 512 tokens: left out" in result.output
    assert load_histogram(out).sequences == 2

    result = CliRunner().invoke(app, ["histogram", "build", str(path), "--max-length", "512", "-o", str(out),
                                      "--truncate", "--force"])
    assert "truncated" in result.output
    assert load_histogram(out).counts[511] == 2


def test_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("3\n4\nfour\n")
    with pytest.raises(InputError, match=r"lengths.txt:3: .*'four'.*--tokenize"):
        read_lengths(path)


def test_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"ids": [1, 2]}\n{"ids": 2.5}\n')
    with pytest.raises(InputError, match=r"data.jsonl:2: .*2.5"):
        read_lengths(path, column="ids")
    path.write_text('{"ids": [1, 2]}\n{"other": 1}\n')
    with pytest.raises(InputError, match=r"data.jsonl:2: no column 'ids'"):
        read_lengths(path, column="ids")
    with pytest.raises(InputError, match="needs --column"):
        read_lengths(path)


def test_parquet_unknown_column_lists_columns(tmp_path):
    path = tmp_path / "data.parquet"
    pyarrow.parquet.write_table(pyarrow.table({"n": [1, 2]}), path)
    with pytest.raises(InputError, match="no column 'ids'; columns: n"):
        read_lengths(path, column="ids")


def test_missing_tokenizers_package_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def without_tokenizers(name, *args, **kwargs):
        if name == "tokenizers":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_tokenizers)
    path = tmp_path / "corpus.txt"
    path.write_text("some text\n")
    result = CliRunner().invoke(app, ["histogram", "build", str(path), "--max-length", "8",
                                      "-o", str(tmp_path / "h.csv"), "--tokenizer", str(tmp_path / "tok.json")])
    assert isinstance(result.exception, InputError)
    assert "needs the `tokenizers` package" in str(result.exception)
    assert not (tmp_path / "h.csv").exists()


def test_failed_build_keeps_the_previous_csv(tmp_path):
    out = tmp_path / "h.csv"
    out.write_text("length,count\n1,5\n")
    path = tmp_path / "lengths.txt"
    path.write_text("1\nbad\n")
    result = CliRunner().invoke(app, ["histogram", "build", str(path), "--max-length", "4", "-o", str(out)])
    assert isinstance(result.exception, InputError)
    assert out.read_text() == "length,count\n1,5\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.csv", "lengths.txt"]


@pytest.mark.parametrize("output, message", [
    ("folder", "folder: -o is a folder; give a file name"),
    ("lengths.txt/h.csv", "lengths.txt is a file, not a folder"),
    ("h.json", "the histogram is written as CSV; name it .csv, not 'h.json'"),
])
def test_unwritable_output_is_an_input_error(tmp_path, output, message):
    (tmp_path / "folder").mkdir()
    path = tmp_path / "lengths.txt"
    path.write_text("3\n5\n")
    result = CliRunner().invoke(app, ["histogram", "build", str(path), "--max-length", "8",
                                      "-o", str(tmp_path / output)])
    assert isinstance(result.exception, InputError)
    assert message in str(result.exception)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "lengths.txt"]


def test_unreadable_input_is_an_input_error(tmp_path, monkeypatch):
    path = tmp_path / "lengths.txt"
    path.write_text("3\n")

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(type(path), "open", refuse)
    with pytest.raises(InputError, match="lengths.txt: cannot read: Permission denied"):
        read_lengths(path)


def test_max_length_beyond_any_context_is_an_input_error():
    with pytest.raises(InputError, match="max_length must be a whole number in 1..1,048,576, found 100000000000"):
        build_histogram(np.array([3]), 100_000_000_000, truncate=False)


def test_negative_lengths_are_not_dropped_silently():
    with pytest.raises(InputError, match="element 1 is -4"):
        build_histogram(np.array([3, -4, 5]), 8, truncate=True)


def test_a_byte_order_mark_before_the_first_length_is_ignored(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_bytes(b"\xef\xbb\xbf3\n5\n")
    assert read_lengths(path).tolist() == [3, 5]


def test_a_column_for_a_file_without_columns_is_an_input_error(tmp_path):
    # It used to be ignored, so a user expecting a column read the whole line instead.
    path = tmp_path / "lengths.txt"
    path.write_text("3\n")
    with pytest.raises(InputError, match="--column ids applies to .jsonl and .parquet files"):
        read_lengths(path, column="ids")


def test_no_stray_blank_line_from_the_progress_bar_outside_a_terminal(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("3\n5\n")
    completed = subprocess.run([sys.executable, "-c", "from simbench.cli import main; main()", "histogram", "build",
                                str(path), "--max-length", "8", "-o", str(tmp_path / "h.csv")],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0
    assert completed.stderr.startswith("2 sequences read")
