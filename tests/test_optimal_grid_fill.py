"""Filling the packs of a grid packing with real lengths, against a slot-by-slot reference."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.strategies.optimal import fill_grid_packs
from simbench.strategies.packing import Packing


def filled_slot_by_slot(grid, real_lengths, real_counts):
    """Every copy of every grid pack laid out, slots taken largest unit first, then by pack and slot."""
    packs = [grid.pack_lengths[start:end].tolist() for start, end in zip(grid.pack_starts[:-1], grid.pack_starts[1:])]
    laid_out = [pack for pack, repeat in zip(packs, grid.repeats) for _ in range(repeat)]
    slots = sorted(((-unit, pack, slot) for pack, units in enumerate(laid_out) for slot, unit in enumerate(units)))
    filled = [[0] * len(pack) for pack in laid_out]
    for (_, pack, slot), length in zip(slots, np.repeat(real_lengths, real_counts).tolist()):
        filled[pack][slot] = length
    return filled


@st.composite
def grids_and_lengths(draw):
    rows = draw(st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=4), min_size=1, max_size=5))
    repeats = draw(st.lists(st.integers(1, 7), min_size=len(rows), max_size=len(rows)))
    grid = Packing.from_rows("grid", 24, None, [sorted(row, reverse=True) + [0] * (4 - len(row)) for row in rows],
                             repeats)
    slots = int(grid.repeats @ grid.depths)
    cuts = sorted(draw(st.sets(st.integers(1, slots - 1), max_size=slots - 1))) if slots > 1 else []
    real_counts = np.diff([0, *cuts, slots])
    real_lengths = np.sort(draw(st.lists(st.integers(1, 1000), min_size=real_counts.size, max_size=real_counts.size,
                                         unique=True)))[::-1]
    return grid, np.array(real_lengths), real_counts


@settings(max_examples=200, deadline=None)
@given(grids_and_lengths())
def test_runs_of_equal_packs_expand_to_the_slot_by_slot_filling(case):
    grid, real_lengths, real_counts = case
    filled, depths, repeats = fill_grid_packs(grid, real_lengths, real_counts)
    packs = np.split(filled, np.cumsum(depths)[:-1])
    expanded = [pack.tolist() for pack, repeat in zip(packs, repeats) for _ in range(repeat)]
    assert expanded == filled_slot_by_slot(grid, real_lengths, real_counts)
    assert repeats.min() >= 1 and depths.size <= grid.strategies_used + 2 * real_lengths.size
