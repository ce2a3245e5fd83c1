"""`greedy`: next-fit packing over the shuffled dataset, the paper's GREEDY baseline.

Sequences arrive in a seeded random order; a pack closes when the next sequence does not fit.

    >>> from simbench.strategies.greedy import pack_greedy
    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.strategies.packing import PackOptions
    >>> pack_greedy(LengthHistogram.from_counts([0, 0, 0, 4]), 8, None, PackOptions(seed=1)).packs_total
    2
"""

from __future__ import annotations

import numpy as np

from simbench.strategies import register
from simbench.strategies.packing import Packing

# Chains are followed in lockstep from one start per block; a block this long holds enough
# packs that a chain started at the wrong place almost always meets the true one inside it.
BLOCK_SEQUENCES = 256
# Repair rounds before the chains are taken as unable to meet (see mark_pack_starts); real
# datasets need one.
MAX_REPAIR_ROUNDS = 4
# Positions whose next pack start is searched together (see next_pack_starts).
WINDOW_SEQUENCES = 1 << 16
SHUFFLE_BLOCK_SEQUENCES = 1 << 16
# Positions whose pack starts are found together (see pack_starts): a window's arrays take tens of
# MB, where those of 100M positions at once took 900 MB.
CHAIN_WINDOW_SEQUENCES = 1 << 20


def pack_starts(lengths: np.ndarray, max_length: int, max_depth: int | None) -> np.ndarray:
    """Where each pack of next fit over `lengths` (in this order) starts, a window of positions at a time.

    The chain of pack starts enters each window where it left the previous one; a pack holds at
    most `reach` sequences, so a window's next-pack starts need only that many lengths past it.
    """
    reach = max_length if max_depth is None else min(max_depth, max_length)
    window = max(CHAIN_WINDOW_SEQUENCES, 4 * reach)
    found = []
    entry = 0
    while entry < lengths.size:
        size = min(window, lengths.size - entry)
        following = next_pack_starts(lengths[entry:entry + size + reach], max_length, max_depth)[:size]
        # Past the window is all one to the chain inside it: the window's end.
        starts = np.flatnonzero(mark_pack_starts(np.append(np.minimum(following, size), size)))
        found.append(starts + entry)
        entry += int(following[starts[-1]])
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def next_pack_starts(lengths: np.ndarray, max_length: int, max_depth: int | None) -> np.ndarray:
    """For every position s, where the next pack starts when a pack starts at s (next fit).

    A pack holds at most max_length sequences (each has a token), so each window of positions
    only needs prefix sums over itself and max_length more sequences: small, cache-resident
    searches in 32-bit sums instead of one search over 16M 64-bit sums.
    """
    total = lengths.size
    following = np.empty(total + 1, dtype=np.int64)
    sum_type = np.int32 if (WINDOW_SEQUENCES + max_length) * max_length < 2**31 else np.int64
    for start in range(0, total, WINDOW_SEQUENCES):
        stop = min(start + WINDOW_SEQUENCES, total)
        sums = np.zeros(min(stop + max_length, total) - start + 1, dtype=sum_type)
        np.cumsum(lengths[start:start + sums.size - 1], out=sums[1:])
        ahead = np.searchsorted(sums, sums[:stop - start] + max_length, side="right") - 1
        if max_depth is not None:
            np.minimum(ahead, np.arange(max_depth, stop - start + max_depth), out=ahead)
        following[start:stop] = ahead + start
    following[total] = total  # the end of the dataset leads nowhere
    return following


def mark_pack_starts(following: np.ndarray) -> np.ndarray:
    """Which positions start a pack on the chain 0 -> following[0] -> ... (the true next fit).

    A chain is started at every block start at once and followed in lockstep; a block whose
    true entry (where the previous block's chain leaves it) differs from where its chain began
    is repaired by walking both chains until they meet, which for next fit comes within a few
    packs; a repair that changes a block's exit makes the next block pending in the next round.
    Periodic data (all sequences alike) can keep chains from ever meeting; after a few rounds
    the exact but slower route takes over.
    """
    total = following.size - 1
    is_start = np.zeros(total + 1, dtype=bool)
    block_starts = np.arange(0, total, BLOCK_SEQUENCES)
    block_ends = np.minimum(block_starts + BLOCK_SEQUENCES, total)
    exits = walk_blocks(following, is_start, block_starts, block_ends)
    chain_starts = block_starts.copy()
    pending = np.flatnonzero(exits[:-1] != chain_starts[1:]) + 1
    for _ in range(MAX_REPAIR_ROUNDS):
        if not pending.size:
            return is_start[:total]
        entries = exits[pending - 1]
        exits[pending] = repair_blocks(following, is_start, chain_starts[pending], entries,
                                       block_ends[pending], exits[pending])
        chain_starts[pending] = entries
        pending = np.flatnonzero(exits[:-1] != chain_starts[1:]) + 1
    if not pending.size:
        return is_start[:total]
    is_start[:] = False
    window_starts = np.arange(0, total, WINDOW_SEQUENCES)
    window_ends = np.minimum(window_starts + WINDOW_SEQUENCES, total)
    walk_blocks(following, is_start, window_entries(following, window_starts, window_ends), window_ends)
    return is_start[:total]


def window_entries(following: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Where the true chain enters each window, by pointer doubling inside each window.

    `leave[p]` starts as the next pack start after p and, squared again and again, becomes the
    first chain position at or past the window's end, for every p in the window at once.
    """
    entries = np.empty_like(starts)
    entry = 0
    for index, (start, end) in enumerate(zip(starts, ends)):
        entries[index] = entry
        leave = following[start:end].copy()
        inside = leave < end
        while inside.any():
            leave[inside] = leave[leave[inside] - start]
            inside = leave < end
        entry = leave[entry - start]
    return entries


def walk_blocks(following, is_start, starts, ends) -> np.ndarray:
    """Follow each block's chain from its start, marking it; return where each leaves its block."""
    positions = starts.copy()
    exits = np.empty_like(starts)
    active = np.arange(starts.size)
    while active.size:
        is_start[positions] = True
        positions = following[positions]
        leaving = positions >= ends[active]
        exits[active[leaving]] = positions[leaving]
        active, positions = active[~leaving], positions[~leaving]
    return exits


def repair_blocks(following, is_start, old_starts, new_starts, ends, old_exits) -> np.ndarray:
    """Move each block's marked chain from its old start to its new one; return the new exits.

    The smaller of the two chain positions is never on the other chain, so it is unmarked (old
    chain) or marked (new chain) and advanced, until the chains meet or both leave the block.
    """
    old, new = old_starts.copy(), new_starts.copy()
    while True:
        walking = (old != new) & (np.minimum(old, new) < ends)
        if not walking.any():
            return np.where(old == new, old_exits, new)
        old_behind = walking & (old < new)
        new_behind = walking & (new < old)
        is_start[old[old_behind]] = False
        is_start[new[new_behind]] = True
        old[old_behind] = following[old[old_behind]]
        new[new_behind] = following[new[new_behind]]


def shuffled_lengths(histogram, rng: np.random.Generator) -> np.ndarray:
    """The dataset's lengths in a uniformly random order (16-bit: lengths stay below 65,536).

    Block by block: a block's mix of lengths is a multivariate hypergeometric draw from what is
    left, then the block is shuffled. That is the same distribution as one shuffle of the whole
    dataset, with every swap inside a cache-sized block (three times faster at 16M).
    """
    dtype = np.uint16 if histogram.max_length < 2**16 else np.int64
    values = histogram.lengths.astype(dtype)
    remaining = histogram.counts.copy()
    shuffled = np.empty(histogram.sequences, dtype=dtype)
    for start in range(0, shuffled.size, SHUFFLE_BLOCK_SEQUENCES):
        size = min(SHUFFLE_BLOCK_SEQUENCES, shuffled.size - start)
        drawn = rng.multivariate_hypergeometric(remaining, size, method="marginals")
        remaining -= drawn
        block = np.repeat(values, drawn)
        rng.shuffle(block)
        shuffled[start:start + size] = block
    return shuffled


def distinct_packs(lengths: np.ndarray, starts: np.ndarray, max_length: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct packs in the flat form (lengths descending, pack by pack), their depths and repeats.

    Packs are grouped by depth, shallowest first; each pack's sorted lengths are bit-packed into
    exact integer keys, so counting distinct packs is a bincount, a hash-table pass or a sort of
    keys rather than of rows.
    """
    depths = np.diff(starts, append=lengths.size)
    bits = int(max_length).bit_length()
    # A radix sort where the depths fit 16 bits (every greedy pack below 65,536 tokens).
    by_depth = starts[np.argsort(depths.astype(np.uint16) if depths.max(initial=0) < 2**16 else depths, kind="stable")]
    pieces, pack_depths, repeats = [], [], []
    first = 0
    for depth, packs in enumerate(np.bincount(depths)):
        if not packs:
            continue
        # Rows read through a sliding window: no index per member (800 MB at 100M sequences).
        members = np.lib.stride_tricks.sliding_window_view(lengths, depth)[by_depth[first:first + packs]]
        first += packs
        members.sort(axis=1)
        members = members[:, ::-1]  # longest first
        if depth * bits <= 62:
            rows, counts = count_packed_rows(list(members.T), bits)
        else:
            rows, counts = sorted_distinct_rows(members, bits)
        pieces.append(rows.ravel())
        pack_depths.append(np.full(counts.size, depth, dtype=np.int64))
        repeats.append(counts)
    if not pieces:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(pieces, dtype=np.int64), np.concatenate(pack_depths), np.concatenate(repeats)


def sorted_distinct_rows(rows: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows in lexicographic order and their counts, for rows too wide for one key.

    Each row becomes a few exact keys of `bits` bits per column; the rows are sorted by the first
    key alone, and only runs that tie on it (rare: it holds the longest lengths) by all of them.
    """
    per_key = 62 // bits
    keys = []
    for first in range(0, rows.shape[1], per_key):
        key = np.zeros(rows.shape[0], dtype=np.int64)
        for column in rows.T[first:first + per_key]:
            key <<= bits
            key |= column
        keys.append(key)
    order = np.argsort(keys[0])
    leading = keys[0][order]
    ties = np.zeros(order.size, dtype=bool)
    ties[1:] = leading[1:] == leading[:-1]
    ties[:-1] |= ties[1:]
    tied = np.flatnonzero(ties)
    if tied.size:
        # Each tied run keeps its places; sorting them all by every key, first key first, orders each run.
        subset = order[tied]
        order[tied] = subset[np.lexsort([key[subset] for key in reversed(keys)])]
    same = np.ones(max(order.size - 1, 0), dtype=bool)
    for key in keys:
        sorted_key = key[order]
        same &= sorted_key[1:] == sorted_key[:-1]
    heads = np.flatnonzero(np.concatenate([[True], ~same]))
    return rows[order[heads]], np.diff(np.append(heads, order.size))


def count_packed_rows(columns: list[np.ndarray], bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows and their counts, via exact keys of `bits` bits per column (first column highest)."""
    keys = columns[0].astype(np.int64)
    for column in columns[1:]:
        keys <<= bits
        keys |= column
    if len(columns) * bits <= 24:
        counts = np.bincount(keys)
        distinct = np.flatnonzero(counts)
        counts = counts[distinct]
    else:
        import pandas as pd  # only for wide keys: `simbench list` and short packs need not load it

        codes, distinct = pd.factorize(keys, sort=False)
        counts = np.bincount(codes, minlength=distinct.size)
    shifts = bits * np.arange(len(columns) - 1, -1, -1, dtype=np.int64)
    distinct = np.asarray(distinct, dtype=np.int64)
    return (distinct[:, None] >> shifts) & ((1 << bits) - 1), counts


@register("greedy", "next-fit over the dataset shuffled with --seed (the paper's GREEDY)", slow=True)
def pack_greedy(histogram, max_length, max_depth, options) -> Packing:
    lengths = shuffled_lengths(histogram, np.random.default_rng(options.seed))
    pack_lengths, depths, repeats = distinct_packs(lengths, pack_starts(lengths, max_length, max_depth), max_length)
    return Packing.from_packs("greedy", max_length, max_depth, pack_lengths, np.concatenate([[0], np.cumsum(depths)]),
                              repeats)
