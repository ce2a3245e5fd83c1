"""`lpfhp`: longest-pack-first histogram packing (Graphcore's packedBERT), on counts.

Lengths are placed longest first, each into the open group of packs with the least free space
that still fits (a best fit), several copies of a length into one pack at once where they fit.

    >>> from simbench.strategies.lpfhp import pack_lpfhp
    >>> from simbench.histogram import LengthHistogram
    >>> pack_lpfhp(LengthHistogram.from_counts([1, 1, 1, 1]), 5, None, None).packs_total
    2
"""

from __future__ import annotations

import bisect

import numpy as np

from simbench.strategies import register
from simbench.strategies.packing import Packing, lengths_longest_first
from simbench.strategies.spfhp import OpenPackGroups, PackGroup, packing_from_groups


def longest_pack_first(counts: np.ndarray, max_length: int, max_depth: int | None) -> list[PackGroup]:
    """Groups of identical packs (how many, lengths in the order added) made by LPFHP.

    Per length, longest first, until its sequences are placed: take the most recently added open
    group with the least free space that fits one sequence and put into each of its packs as many
    copies of the length as fit (by space, the depth limit, and so that at least one pack gets
    them all); if the group has more packs than the sequences can fill that way, only part of it
    is used. With no group that fits, new packs take as many copies as fit, and the last sequences
    share one more pack. The copies per pack are what distributes a long run of short sequences
    over few packs; placing one copy per step instead gives more, emptier packs.
    """
    open_groups = OpenPackGroups(max_length, max_depth)
    spaces, by_space, closed, depth_limit = open_groups.spaces, open_groups.by_space, open_groups.closed, \
        open_groups.depth_limit
    for length, to_place in lengths_longest_first(counts):
        while to_place:
            position = bisect.bisect_left(spaces, length)
            if position == len(spaces):
                copies = min(max_length // length, depth_limit, to_place)
                count, pack, space = to_place // copies, (length,) * copies, max_length - copies * length
                to_place %= copies
            else:
                space = spaces[position]
                queue = by_space[space]
                count, pack = queue.pop()
                # Conditional expressions, not min(): this runs once per group served, and a builtin call
                # with three arguments was a tenth of the loop's time.
                copies, room = space // length, depth_limit - len(pack)
                if room < copies:
                    copies = room
                if to_place < copies:
                    copies = to_place
                wanted = to_place // copies
                if count > wanted:
                    queue.append((count - wanted, pack))
                    count = wanted
                elif not queue:
                    del by_space[space]
                    del spaces[position]
                to_place -= count * copies
                pack += (length,) * copies
                space -= copies * length
            # open_groups.add(count, pack, space):
            if space == 0 or len(pack) >= depth_limit:
                closed.append((count, pack))
            elif space in by_space:
                by_space[space].append((count, pack))
            else:
                by_space[space] = [(count, pack)]
                bisect.insort(spaces, space)

    return open_groups.groups()

@register("lpfhp", "longest-pack-first histogram packing (best fit on counts, several copies per pack)")
def pack_lpfhp(histogram, max_length, max_depth, options) -> Packing:
    groups = longest_pack_first(histogram.counts, max_length, max_depth)
    return packing_from_groups("lpfhp", max_length, max_depth, groups)
