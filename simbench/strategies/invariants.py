"""The rules every packing keeps, whatever made it: checked on every plug-in's packing before it is used,
and by the public battery (`simbench.testing.check_strategy`) on any strategy.

    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.strategies.packing import Packing
    >>> histogram = LengthHistogram.from_counts([0, 2, 0, 1])
    >>> broken_rule(Packing.from_rows("demo", 4, None, [[4, 0], [2, 2]], [1, 1]), histogram, 4, None) is None
    True
    >>> broken_rule(Packing.from_rows("demo", 4, None, [[4, 0]], [1]), histogram, 4, None)[0]
    'every sequence placed exactly once'
"""

from __future__ import annotations

import numpy as np

from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.strategies.packing import Packing


class BrokenPacking(InputError):
    """A strategy's packing broke one of the rules: `rule`, and what was `found`."""

    def __init__(self, strategy: str, rule: str, found: str):
        self.rule, self.found = rule, found
        super().__init__(f"the plug-in strategy {strategy!r} returned a packing that breaks the rule: {rule}; found "
                         f"{found}; it is not used (`simbench.testing.check_strategy` runs every rule on it)")


def check_plugin_packing(strategy: str, packing, histogram: LengthHistogram, max_length: int,
                         max_depth: int | None) -> None:
    """Raise BrokenPacking unless `packing` is a Packing that keeps every rule (see `broken_rule`)."""
    if not isinstance(packing, Packing):
        raise BrokenPacking(strategy, "a strategy returns a simbench.strategies.Packing",
                            f"a {type(packing).__name__}")
    broken = broken_rule(packing, histogram, max_length, max_depth)
    if broken is not None:
        raise BrokenPacking(strategy, *broken)


def broken_rule(packing: Packing, histogram: LengthHistogram, max_length: int,
                max_depth: int | None) -> tuple[str, str] | None:
    """The first rule `packing` of `histogram` breaks, as (rule, what was found), or None when it keeps
    them all (read in the flat form, which every packing has: a dense table of deep packs at long context
    may not fit in memory)."""
    lengths, starts, repeats, slots = packing.pack_lengths, packing.pack_starts, packing.repeats, packing.slot_lengths

    def pack(index: int) -> list[int]:
        return lengths[starts[index]:starts[index + 1]].tolist()

    if not (starts.size == repeats.size + 1 == slots.size + 1 and starts[0] == 0 and starts[-1] == lengths.size
            and bool(np.all(np.diff(starts) >= 0))):
        return ("one repeat count and one slot length per pack",
                f"{starts.size - 1} packs, {repeats.size} repeats, {slots.size} slot lengths")
    if not bool(np.all(repeats > 0)):
        return "every listed pack is used", f"repeat counts {sorted(set(repeats.tolist()))}"
    depths = np.diff(starts)
    pack_of = np.repeat(np.arange(depths.size), depths)
    rising = np.flatnonzero((np.diff(lengths) > 0) & (pack_of[1:] == pack_of[:-1]))
    if rising.size:
        return "packs hold lengths in descending order", f"pack {pack(pack_of[rising[0]])}"
    repeated = repeated_pack(packing)
    if repeated is not None:
        return "packs are distinct", f"pack {pack(repeated)} listed twice"
    if lengths.size and (lengths.min() < 1 or lengths.max() > histogram.max_length):
        bad = int(lengths.min()) if lengths.min() < 1 else int(lengths.max())
        return "every sequence placed exactly once", f"a sequence of length {bad}, which the histogram cannot hold"
    # Counted over the histogram's lengths, however long the packing says its packs are.
    counted = packing.placed_histogram().counts[:histogram.counts.size]
    placed = np.zeros(histogram.counts.size, dtype=np.int64)
    placed[:counted.size] = counted
    wrong = np.flatnonzero(placed != histogram.counts)
    if wrong.size:
        return ("every sequence placed exactly once", f"{placed[wrong[0]]} sequences of length {wrong[0] + 1} placed "
                f"where the histogram has {histogram.counts[wrong[0]]}")
    pack_tokens = packing.pack_tokens()
    over = np.flatnonzero(pack_tokens > slots)
    if over.size:
        return "no pack holds more tokens than its slots", f"pack {pack(over[0])} in {slots[over[0]]} slots"
    if not bool(np.all(slots <= max_length)):
        return "no pack longer than max_length", f"a pack of {int(slots.max(initial=0))} slots"
    if max_depth is not None:
        deep = np.flatnonzero(depths > max_depth)
        if deep.size:
            return "no pack deeper than max_depth", f"pack {pack(deep[0])}"
    return _broken_count_rule(packing, histogram, depths, pack_tokens)


def _broken_count_rule(packing: Packing, histogram: LengthHistogram, depths: np.ndarray,
                       pack_tokens: np.ndarray) -> tuple[str, str] | None:
    """`broken_rule`'s last rules: the budgets, the real tokens and the metrics agree with the packs."""
    import math

    repeats, slots = packing.repeats, packing.slot_lengths
    metrics = packing.metrics()
    tokens = int(repeats @ slots)
    if "budget_tokens" in packing.details:
        # A budget batcher spends each batch's whole budget, its rows' padded shape within it.
        budget = int(packing.details["budget_tokens"]) * int(packing.details["batches"])
        if budget < tokens:
            return "batches stay within their token budget", f"{tokens} slots in rows, budgets hold {budget}"
        tokens = budget
    real = int(repeats @ pack_tokens)
    if real != histogram.real_tokens:
        return "the packs hold every real token", f"{real} real tokens where the histogram has {histogram.real_tokens}"
    expected = {"sequences": histogram.sequences, "packs": int(repeats.sum()), "tokens": tokens,
                "padding_tokens": tokens - real, "strategies_used": repeats.size,
                "depth_used": int(depths.max(initial=0))}
    for key, value in expected.items():
        if metrics[key] != value:
            return f"metrics agree with the packs ({key})", f"{metrics[key]}, packs say {value}"
    ratios = {"efficiency": real / tokens if tokens else 1.0,
              "packing_factor": histogram.sequences / repeats.sum() if repeats.sum() else 0.0}
    for key, value in ratios.items():
        if not math.isclose(metrics[key], value, rel_tol=1e-6, abs_tol=1e-12):
            return f"metrics agree with the packs ({key})", f"{metrics[key]}, packs say {value}"
    return None


def repeated_pack(packing: Packing) -> int | None:
    """A pack listed twice (same lengths and slots), if any: only packs alike in depth, slots and tokens
    are compared length by length."""
    depths, tokens = np.diff(packing.pack_starts), packing.pack_tokens()
    keys = np.column_stack([depths, packing.slot_lengths, tokens])
    _, group, sizes = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    seen: set[tuple] = set()
    for index in np.flatnonzero(sizes[group.ravel()] > 1):
        content = (int(packing.slot_lengths[index]),
                   *packing.pack_lengths[packing.pack_starts[index]:packing.pack_starts[index + 1]].tolist())
        if content in seen:
            return int(index)
        seen.add(content)
    return None
