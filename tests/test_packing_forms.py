"""A Packing's two forms: the padded table (`rows`) and the flat form (`pack_lengths`, `pack_starts`)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.errors import InputError
from simbench.strategies import packing as packing_module
from simbench.strategies.packing import Packing

ROWS = [[5, 3, 0], [8, 0, 0], [2, 2, 2]]
REPEATS = [2, 1, 4]


def test_the_flat_form_matches_the_table():
    from_table = Packing.from_rows("demo", 8, None, ROWS, REPEATS)
    from_groups = Packing.from_groups("demo", 8, None, [(2, (5, 3)), (1, (8,)), (3, (2, 2, 2)), (1, (2, 2, 2))])
    np.testing.assert_array_equal(from_groups.rows, from_table.rows)
    np.testing.assert_array_equal(from_groups.repeats, from_table.repeats)
    np.testing.assert_array_equal(from_table.pack_lengths, from_groups.pack_lengths)
    np.testing.assert_array_equal(from_table.pack_starts, from_groups.pack_starts)
    for name in ("packs_total", "sequences", "real_tokens", "tokens", "depth_used", "strategies_used"):
        assert getattr(from_table, name) == getattr(from_groups, name), name
    np.testing.assert_array_equal(from_table.placed_histogram().counts, from_groups.placed_histogram().counts)


def test_packs_given_out_of_order_are_sorted_and_merged():
    packing = Packing.from_groups("demo", 8, None, [(1, (3, 5)), (2, (5, 3))])
    assert (packing.strategies_used, packing.packs_total) == (1, 3)
    np.testing.assert_array_equal(packing.rows, [[5, 3]])


def test_a_table_too_large_to_build_is_refused_with_the_way_out(monkeypatch):
    monkeypatch.setattr(packing_module, "DENSE_ROWS_LIMIT_BYTES", 64)
    packing = Packing.from_groups("demo", 100, None, [(1, (1,) * 100), (1, (50, 50)), (1, (99,))])
    assert packing.sequences == 103 and packing.depth_used == 100  # the metrics need no table
    with pytest.raises(InputError, match="pack_lengths"):
        packing.rows


def test_replace_changes_metadata_and_shares_the_packs():
    packing = Packing.from_rows("demo", 8, None, ROWS, REPEATS)
    renamed = packing.replace(strategy="other", seconds=1.5)
    assert (renamed.strategy, renamed.seconds, packing.strategy) == ("other", 1.5, "demo")
    assert renamed.rows is packing.rows
    with pytest.raises(ValueError):
        packing.replace(repeats=[1, 1, 1])
    with pytest.raises(AttributeError):
        packing.strategy = "changed"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.lists(st.integers(1, 9), min_size=1, max_size=6)), max_size=12),
       st.integers(1, 8))
def test_placed_counts_and_pack_tokens_in_chunks_match_the_expanded_packs(groups, chunk_slots):
    packing = Packing.from_groups("demo", 60, None, groups)
    expanded = [length for count, pack in groups for _ in range(count) for length in pack]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packing_module, "PLACED_CHUNK_SLOTS", chunk_slots)
        placed = packing.placed_histogram().counts
    np.testing.assert_array_equal(placed, np.bincount(expanded, minlength=61)[1:])
    sums = [int(packing.pack_lengths[start:end].sum()) for start, end in zip(packing.pack_starts[:-1],
                                                                               packing.pack_starts[1:])]
    assert packing.pack_tokens().tolist() == sums
