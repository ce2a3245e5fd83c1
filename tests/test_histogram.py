"""LengthHistogram: construction, derived figures, and loading CSV/JSON files with clear errors.

Bad files must fail with an InputError naming the file and, for CSV, the line.
"""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench import errors
from simbench.errors import InputError
from simbench.histogram import LengthHistogram, bundled_histograms, load_histogram

counts_arrays = st.lists(st.integers(0, 10**9), min_size=1, max_size=600).map(np.array)


def write(tmp_path, text, name="lengths.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_bundled_histograms_match_their_published_totals(wikipedia, squad):
    assert set(bundled_histograms()) >= {"wikipedia_512", "squad_1_1_384"}
    assert (wikipedia.max_length, wikipedia.sequences, wikipedia.real_tokens) == (512, 16_279_552, 4_164_796_173)
    assert (squad.max_length, squad.sequences, squad.real_tokens) == (384, 88_641, 15_249_479)
    # Table 5 of the packing paper: padding to 384 costs 18,788,665 padding tokens (44.801 %).
    assert squad.padding_tokens == 18_788_665
    assert round(100 * squad.efficiency, 3) == 44.801
    assert wikipedia.theoretical_speedup == pytest.approx(2.001, abs=5e-4)


def test_derived_figures_follow_from_the_counts():
    histogram = LengthHistogram.from_counts([0, 2, 0, 1], name="tiny")
    assert histogram.lengths.tolist() == [1, 2, 3, 4]
    assert (histogram.sequences, histogram.real_tokens, histogram.longest) == (3, 8, 4)
    assert histogram.padding_tokens == 3 * 4 - 8
    assert histogram.efficiency == pytest.approx(8 / 12)
    assert histogram.expand().tolist() == [2, 2, 4]
    assert LengthHistogram.from_counts([0, 0]).efficiency == 1.0


def test_sampled_lengths_depend_only_on_the_seed():
    histogram = LengthHistogram.from_counts([1, 0, 3])
    first = histogram.sample_lengths(100, np.random.default_rng(5))
    assert np.array_equal(first, histogram.sample_lengths(100, np.random.default_rng(5)))
    assert set(np.unique(first)) <= {1, 3}


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(1, 64), max_size=300))
def test_from_lengths_counts_every_length(lengths):
    histogram = LengthHistogram.from_lengths(lengths, max_length=64)
    assert histogram.max_length == 64
    assert np.array_equal(histogram.counts, np.bincount(np.array(lengths, dtype=int), minlength=65)[1:])
    assert np.array_equal(np.sort(histogram.expand()), np.sort(np.array(lengths, dtype=int)))


def test_from_lengths_handles_millions_of_lengths_vectorized():
    lengths = np.random.default_rng(0).integers(1, 513, size=2_000_000, dtype=np.int32)
    histogram = LengthHistogram.from_lengths(lengths, max_length=512)
    assert histogram.sequences == lengths.size
    assert histogram.real_tokens == int(lengths.sum(dtype=np.int64))


@pytest.mark.parametrize("bad", [[0, 3, 600], [-1, 2]])
def test_from_lengths_rejects_lengths_outside_the_range(bad):
    with pytest.raises(InputError, match="outside 1..512"):
        LengthHistogram.from_lengths(bad, max_length=512)


@pytest.mark.parametrize("counts, message", [
    ([1, -2, 3], "must not be negative"),
    ([1.5, 2.0], "whole numbers"),
    ([], "at least one length"),
    ([[1, 2], [3, 4]], "1-D"),
])
def test_from_counts_rejects_impossible_counts(counts, message):
    with pytest.raises(InputError, match=message):
        LengthHistogram.from_counts(counts)


@settings(max_examples=50, deadline=None)
@given(counts=counts_arrays)
def test_csv_round_trip(tmp_path_factory, counts):
    path = tmp_path_factory.mktemp("csv") / "roundtrip.csv"
    LengthHistogram.from_counts(counts).to_csv(path)
    loaded = load_histogram(path)
    assert np.array_equal(loaded.counts, counts)
    assert loaded.name == "roundtrip"


@settings(max_examples=50, deadline=None)
@given(counts=counts_arrays, data=st.data())
def test_csv_rows_may_come_in_any_order_and_omit_zero_counts(tmp_path_factory, counts, data):
    counts[-1] = max(counts[-1], 1)  # the longest length fixes max_length, so it must appear
    rows = [(length, count) for length, count in enumerate(counts, start=1) if count]
    rows = data.draw(st.permutations(rows))
    path = tmp_path_factory.mktemp("csv") / "shuffled.csv"
    path.write_text("Length, Count\n" + "".join(f"{length}, {count}\n\n" for length, count in rows))
    assert np.array_equal(load_histogram(path).counts, counts)


@settings(max_examples=30, deadline=None)
@given(counts=counts_arrays)
def test_json_list_and_mapping_forms_agree(tmp_path_factory, counts):
    folder = tmp_path_factory.mktemp("json")
    as_list = folder / "list.json"
    as_list.write_text(json.dumps({"counts": counts.tolist()}))
    as_mapping = folder / "mapping.json"
    as_mapping.write_text(json.dumps({"counts": {str(length): int(count) for length, count
                                                 in enumerate(counts, start=1) if count or length == counts.size},
                                      "max_length": int(counts.size)}))
    assert np.array_equal(load_histogram(as_list).counts, counts)
    assert np.array_equal(load_histogram(as_mapping).counts, counts)


@pytest.mark.parametrize("text, line, message", [
    ("length,count\n1,4\n2,-3\n", 3, "count must not be negative, found -3"),
    ("length,count\n1,4\n\n2,1.5\n", 4, "count must be a whole number, found '1.5'"),
    ("length,count\n1,4\n2,many\n", 3, "count must be a whole number, found 'many'"),
    ("length,count\n1,4\n1,5\n", 3, "length 1 appears twice"),
    ("length,count\n0,4\n", 2, "length must be at least 1, found 0"),
    ("length,count\n2.5,4\n", 2, "length must be a whole number"),
    ("length,count\n1,4,7\n", 2, "expected two columns"),
    ("len,n\n1,4\n", 1, "expected the header `length,count`, found `len,n`"),
    ("\n\n1,4\n", 3, "expected the header `length,count`, found `1,4`"),
    # Too large to hold in the histogram's integers:
    ("length,count\n1000000000000,1\n", 2, "length may be at most 1,048,576, found 1,000,000,000,000"),
    ("length,count\n3,1e30\n", 2, "count may be at most 1,099,511,627,776"),
])
def test_bad_csv_names_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as caught:
        load_histogram(path)
    assert caught.value.source == str(path)
    assert caught.value.line == line
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert message in str(caught.value)


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty"),
    ("\n  \n", "the file is empty"),
    ("length,count\n", "no data rows after the header"),
])
def test_empty_csv_names_the_file(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(InputError, match=message) as caught:
        load_histogram(path)
    assert caught.value.source == str(path)


@pytest.mark.parametrize("document, message", [
    ('{"counts": [1, 2], "max_length": 1}', "length 2 is above max_length 1"),
    ('{"counts": {"3": 1, "9": 2}, "max_length": 8}', "length 9 is above max_length 8"),
    ('{"counts": [1, -1]}', "count of length 2 must be a whole number >= 0, found -1"),
    ('{"counts": [1, 0.5]}', "count of length 2 must be a whole number >= 0, found 0.5"),
    ('{"counts": {"0": 1}}', "length must be at least 1, found 0"),
    ('{"counts": []}', "no counts"),
    ('{"lengths": [1]}', 'expected {"counts"'),
    ('{"counts": [1, 2], "max_length": "x"}', "max_length must be a whole number in 1..1,048,576, found 'x'"),
    ('{"counts": [1, 2], "max_length": 2.5}', "max_length must be a whole number in 1..1,048,576, found 2.5"),
    ('{"counts": [1, 2], "max_length": true}', "max_length must be a whole number"),
    ('{"counts": {"1000000000": 1}}', "length may be at most 1,048,576, found 1,000,000,000"),
    ('{"counts": [1, 1099511627777]}', "count of length 2 may be at most 1,099,511,627,776"),
])
def test_bad_json_names_the_file(tmp_path, document, message):
    path = write(tmp_path, document, name="lengths.json")
    with pytest.raises(InputError) as caught:
        load_histogram(path)
    assert caught.value.source == str(path)
    assert message in str(caught.value)


def test_invalid_json_names_the_line(tmp_path):
    path = write(tmp_path, '{"counts":\n [1, 2,\n', name="broken.json")
    with pytest.raises(InputError, match="not valid JSON") as caught:
        load_histogram(path)
    assert caught.value.line is not None and caught.value.source == str(path)


def test_unknown_name_lists_the_bundled_histograms():
    with pytest.raises(InputError, match="bundled: .*wikipedia_512"):
        load_histogram("no_such_histogram")


@pytest.mark.parametrize("name", ["lengths.csv", "lengths.json"])
def test_unreadable_histogram_files_are_input_errors(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    with pytest.raises(InputError, match="cannot read the histogram: Is a directory") as caught:
        load_histogram(folder)
    assert caught.value.source == str(folder)
    binary = tmp_path / "binary" / name
    binary.parent.mkdir()
    binary.write_bytes(b"\xff\xfe\x00length,count\n")
    with pytest.raises(InputError, match=r"not a UTF-8 text file \(byte 0\)") as caught:
        load_histogram(binary)
    assert caught.value.source == str(binary)


def test_unreadable_histogram_permission_is_an_input_error(tmp_path, monkeypatch):
    path = write(tmp_path, "length,count\n1,2\n")

    def refuse(name, flags):
        raise PermissionError(13, "Permission denied", name)

    monkeypatch.setattr(errors, "_open_regular_file", refuse)  # root reads any file: simulate a refusal
    with pytest.raises(InputError, match="cannot read the histogram: Permission denied"):
        load_histogram(path)


def test_from_lengths_rejects_an_impossible_max_length():
    for max_length in (0, 1 << 40):
        with pytest.raises(InputError, match="max_length must be a whole number in 1..1,048,576"):
            LengthHistogram.from_lengths([1], max_length=max_length)


def test_json_suffix_is_recognised_in_any_case(tmp_path):
    path = write(tmp_path, '{"counts": [1, 2]}', name="LENGTHS.JSON")
    assert load_histogram(path).counts.tolist() == [1, 2]


def test_sampling_an_empty_histogram_is_an_input_error():
    with pytest.raises(InputError, match="holds no sequences"):
        LengthHistogram.from_counts([0, 0]).sample_lengths(3, np.random.default_rng(0))


@pytest.mark.parametrize("name, text", [("lengths.csv", "length,count\n1,2\n"), ("lengths.json", '{"counts": [2]}')])
def test_a_byte_order_mark_before_the_header_is_ignored(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_histogram(path).counts.tolist() == [2]


def test_from_lengths_rejects_fractional_lengths():
    with pytest.raises(InputError, match="whole numbers, found 3.5"):
        LengthHistogram.from_lengths([2.0, 3.5], max_length=8)
    assert LengthHistogram.from_lengths([2.0, 3.0], max_length=8).counts.tolist() == [0, 1, 1, 0, 0, 0, 0, 0]
