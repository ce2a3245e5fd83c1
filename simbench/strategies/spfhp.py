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


def pack_by_free_space(counts: np.ndarray, max_length: int, max_depth: int | None,
                       shortest_pack_first: bool, partial_packs: Iterable[PackGroup] = ()) -> list[PackGroup]:
    """Place lengths longest first into the queue of open pack groups, by counts.

    Each length goes into the open group with the most free space (shortest pack first, a
    worst fit) or the least free space that still fits (longest pack first, a best fit); the
    last group added to a free-space queue is served first. A group is split when only part of
    it is needed. Whatever does not fit opens new single-sequence packs. `partial_packs` are
    groups already holding sequences that the lengths may fill up first.
    """
    open_by_space: dict[int, list[PackGroup]] = {}
    spaces: list[int] = []  # sorted keys of open_by_space
    closed: list[PackGroup] = []

    def add(count: int, pack: tuple[int, ...], space: int) -> None:
        if space == 0 or (max_depth is not None and len(pack) >= max_depth):
            closed.append((count, pack))
            return
        if space not in open_by_space:
            open_by_space[space] = []
            bisect.insort(spaces, space)
        open_by_space[space].append((count, pack))

    for count, pack in partial_packs:
        add(count, pack, max_length - sum(pack))
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
                add(to_place, (length,), max_length - length)
                break
            space = spaces[position]
            bound = space
            queue = open_by_space[space]
            group_count, pack = queue.pop()
            used = min(group_count, to_place)
            if group_count > used:
                queue.append((group_count - used, pack))
            elif not queue:
                del open_by_space[space]
                spaces.pop(position)
            to_place -= used
            add(used, pack + (length,), space - length)

    return closed + [group for queue in open_by_space.values() for group in queue]


def packing_from_groups(name: str, max_length: int, max_depth: int | None, groups: list[PackGroup],
                        details: dict | None = None) -> Packing:
    """A fixed-shape `Packing` (every pack max_length slots) from groups of identical packs."""
    # Lengths are placed longest first, so every pack's tuple is already in descending order.
    return Packing.from_groups(name, max_length, max_depth, groups, details)


@register("spfhp", "shortest-pack-first histogram packing (worst fit on counts)")
def pack_spfhp(histogram, max_length, max_depth, options) -> Packing:
    groups = pack_by_free_space(histogram.counts, max_length, max_depth, shortest_pack_first=True)
    return packing_from_groups("spfhp", max_length, max_depth, groups)
