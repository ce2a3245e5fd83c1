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

def pack_decreasing(counts: np.ndarray, max_length: int, max_depth: int | None, best_fit: bool
                    ) -> list[tuple[int, tuple[tuple[int, int], ...]]]:
    """Groups (how many packs, ((length, copies), ...)) of first- or best-fit decreasing.

    Packs are numbered as they open. A group is a run of consecutive, identical packs, so the
    one-by-one rule "the first (or the fullest) pack that still fits, earliest on ties" always
    picks the front pack of some group: that pack takes as many copies of the length as fit,
    then the next pack of the group does, and so on, which is arithmetic on the group's count.

    Lengths only shrink, so a group that fits one length fits every later one: groups wait in
    `waiting[space]` until the lengths come down to their free space, then join one heap of
    groups that fit, ordered by pack number (first fit) or by free space, then pack number (best
    fit). Each step is a heap operation, whatever the number of distinct lengths.
    """
    depth_limit = max_depth if max_depth is not None else max_length
    fitting: list[tuple] = []  # heap of (order key, first pack number, count, contents, depth, space)
    waiting: list[list[tuple]] = [[] for _ in range(max(max_length, len(counts)) + 1)]
    closed = []
    opened = 0
    length = len(counts)

    def push(first, count, contents, depth, space):
        if space == 0 or depth == depth_limit:
            closed.append((count, contents))
        elif space >= length:
            heapq.heappush(fitting, (space if best_fit else 0, first, count, contents, depth, space))
        else:
            waiting[space].append((space if best_fit else 0, first, count, contents, depth, space))

    for length in range(len(counts), 0, -1):
        for group in waiting[length]:
            heapq.heappush(fitting, group)
        waiting[length] = []
        to_place = int(counts[length - 1])
        while to_place > 0:
            if not fitting:
                copies = min(max_length // length, depth_limit)
                full, rest = divmod(to_place, copies)
                if full:
                    push(opened, full, ((length, copies),), copies, max_length - copies * length)
                if rest:
                    push(opened + full, 1, ((length, rest),), rest, max_length - rest * length)
                opened += full + (rest > 0)
                break
            _, first, count, contents, depth, space = heapq.heappop(fitting)
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
    closed.extend((group[2], group[3]) for group in fitting)
    closed.extend((group[2], group[3]) for groups in waiting for group in groups)
    return closed


def packing_from_runs(name: str, max_length: int, max_depth: int | None, groups) -> Packing:
    """A fixed-shape `Packing` from groups whose contents are (length, copies) runs.

    A group meets each length once, longest first, so equal packs have equal runs and the runs
    expand to lengths in descending order; runs also sort like the lengths they expand to, which
    keeps the pack order of `Packing.from_rows` (and so what a seeded sampler draws).
    """
    merged: dict[tuple, int] = {}
    for count, contents in groups:
        merged[contents] = merged.get(contents, 0) + count
    merged = dict(sorted(merged.items()))
    runs = [run for contents in merged for run in contents]
    run_lengths = np.fromiter((length for length, _ in runs), dtype=np.int64, count=len(runs))
    run_copies = np.fromiter((copies for _, copies in runs), dtype=np.int64, count=len(runs))
    runs_per_pack = np.fromiter(map(len, merged), dtype=np.int64, count=len(merged))
    run_starts = np.concatenate([[0], np.cumsum(runs_per_pack)])
    depths = np.add.reduceat(run_copies, run_starts[:-1]) if runs else np.zeros(0, dtype=np.int64)
    repeats = np.fromiter(merged.values(), dtype=np.int64, count=len(merged))
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
