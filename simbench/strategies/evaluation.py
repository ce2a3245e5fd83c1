"""What `simbench pack` reports: each packing's Table 1 metrics with its gap to the LP bound, and the
recorded efficiencies measured again.

    >>> from simbench.histogram import load_histogram
    >>> from simbench.strategies import get_strategy
    >>> from simbench.strategies.evaluation import packing_metrics
    >>> packing_metrics(get_strategy("spfhp"), load_histogram("squad_1_1_384"), 384, 3)["packs"]
    40711
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.strategies import PackOptions, Strategy
from simbench.strategies.baseline import Comparison, compare_with_baseline, load_baseline


def packing_metrics(strategy: Strategy, histogram: LengthHistogram, max_length: int, max_depth: int | None,
                    options: PackOptions | None = None) -> dict:
    """The packing's metrics; those of fixed-shape packs also hold `gap_to_bound` to the LP bound."""
    packing = strategy(histogram, max_length, max_depth, options)
    fixed_shape = bool((packing.slot_lengths == max_length).all())
    return packing.metrics(_lower_bound_packs(histogram, max_length, max_depth) if fixed_shape else None)


def _lower_bound_packs(histogram: LengthHistogram, max_length: int, max_depth: int | None) -> int:
    """The LP bound on packs, cached by the optimal module so that every strategy can ask."""
    from simbench.strategies.optimal import lp_lower_bound

    return lp_lower_bound(histogram, max_length, max_depth).lower_bound_packs


def baseline_comparisons(histogram: LengthHistogram, strategies: Iterable[str], max_depth: int | None,
                         baseline_path: Path) -> tuple[int, Iterator[Comparison]]:
    """How many records match the histogram, strategies and depth (any depth when None), and their
    comparisons, measured as they are read; no matching record is an InputError naming the file."""
    names = set(strategies)
    records = [record for record in load_baseline(baseline_path)
               if Path(record.histogram).stem == histogram.name and record.strategy in names
               and (max_depth is None or record.max_depth == max_depth)]
    if not records:
        raise InputError(f"no records for histogram {histogram.name} and strategy "
                         f"{'all' if len(names) > 1 else next(iter(names))} in the baseline", source=str(baseline_path))
    return len(records), compare_with_baseline(records)


def comparison_record(comparison: Comparison) -> dict:
    """One comparison as a JSON line: the record's settings, both efficiencies and whether it regressed."""
    record = comparison.record
    return {"histogram": record.histogram, "strategy": record.strategy, "max_depth": record.max_depth,
            "recorded_efficiency": record.efficiency, "measured_efficiency": comparison.measured_efficiency,
            "regression": comparison.regressed}
