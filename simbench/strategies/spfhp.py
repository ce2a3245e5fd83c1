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
from simbench.strategies.packing import Packing

# A group of identical packs: (how many, lengths in the order they were added).
PackGroup = tuple[int, tuple[int, ...]]


class OpenPackGroups:
    """Groups of identical open packs, queued by free space (the last group added to a space is served
    first); a full pack, or one at the depth limit, is closed. Shared by the histogram packers."""

    def __init__(self, max_depth: int | None):
        self.max_depth = max_depth
        self.by_space: dict[int, list[PackGroup]] = {}
        self.spaces: list[int] = []  # sorted keys of by_space
        self.closed: list[PackGroup] = []

    def add(self, count: int, pack: tuple[int, ...], space: int) -> None:
        if space == 0 or (self.max_depth is not None and len(pack) >= self.max_depth):
            self.closed.append((count, pack))
            return
        if space not in self.by_space:
            self.by_space[space] = []
            bisect.insort(self.spaces, space)
        self.by_space[space].append((count, pack))

    def peek(self, position: int) -> tuple[int, tuple[int, ...]]:
        """The free space at `position` of `spaces` and the pack of the group served next there."""
        space = self.spaces[position]
        return space, self.by_space[space][-1][1]

    def take(self, position: int, wanted: int) -> tuple[int, tuple[int, ...], int]:
        """Up to `wanted` packs of the group served next at `position` (the rest stays queued):
        how many were taken, their pack and their free space."""
        space = self.spaces[position]
        queue = self.by_space[space]
        count, pack = queue.pop()
        taken = min(count, wanted)
        if count > taken:
            queue.append((count - taken, pack))
        elif not queue:
            del self.by_space[space]
            self.spaces.pop(position)
        return taken, pack, space

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
    open_groups = OpenPackGroups(max_depth)
    spaces = open_groups.spaces
    for count, pack in partial_packs:
        open_groups.add(count, pack, max_length - sum(pack))
    for length in range(len(counts), 0, -1):
        to_place = int(counts[length - 1])
        # The search resumes at the last key used: a group just filled moves to a smaller key,
        # which the shortest-pack-first sweep (downwards) may still reach and the longest-pack-
        # first sweep (upwards) may not.
        bound = max_length if shortest_pack_first else length
        while to_place > 0:
            if shortest_pack_first:
                position = bisect.bisect_right(spaces, bound) - 1
                found = position >= 0 and spaces[position] >= length
            else:
                position = bisect.bisect_left(spaces, bound)
                found = position < len(spaces)
            if not found:
                open_groups.add(to_place, (length,), max_length - length)
                break
            used, pack, space = open_groups.take(position, to_place)
            bound = space
            to_place -= used
            open_groups.add(used, pack + (length,), space - length)

    return open_groups.groups()


def packing_from_groups(name: str, max_length: int, max_depth: int | None, groups: list[PackGroup],
                        details: dict | None = None) -> Packing:
    """A fixed-shape `Packing` (every pack max_length slots) from groups of identical packs."""
    # Lengths are placed longest first, so every pack's tuple is already in descending order.
    return Packing.from_groups(name, max_length, max_depth, groups, details)


@register("spfhp", "shortest-pack-first histogram packing (worst fit on counts)")
def pack_spfhp(histogram, max_length, max_depth, options) -> Packing:
    groups = pack_by_free_space(histogram.counts, max_length, max_depth, shortest_pack_first=True)
    return packing_from_groups("spfhp", max_length, max_depth, groups)
