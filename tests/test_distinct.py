"""Distinct values and rows by sorting: the same results as np.unique's, order and dtypes included."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from simbench.distinct import distinct_counts, merged_rows, sorted_distinct

INTEGER_TYPES = st.sampled_from([np.uint16, np.int32, np.int64])


@given(INTEGER_TYPES.flatmap(lambda dtype: hnp.arrays(dtype, st.integers(0, 300), elements=st.integers(0, 40))))
def test_sorted_distinct_and_counts_are_np_uniques(values):
    before = values.copy()
    assert np.array_equal(sorted_distinct(values), np.unique(values)) and sorted_distinct(values).dtype == values.dtype
    distinct, counts = distinct_counts(values)
    expected_distinct, expected_counts = np.unique(values, return_counts=True)
    assert np.array_equal(distinct, expected_distinct) and np.array_equal(counts, expected_counts)
    assert np.array_equal(values, before)  # only in_place sorts the caller's array
    in_place = distinct_counts(values, in_place=True)
    assert np.array_equal(in_place[0], expected_distinct) and np.array_equal(in_place[1], expected_counts)
    assert np.array_equal(values, np.sort(before))


@given(st.integers(0, 60).flatmap(lambda rows: st.tuples(
    hnp.arrays(np.int64, st.tuples(st.just(rows), st.integers(1, 4)), elements=st.integers(0, 3)),
    hnp.arrays(np.int64, rows, elements=st.integers(0, 10**12)))))
def test_merged_rows_are_np_uniques_rows_with_their_weights_summed(rows_and_weights):
    rows, weights = rows_and_weights
    distinct, sums = merged_rows(rows, weights)
    expected, inverse = np.unique(rows, axis=0, return_inverse=True)
    assert np.array_equal(distinct, expected) and distinct.shape[1] == rows.shape[1]
    expected_sums = np.zeros(len(expected), dtype=np.int64)
    np.add.at(expected_sums, inverse.ravel(), weights)
    assert np.array_equal(sums, expected_sums) and sums.dtype == np.int64
