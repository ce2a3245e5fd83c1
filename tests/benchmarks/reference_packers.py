"""The simplest correct histogram packers, the yardstick simbench's `bfd`, `ffd`, `spfhp` and `lpfhp` are timed against.

    >>> best_fit_decreasing(np.array([0, 3, 2]), 6)
    {(3, 3): 1, (2, 2, 2): 1}

Plain Python over the counts, with numpy only to read them and sorted lists searched with `bisect`: a group
of identical packs moves as one (how many, their lengths) so that a length's copies are placed by arithmetic,
not one by one. Each returns {pack lengths, longest first: how many such packs}, the same packs simbench's
packer makes (tests/test_packing_reference.py), with the same tie-breaking.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

import numpy as np


def lengths_longest_first(counts: np.ndarray) -> list[tuple[int, int]]:
    """(length, how many) for every length present, longest first."""
    present = np.flatnonzero(counts)[::-1]
    return list(zip((present + 1).tolist(), counts[present].tolist()))


def best_fit_decreasing(counts: np.ndarray, max_length: int, max_depth: int | None = None) -> dict:
    """Each sequence, longest first, into the open pack with the least space that fits it (the earliest on ties)."""
    limit = max_length if max_depth is None else max_depth
    open_groups = []  # sorted (free space, first pack's number, how many packs, lengths)
    packs = {}
    opened = 0

    def add(space, first, count, lengths):
        if count:
            if space == 0 or len(lengths) == limit:
                packs[lengths] = packs.get(lengths, 0) + count
            else:
                insort(open_groups, (space, first, count, lengths))

    for length, left in lengths_longest_first(counts):
        while left:
            position = bisect_left(open_groups, (length,))
            if position == len(open_groups):
                copies = min(max_length // length, limit)
                full, rest = divmod(left, copies)
                add(max_length - copies * length, opened, full, (length,) * copies)
                add(max_length - rest * length, opened + full, int(rest > 0), (length,) * rest)
                opened += full + (rest > 0)
                break
            space, first, count, lengths = open_groups.pop(position)
            # Each pack of the group takes as many copies as fit; the last one used may take fewer.
            copies = min(space // length, limit - len(lengths))
            full, rest = divmod(min(left, count * copies), copies)
            add(space - copies * length, first, full, lengths + (length,) * copies)
            add(space - rest * length, first + full, int(rest > 0), lengths + (length,) * rest)
            used = full + (rest > 0)
            add(space, first + used, count - used, lengths)
            left -= full * copies + rest
    for space, first, count, lengths in open_groups:
        packs[lengths] = packs.get(lengths, 0) + count
    return packs


def first_fit_decreasing(counts: np.ndarray, max_length: int, max_depth: int | None = None) -> dict:
    """Each sequence, longest first, into the earliest open pack that fits it."""
    limit = max_length if max_depth is None else max_depth
    fitting = []  # sorted (first pack's number, how many, lengths, free space): groups that fit the current length
    waiting = []  # sorted (free space, first, how many, lengths): groups that fit no length before a shorter one
    packs = {}
    opened = 0

    def add(space, first, count, lengths, length):
        if count:
            if space == 0 or len(lengths) == limit:
                packs[lengths] = packs.get(lengths, 0) + count
            elif space >= length:
                insort(fitting, (first, count, lengths, space))
            else:
                insort(waiting, (space, first, count, lengths))

    for length, left in lengths_longest_first(counts):
        while waiting and waiting[-1][0] >= length:
            space, first, count, lengths = waiting.pop()
            insort(fitting, (first, count, lengths, space))
        while left:
            if not fitting:
                copies = min(max_length // length, limit)
                full, rest = divmod(left, copies)
                add(max_length - copies * length, opened, full, (length,) * copies, length)
                add(max_length - rest * length, opened + full, int(rest > 0), (length,) * rest, length)
                opened += full + (rest > 0)
                break
            first, count, lengths, space = fitting.pop(0)
            copies = min(space // length, limit - len(lengths))
            full, rest = divmod(min(left, count * copies), copies)
            add(space - copies * length, first, full, lengths + (length,) * copies, length)
            add(space - rest * length, first + full, int(rest > 0), lengths + (length,) * rest, length)
            used = full + (rest > 0)
            add(space, first + used, count - used, lengths, length)
            left -= full * copies + rest
    for group in fitting:
        packs[group[2]] = packs.get(group[2], 0) + group[1]
    for group in waiting:
        packs[group[3]] = packs.get(group[3], 0) + group[2]
    return packs


class FreeSpaceQueues:
    """Groups of identical open packs queued by free space, the last one added to a space served first
    (Graphcore's histogram packing); a full pack, or one at the depth limit, is done."""

    def __init__(self, max_depth: int | None):
        self.max_depth = max_depth
        self.queues = {}  # free space -> [(how many, lengths)]
        self.spaces = []  # the queues' spaces, sorted
        self.packs = {}

    def add(self, count, lengths, space):
        if space == 0 or len(lengths) == self.max_depth:
            self.packs[lengths] = self.packs.get(lengths, 0) + count
        elif space in self.queues:
            self.queues[space].append((count, lengths))
        else:
            self.queues[space] = [(count, lengths)]
            insort(self.spaces, space)

    def take(self, position, wanted):
        """Up to `wanted` packs of the group served next at spaces[position]: how many, their lengths, their space."""
        space = self.spaces[position]
        queue = self.queues[space]
        count, lengths = queue.pop()
        taken = min(count, wanted)
        if count > taken:
            queue.append((count - taken, lengths))
        elif not queue:
            del self.queues[space]
            del self.spaces[position]
        return taken, lengths, space

    def all_packs(self) -> dict:
        for queue in self.queues.values():
            for count, lengths in queue:
                self.packs[lengths] = self.packs.get(lengths, 0) + count
        return self.packs


def shortest_pack_first(counts: np.ndarray, max_length: int, max_depth: int | None = None) -> dict:
    """SPFHP: each length, longest first, into the group with the most free space that fits, the search for the
    next group resuming at the space just used (Graphcore's sweep of offsets downwards); then new packs."""
    open_groups = FreeSpaceQueues(max_depth)
    spaces = open_groups.spaces
    for length, left in lengths_longest_first(counts):
        bound = max_length
        while left:
            position = bisect_right(spaces, bound) - 1
            if position < 0 or spaces[position] < length:
                open_groups.add(left, (length,), max_length - length)
                break
            used, lengths, bound = open_groups.take(position, left)
            left -= used
            open_groups.add(used, lengths + (length,), bound - length)
    return open_groups.all_packs()


def longest_pack_first(counts: np.ndarray, max_length: int, max_depth: int | None = None) -> dict:
    """LPFHP: each length, longest first, into the group with the least free space that fits, as many copies
    per pack as fit (so that one pack at least takes them all); then new packs as full as they can be."""
    limit = max_length if max_depth is None else max_depth
    open_groups = FreeSpaceQueues(max_depth)
    spaces = open_groups.spaces
    for length, left in lengths_longest_first(counts):
        while left:
            position = bisect_left(spaces, length)
            if position == len(spaces):
                copies = min(max_length // length, limit, left)
                open_groups.add(left // copies, (length,) * copies, max_length - copies * length)
                left %= copies
                continue
            space = spaces[position]
            copies = min(space // length, limit - len(open_groups.queues[space][-1][1]), left)
            taken, lengths, space = open_groups.take(position, left // copies)
            left -= taken * copies
            open_groups.add(taken, lengths + (length,) * copies, space - copies * length)
    return open_groups.all_packs()


REFERENCES = {"bfd": best_fit_decreasing, "ffd": first_fit_decreasing, "spfhp": shortest_pack_first,
              "lpfhp": longest_pack_first}


def main(arguments: list[str]) -> None:
    """`python reference_packers.py HISTOGRAM.csv MAX_LENGTH NAME`: the packs' count as one JSON line, the
    cold-start yardstick of `simbench pack` (a process that reads the histogram, packs and prints)."""
    import csv
    import json

    path, max_length, name = arguments
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    counts = np.zeros(int(max_length), dtype=np.int64)
    for length, count in rows:
        counts[int(length) - 1] = int(count)
    packs = REFERENCES[name](counts, int(max_length))
    print(json.dumps({"strategy": name, "packs": sum(packs.values()), "strategies_used": len(packs)}))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
