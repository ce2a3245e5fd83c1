"""`wlb`: packs balanced on predicted work rather than tokens, as WLB-LLM packs microbatches (arXiv 2503.17924).

A sequence of l tokens costs l + l^2 / parity: its dense layers grow with l, its causal attention with l^2, and
at `attention_parity_tokens` (PackOptions; the cost model's, when the simulator packs) the two are equal.
Sequences are placed longest first, each into the pack with the least predicted work that still has room
(longest-processing-time first with a token capacity), starting from as many packs as the tokens fill.
Each long document then sets its own pack's work and the shorter ones even out the rest, where token
packing tops a long document up with whatever comes next and leaves other packs light. Balancing can cost a
few packs; where first-fit decreasing predicts less total work plus spread (`predicted_step_work`), its
packs are kept, as they are for datasets over BALANCED_SEQUENCES_MAX sequences.

    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.strategies.packing import PackOptions
    >>> from simbench.strategies.wlb import pack_wlb
    >>> packing = pack_wlb(LengthHistogram.from_counts([4, 0, 0, 0, 0, 2]), 8, None, PackOptions())
    >>> packing.rows.tolist(), packing.repeats.tolist()
    ([[6, 1, 1]], [2])
"""

from __future__ import annotations

import heapq

import numpy as np

from simbench.histogram import LengthHistogram
from simbench.strategies import register
from simbench.strategies.packing import Packing, PackOptions


# Balancing places one sequence at a time on a heap, about half a million a second: beyond this many
# sequences (Wikipedia's 16M took 30 s) wlb keeps first-fit decreasing's packs, and its details say so.
BALANCED_SEQUENCES_MAX = 2_000_000


def outlier_threshold(max_length: int) -> int:
    """The length from which WLB-LLM's outlier delay holds a document back (`sim.batching.OutlierDelaySampler`):
    half the context window. WLB-LLM does not state its queues' thresholds; half the window is where its
    section 2.2 draws the line between long documents and the short ones holding most tokens."""
    return max(max_length // 2, 1)


def predicted_work(lengths, parity_tokens: float) -> np.ndarray:
    """Each sequence's predicted work in token-equivalents: l + l^2 / parity."""
    lengths = np.asarray(lengths, dtype=np.float64)
    return lengths + lengths**2 / parity_tokens


def balanced_packs(histogram: LengthHistogram, max_length: int, max_depth: int | None,
                   parity_tokens: float) -> list[list[int]]:
    """Packs (lists of lengths, longest first) filled longest sequence first into the least-loaded pack with room."""
    counts = histogram.counts[:max_length]
    present = np.flatnonzero(counts)[::-1]
    if present.size == 0:
        return []
    total_tokens = int(counts @ np.arange(1, counts.size + 1))
    packs: list[list[int]] = [[] for _ in range(-(-total_tokens // max_length))]
    room = [max_length] * len(packs)
    work = [0.0] * len(packs)
    open_packs = [(0.0, index) for index in range(len(packs))]  # (work, pack) of packs that may take more
    waiting: list[tuple[int, int]] = []  # (-room, pack): packs too full for the current length, for shorter ones
    depth_limit = max_depth if max_depth is not None else max_length
    for length in (present + 1).tolist():
        sequence_work = length + length * length / parity_tokens
        while waiting and -waiting[0][0] >= length:
            index = heapq.heappop(waiting)[1]
            heapq.heappush(open_packs, (work[index], index))
        for _ in range(int(counts[length - 1])):
            while open_packs and room[open_packs[0][1]] < length:
                index = heapq.heappop(open_packs)[1]
                heapq.heappush(waiting, (-room[index], index))
            if open_packs:
                index = heapq.heappop(open_packs)[1]
            else:
                index = len(packs)
                packs.append([])
                room.append(max_length)
                work.append(0.0)
            packs[index].append(length)
            room[index] -= length
            work[index] += sequence_work
            if room[index] > 0 and len(packs[index]) < depth_limit:
                heapq.heappush(open_packs, (work[index], index))
    return [pack for pack in packs if pack]


def pack_work(packing: Packing, parity_tokens: float) -> np.ndarray:
    """Each distinct pack's predicted work: its sequences' `predicted_work` summed."""
    return np.add.reduceat(predicted_work(packing.pack_lengths, parity_tokens), packing.pack_starts[:-1])


def predicted_step_work(packing: Packing, parity_tokens: float) -> float:
    """What wlb minimises: the packs' total predicted work plus, per pack, one standard deviation of it, as a
    step of unequal microbatches waits on its heavier ones (pipeline stalls, the slowest replica)."""
    if packing.packs_total == 0:
        return 0.0
    work = pack_work(packing, parity_tokens)
    weights = packing.repeats / packing.packs_total
    mean = float(weights @ work)
    spread = float(np.sqrt(weights @ (work - mean) ** 2))
    return packing.packs_total * (mean + spread)


@register("wlb", "workload-balanced packing (WLB-LLM): longest first into the pack with the least predicted "
                 "dense + attention work that has room, unless first-fit decreasing predicts less",
          uses_attention_parity=True)
def pack_wlb(histogram, max_length, max_depth, options: PackOptions) -> Packing:
    from simbench.strategies import get_strategy

    parity = options.attention_parity_tokens or max_length
    by_tokens = get_strategy("ffd").pack_function(histogram, max_length, max_depth, options)
    if histogram.counts[:max_length].sum() > BALANCED_SEQUENCES_MAX:
        return by_tokens.replace(strategy="wlb", details={"attention_parity_tokens": float(parity),
                                                          "packs_by": "first-fit decreasing (too many to balance)"})
    packs = balanced_packs(histogram, max_length, max_depth, parity)
    balanced = Packing.from_groups("wlb", max_length, max_depth, ((1, pack) for pack in packs))
    # Balancing may cost packs: where token-first packing predicts a shorter run it is kept, so wlb never
    # predicts more work than first-fit decreasing.
    chosen, how = min(((balanced, "balanced"), (by_tokens, "first-fit decreasing")),
                      key=lambda candidate: predicted_step_work(candidate[0], parity))
    return chosen.replace(strategy="wlb", details={"attention_parity_tokens": float(parity), "packs_by": how})
