"""What `simbench pack` reports: each packing's Table 1 metrics with its gap to the LP bound, and the
recorded efficiencies measured again.

    >>> from simbench.histogram import load_histogram
    >>> from simbench.strategies import get_strategy
    >>> from simbench.strategies.evaluation import packing_metrics
    >>> metrics = packing_metrics(get_strategy("spfhp"), load_histogram("squad_1_1_384"), 384, 3, with_bound=True)
    >>> metrics["packs"], metrics["lower_bound_packs"]
    (40711, 40195)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.strategies import PackOptions, Strategy, get_strategy
from simbench.strategies.packing import Packing

if TYPE_CHECKING:
    from simbench.strategies.baseline import Comparison


def packing_metrics(strategy: Strategy, histogram: LengthHistogram, max_length: int, max_depth: int | None,
                    options: PackOptions | None = None, with_bound: bool | None = None) -> dict:
    """The packing's metrics; those of fixed-shape packs also hold `gap_to_bound` to the LP bound.

    The bound is computed when `with_bound` says so, or where it is cheap when it is None; it is
    computed once per histogram and depth (`lp_bound` caches it) and `bound_seconds` is its own time.
    """
    packing = strategy(histogram, max_length, max_depth, options)
    depth = bound_depth(packing)
    bound = None
    if is_bounded(packing, max_length) and with_bound is not False:
        # Imported here: a pack without a bound (`--no-bound`) need not load the LP solver's modules.
        from simbench.strategies.lp_bound import bound_is_cheap, lp_lower_bound

        if with_bound or bound_is_cheap(histogram, max_length, depth):
            bound = lp_lower_bound(histogram, max_length, depth)
    metrics = {"label": strategy.label(packing.max_depth), **packing.metrics(bound.lower_bound_packs if bound else None)}
    metrics["bound_seconds"] = bound.seconds if bound else None
    metrics["bound_depth"] = depth if bound else None
    return metrics


def bound_depth(packing: Packing) -> int | None:
    """The depth a packing's LP bound is taken at (a report's packing table, a sweep's, `simbench pack`): the
    limit it was made under, or for batchers without one (none, sort) the depth they used, so that padding, one
    sequence per pack, is bounded at depth 1, not compared with packs it was never allowed to fill."""
    return packing.max_depth if get_strategy(packing.strategy).uses_depth else packing.depth_used


def is_bounded(packing: Packing, max_length: int) -> bool:
    """Whether the LP bound on packs of `max_length` bounds the packing: only where every pack is of that length
    (a batch padded to its own longest, as sort's, is not)."""
    return bool((packing.slot_lengths == max_length).all())


def pack_each(strategies: list[Strategy], histogram: LengthHistogram, max_length: int, max_depth: int | None,
              options: PackOptions | None = None, with_bound: bool | None = None,
              skipped: Callable[[str, InputError], None] = lambda name, error: None) -> Iterator[dict]:
    """Each strategy's `packing_metrics` as it finishes. With several strategies, one that refuses the
    input (e.g. a depth it cannot reach) is left out and passed to `skipped`; a single one raises."""
    for strategy in strategies:
        try:
            yield packing_metrics(strategy, histogram, max_length, max_depth, options, with_bound)
        except InputError as error:
            if len(strategies) == 1:
                raise
            skipped(strategy.name, error)


def baseline_comparisons(histogram: LengthHistogram, strategies: Iterable[str], max_depth: int | None,
                         baseline_path: Path) -> tuple[int, Iterator[Comparison]]:
    """How many records match the histogram, strategies and depth (any depth when None), and their
    comparisons, measured as they are read; no matching record is an InputError naming the file."""
    from simbench.strategies.baseline import compare_with_baseline, load_baseline

    names = set(strategies)
    records = [record for record in load_baseline(baseline_path)
               if Path(record.histogram).stem == histogram.name and record.strategy in names
               and (max_depth is None or record.max_depth == max_depth)]
    if not records:
        raise InputError(f"no records for histogram {histogram.name} and strategy "
                         f"{'all' if len(names) > 1 else next(iter(names))} in the baseline", source=str(baseline_path))
    return len(records), compare_with_baseline(records)


def comparison_record(comparison: Comparison) -> dict:
    """One comparison as a JSON line: the record's settings, both efficiencies, the packs beyond the
    record's and whether it regressed."""
    record = comparison.record
    return {"histogram": record.histogram, "strategy": record.strategy, "max_depth": record.max_depth,
            "recorded_efficiency": record.efficiency, "measured_efficiency": comparison.measured_efficiency,
            "extra_packs": comparison.extra_packs, "regression": comparison.regressed}
