"""`none`: every sequence padded to max_length, one sequence per pack (the baseline)."""

import numpy as np

from simbench.strategies import register
from simbench.strategies.packing import Packing


@register("none", "padding: every sequence padded to max_length, depth 1", uses_depth=False)
def pack_none(histogram, max_length, max_depth, options) -> Packing:
    present = np.flatnonzero(histogram.counts)
    return Packing.from_rows("none", max_length, 1, histogram.lengths[present], histogram.counts[present])
