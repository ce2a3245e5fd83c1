"""greedy's windowed next fit and its distinct packs, against plain one-at-a-time definitions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.strategies import greedy


def next_fit_starts(lengths, max_length, max_depth):
    """Where each pack starts, one sequence at a time."""
    starts, room, depth = [], 0, 0
    for position, length in enumerate(lengths.tolist()):
        if not starts or length > room or depth == max_depth:
            starts.append(position)
            room, depth = max_length, 0
        room -= length
        depth += 1
    return starts


def distinct_by_definition(lengths, starts, max_length):
    """Distinct packs by depth, shallowest first; within a depth in key order, except that packs
    whose key needs 25 to 62 bits come in order of first appearance (a hash table's order)."""
    bits = max_length.bit_length()
    ends = [*starts[1:], len(lengths)]
    packs = [tuple(sorted(lengths[start:end].tolist(), reverse=True)) for start, end in zip(starts, ends)]
    flat, depths, repeats = [], [], []
    for depth in sorted({len(pack) for pack in packs}):
        counted = {}
        for pack in packs:
            if len(pack) == depth:
                counted[pack] = counted.get(pack, 0) + 1
        order = list(counted) if 24 < depth * bits <= 62 else sorted(counted)
        for pack in order:
            flat.extend(pack)
            depths.append(depth)
            repeats.append(counted[pack])
    return flat, depths, repeats


datasets = st.tuples(
    st.sampled_from([5, 12, 100, 300]),  # max lengths: every key width route is taken at some depth
    st.one_of(st.none(), st.integers(1, 40)),
    st.integers(0, 2**32 - 1),
    st.integers(1, 3000),
    st.integers(1, 64),  # window size, tiny so that the chain crosses many windows
)


@settings(max_examples=80, deadline=None)
@given(datasets)
def test_windowed_next_fit_starts_packs_where_one_at_a_time_does(case):
    max_length, max_depth, seed, size, window = case
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, rng.integers(1, max_length + 1) + 1, size).astype(np.uint16)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(greedy, "CHAIN_WINDOW_SEQUENCES", window)
        starts = greedy.pack_starts(lengths, max_length, max_depth)
    assert starts.tolist() == next_fit_starts(lengths, max_length, max_depth)


@settings(max_examples=80, deadline=None)
@given(datasets)
def test_distinct_packs_are_the_defined_packs_in_the_defined_order(case):
    max_length, max_depth, seed, size, _ = case
    rng = np.random.default_rng(seed)
    # Few distinct lengths: many equal packs, and ties on every key.
    lengths = rng.choice(rng.integers(1, max_length + 1, 3), size).astype(np.uint16)
    starts = greedy.pack_starts(lengths, max_length, max_depth)
    flat, depths, repeats = greedy.distinct_packs(lengths, starts, max_length)
    expected = distinct_by_definition(lengths, starts.tolist(), max_length)
    assert (flat.tolist(), depths.tolist(), repeats.tolist()) == expected


def test_rows_too_wide_for_one_key_are_sorted_on_every_key():
    rows = np.array([[9, 9, 9, 2], [9, 9, 9, 1], [9, 9, 8, 7], [9, 9, 9, 1], [9, 9, 9, 2], [9, 9, 9, 1]])
    distinct, counts = greedy.sorted_distinct_rows(rows, bits=20)  # three columns per key
    assert distinct.tolist() == [[9, 9, 8, 7], [9, 9, 9, 1], [9, 9, 9, 2]]
    assert counts.tolist() == [1, 3, 2]
