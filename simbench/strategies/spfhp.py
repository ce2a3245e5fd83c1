"""`spfhp`: shortest-pack-first histogram packing (Krell et al., arXiv 2107.02027).

Works on counts, not on sequences: groups of identical packs wait in queues keyed by free space.

    >>> from simbench.strategies.spfhp import pack_spfhp
    >>> from simbench.histogram import LengthHistogram
    >>> pack_spfhp(LengthHistogram.from_counts([1, 1, 1, 1]), 5, None, None).packs_total
    2
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import numpy as np

from simbench.strategies import register
from simbench.strategies.packing import Packing, lengths_longest_first

# A group of identical packs: (how many, lengths in the order they were added).
PackGroup = tuple[int, tuple[int, ...]]


class OpenPackGroups:
    """Groups of identical open packs, queued by free space (the last group added to a space is served
    first); a full pack, or one at the depth limit, is closed. Shared by the histogram packers, whose loops
    do what `add` does in line: a method call per step was a tenth of their time."""

    def __init__(self, max_length: int, max_depth: int | None):
        # No pack holds more than max_length sequences, so without a limit none is closed for its depth.
        self.depth_limit = max_length + 1 if max_depth is None else max_depth
        self.by_space: dict[int, list[PackGroup]] = {}
        self.spaces: list[int] = []  # sorted keys of by_space
        self.closed: list[PackGroup] = []

    def add(self, count: int, pack: tuple[int, ...], space: int) -> None:
        if space == 0 or len(pack) >= self.depth_limit:
            self.closed.append((count, pack))
        elif space in self.by_space:
            self.by_space[space].append((count, pack))
        else:
            self.by_space[space] = [(count, pack)]
            bisect.insort(self.spaces, space)

    def groups(self) -> list[PackGroup]:
        return self.closed + [group for queue in self.by_space.values() for group in queue]


def pack_by_free_space(counts: np.ndarray, max_length: int, max_depth: int | None,
                       shortest_pack_first: bool, partial_packs: Iterable[PackGroup] = ()) -> list[PackGroup]:
    """Place lengths longest first into the queue of open pack groups, by counts.

    Each length goes into the open group with the most free space (shortest pack first, a
    worst fit) or the least free space that still fits (longest pack first, a best fit); the
    last group added to a free-space queue is served first. A group is split when only part of
    it is needed. Whatever does not fit opens new single-sequence packs. `partial_packs` are
    groups already holding sequences that the lengths may fill up first.
    """
    open_groups = OpenPackGroups(max_length, max_depth)
    spaces, by_space, closed, depth_limit = open_groups.spaces, open_groups.by_space, open_groups.closed, \
        open_groups.depth_limit
    for count, pack in partial_packs:
        open_groups.add(count, pack, max_length - sum(pack))
    for length, to_place in lengths_longest_first(counts):
        # The search resumes at the last key used: a group just filled moves to a smaller key,
        # which the shortest-pack-first sweep (downwards) may still reach and the longest-pack-
        # first sweep (upwards) may not.
        bound = max_length if shortest_pack_first else length
        while to_place:
            if shortest_pack_first:
                position = bisect.bisect_right(spaces, bound) - 1
                found = position >= 0 and spaces[position] >= length
            else:
                position = bisect.bisect_left(spaces, bound)
                found = position < len(spaces)
            if not found:
                open_groups.add(to_place, (length,), max_length - length)
                break
            bound = spaces[position]
            queue = by_space[bound]
            count, pack = queue.pop()
            if count > to_place:
                queue.append((count - to_place, pack))
                count = to_place
            elif not queue:
                del by_space[bound]
                del spaces[position]
            to_place -= count
            pack += (length,)
            space = bound - length
            # open_groups.add(count, pack, space):
            if space == 0 or len(pack) >= depth_limit:
                closed.append((count, pack))
            elif space in by_space:
                by_space[space].append((count, pack))
            else:
                by_space[space] = [(count, pack)]
                bisect.insort(spaces, space)

    return open_groups.groups()


def packing_from_groups(name: str, max_length: int, max_depth: int | None, groups: list[PackGroup],
                        details: dict | None = None) -> Packing:
    """A fixed-shape `Packing` (every pack max_length slots) from groups of identical packs."""
    # Lengths are placed longest first, so every pack's tuple is already in descending order; a group
    # is only ever added with a count of one or more.
    return Packing.from_groups(name, max_length, max_depth, groups, details, descending_tuples=True)


@register("spfhp", "shortest-pack-first histogram packing (worst fit on counts)")
def pack_spfhp(histogram, max_length, max_depth, options) -> Packing:
    groups = pack_by_free_space(histogram.counts, max_length, max_depth, shortest_pack_first=True)
    return packing_from_groups("spfhp", max_length, max_depth, groups)
