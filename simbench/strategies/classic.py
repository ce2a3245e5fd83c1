"""`ffd` and `bfd`: first-fit and best-fit decreasing bin packing, computed on counts.

Same packs as placing the sorted sequences one by one, but each step moves a group of packs.

    >>> from simbench.strategies.classic import pack_ffd
    >>> from simbench.histogram import LengthHistogram
    >>> pack_ffd(LengthHistogram.from_counts([0, 3, 2]), 6, None, None).packs_total
    2
"""

from __future__ import annotations

from bisect import bisect_left, insort
from itertools import chain

import numpy as np

from simbench.strategies import register
from simbench.strategies.packing import Packing, lengths_longest_first

def pack_decreasing(counts: np.ndarray, max_length: int, max_depth: int | None, best_fit: bool
                    ) -> dict[tuple[int, ...], int]:
    """The packs of first- or best-fit decreasing: {(length, copies, length, copies, ...): how many}.

    Packs are numbered as they open. A group is a run of consecutive, identical packs, so the
    one-by-one rule "the first (or the fullest) pack that still fits, earliest on ties" always
    picks the front pack of some group: that pack takes as many copies of the length as fit,
    then the next pack of the group does, and so on, which is arithmetic on the group's count.

    Best fit keeps the open groups in one list sorted by (free space, first pack number), so the
    group served is the first at or past the length. First fit serves the earliest group among
    those with room: lengths only shrink, so a group too full for the current length waits in a
    list sorted by free space until the lengths come down to it, then joins the groups that fit,
    sorted by pack number. Each step is a search and an insertion, whatever the number of lengths.
    """
    depth_limit = max_depth if max_depth is not None else max_length
    closed, fitting, waiting = _place_longest_first(counts, max_length, depth_limit, best_fit)
    # The groups still open close as they are, in the order they stand.
    for group in fitting:
        count, contents = group[2:4] if best_fit else group[1:3]
        closed[contents] = closed.get(contents, 0) + count
    for _, _, count, contents, _ in waiting:
        closed[contents] = closed.get(contents, 0) + count
    return closed


def _place_longest_first(counts: np.ndarray, max_length: int, depth_limit: int, best_fit: bool
                         ) -> tuple[dict[tuple[int, ...], int], list[tuple], list[tuple]]:
    """`pack_decreasing`'s placing, longest length first: the packs closed (full, or at the depth limit) and the
    groups still open, fitting and waiting. One loop, whole: a function per step of it made `bfd` 25-36 % slower."""
    # Lists of groups. Best fit: (space, first pack number, count, contents, depth). First fit: fitting holds
    # (first, count, contents, depth, space), waiting (space, first, count, contents, depth). Pack numbers are
    # unique, so sorting never compares contents.
    fitting, waiting = [], []
    closed: dict[tuple, int] = {}
    opened = 0

    def add(first, count, contents, depth, space):
        if space == 0 or depth == depth_limit:
            closed[contents] = closed.get(contents, 0) + count
        elif best_fit:
            insort(fitting, (space, first, count, contents, depth))
        elif space >= length:
            insort(fitting, (first, count, contents, depth, space))
        else:
            insort(waiting, (space, first, count, contents, depth))

    for length, to_place in lengths_longest_first(counts):
        while waiting and waiting[-1][0] >= length:
            space, first, count, contents, depth = waiting.pop()
            insort(fitting, (first, count, contents, depth, space))
        while to_place:
            if best_fit:
                position = bisect_left(fitting, (length,))
                found = position < len(fitting)
                if found:
                    space, first, count, contents, depth = fitting.pop(position)
            else:
                found = bool(fitting)
                if found:
                    first, count, contents, depth, space = fitting.pop(0)
            if not found:
                copies = min(max_length // length, depth_limit)
                full, rest = divmod(to_place, copies)
                if full:
                    add(opened, full, (length, copies), copies, max_length - copies * length)
                if rest:
                    add(opened + full, 1, (length, rest), rest, max_length - rest * length)
                opened += full + (rest > 0)
                break
            # Conditional expressions, not min(): this loop runs once per group served, and a builtin call
            # is a tenth of its time.
            copies, room = space // length, depth_limit - depth
            if room < copies:
                copies = room
            placed = count * copies
            full, rest = divmod(to_place if to_place < placed else placed, copies)
            if full:
                add(first, full, contents + (length, copies), depth + copies, space - copies * length)
            if rest:
                add(first + full, 1, contents + (length, rest), depth + rest, space - rest * length)
            untouched = count - full - (rest > 0)
            if untouched:
                add(first + count - untouched, untouched, contents, depth, space)
            to_place -= full * copies + rest
    return closed, fitting, waiting


def packing_from_runs(name: str, max_length: int, max_depth: int | None, merged: dict[tuple, int]) -> Packing:
    """A fixed-shape `Packing` from {(length, copies, length, copies, ...) runs: how many such packs}.

    A group meets each length once, longest first, so equal packs have equal runs and the runs
    expand to lengths in descending order. Runs also sort like the lengths they expand to (a
    larger count of the same length puts that length where the other pack has a shorter one or
    none), which keeps the pack order of `Packing.from_rows` (and so what a seeded sampler draws).
    """
    packs = sorted(merged)
    runs_per_pack = np.fromiter(map(len, packs), dtype=np.int64, count=len(packs)) // 2
    runs = np.fromiter(chain.from_iterable(packs), dtype=np.int64, count=2 * int(runs_per_pack.sum()))
    run_lengths, run_copies = runs[0::2], runs[1::2]
    depths = (np.add.reduceat(run_copies, np.cumsum(runs_per_pack) - runs_per_pack) if runs.size
              else np.zeros(0, dtype=np.int64))
    repeats = np.fromiter(map(merged.__getitem__, packs), dtype=np.int64, count=len(packs))
    return Packing.from_packs(name, max_length, max_depth, np.repeat(run_lengths, run_copies),
                              np.concatenate([[0], np.cumsum(depths)]), repeats)


@register("ffd", "first-fit decreasing on counts")
def pack_ffd(histogram, max_length, max_depth, options) -> Packing:
    groups = pack_decreasing(histogram.counts, max_length, max_depth, best_fit=False)
    return packing_from_runs("ffd", max_length, max_depth, groups)


@register("bfd", "best-fit decreasing on counts")
def pack_bfd(histogram, max_length, max_depth, options) -> Packing:
    groups = pack_decreasing(histogram.counts, max_length, max_depth, best_fit=True)
    return packing_from_runs("bfd", max_length, max_depth, groups)
