"""`ffd` and `bfd`: first-fit and best-fit decreasing bin packing, computed on counts.

Same packs as placing the sorted sequences one by one, but each step moves a group of packs.

    >>> from simbench.strategies.classic import pack_ffd
    >>> from simbench.histogram import LengthHistogram
    >>> pack_ffd(LengthHistogram.from_counts([0, 3, 2]), 6, None, None).packs_total
    2
"""

from __future__ import annotations

import heapq

import numpy as np

from simbench.strategies import register
from simbench.strategies.packing import Packing

NO_PACK = np.iinfo(np.int64).max


def pack_decreasing(counts: np.ndarray, max_length: int, max_depth: int | None, best_fit: bool
                    ) -> list[tuple[int, tuple[tuple[int, int], ...]]]:
    """Groups (how many packs, ((length, copies), ...)) of first- or best-fit decreasing.

    Packs are numbered as they open. A group is a run of consecutive, identical packs, so the
    one-by-one rule "the first (or the fullest) pack that still fits, earliest on ties" always
    picks the front pack of some group: that pack takes as many copies of the length as fit,
    then the next pack of the group does, and so on, which is arithmetic on the group's count.
    """
    depth_limit = max_depth if max_depth is not None else max_length
    # Per free space: a heap of open groups (first pack number, count, contents, depth).
    by_space: list[list] = [[] for _ in range(max_length + 1)]
    earliest = np.full(max_length + 1, NO_PACK, dtype=np.int64)
    closed = []
    opened = 0

    def push(first, count, contents, depth, space):
        if space == 0 or depth == depth_limit:
            closed.append((count, contents))
            return
        heapq.heappush(by_space[space], (first, count, contents, depth))
        earliest[space] = by_space[space][0][0]

    for length in range(len(counts), 0, -1):
        to_place = int(counts[length - 1])
        while to_place > 0:
            fitting = earliest[length:]
            if best_fit:
                candidates = np.flatnonzero(fitting != NO_PACK)
                offset = int(candidates[0]) if candidates.size else -1
            else:
                offset = int(np.argmin(fitting))
                offset = offset if fitting[offset] != NO_PACK else -1
            if offset < 0:
                copies = min(max_length // length, depth_limit)
                full, rest = divmod(to_place, copies)
                if full:
                    push(opened, full, ((length, copies),), copies, max_length - copies * length)
                if rest:
                    push(opened + full, 1, ((length, rest),), rest, max_length - rest * length)
                opened += full + (rest > 0)
                break
            space = length + offset
            first, count, contents, depth = heapq.heappop(by_space[space])
            earliest[space] = by_space[space][0][0] if by_space[space] else NO_PACK
            copies = min(space // length, depth_limit - depth)
            full, rest = divmod(min(to_place, count * copies), copies)
            if full:
                push(first, full, contents + ((length, copies),), depth + copies, space - copies * length)
            if rest:
                push(first + full, 1, contents + ((length, rest),), depth + rest, space - rest * length)
            untouched = count - full - (rest > 0)
            if untouched:
                push(first + count - untouched, untouched, contents, depth, space)
            to_place -= full * copies + rest
    closed.extend((count, contents) for heap in by_space for _, count, contents, _ in heap)
    return closed


def packing_from_runs(name: str, max_length: int, max_depth: int | None, groups) -> Packing:
    """A fixed-shape `Packing` from groups whose contents are (length, copies) runs."""
    depths = [sum(copies for _, copies in contents) for _, contents in groups]
    rows = np.zeros((len(groups), max(depths, default=1)), dtype=np.int64)
    for index, (_, contents) in enumerate(groups):
        rows[index, :depths[index]] = np.repeat([length for length, _ in contents],
                                                [copies for _, copies in contents])
    repeats = np.array([count for count, _ in groups], dtype=np.int64)
    return Packing.from_rows(name, max_length, max_depth, rows, repeats)


@register("ffd", "first-fit decreasing on counts")
def pack_ffd(histogram, max_length, max_depth, options) -> Packing:
    groups = pack_decreasing(histogram.counts, max_length, max_depth, best_fit=False)
    return packing_from_runs("ffd", max_length, max_depth, groups)


@register("bfd", "best-fit decreasing on counts")
def pack_bfd(histogram, max_length, max_depth, options) -> Packing:
    groups = pack_decreasing(histogram.counts, max_length, max_depth, best_fit=True)
    return packing_from_runs("bfd", max_length, max_depth, groups)
