"""`lpfhp`: longest-pack-first histogram packing, the best-fit sibling of `spfhp`.

Each length goes to the open pack group with the least free space that still fits, by counts.

    >>> from simbench.strategies.lpfhp import pack_lpfhp
    >>> from simbench.histogram import LengthHistogram
    >>> pack_lpfhp(LengthHistogram.from_counts([1, 1, 1, 1]), 5, None, None).packs_total
    2
"""

from simbench.strategies import register
from simbench.strategies.packing import Packing
from simbench.strategies.spfhp import pack_by_free_space, packing_from_groups


@register("lpfhp", "longest-pack-first histogram packing (best fit on counts)")
def pack_lpfhp(histogram, max_length, max_depth, options) -> Packing:
    groups = pack_by_free_space(histogram.counts, max_length, max_depth, shortest_pack_first=False)
    return packing_from_groups("lpfhp", max_length, max_depth, groups)
