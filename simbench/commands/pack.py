"""`simbench pack`: run packers on a histogram and print the packing paper's Table 1 metrics.

With --json one object per strategy per line as each finishes; --check-baseline compares with the records.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from simbench.errors import InputError
from simbench.histogram import LengthHistogram, load_histogram
from simbench.commands.common import command, print_json_lines
from simbench.strategies import PackOptions, Strategy, available_strategies, get_strategy
from simbench.strategies.baseline import BASELINE_PATH, compare_with_baseline, load_baseline
from simbench.validation import check_pack_limits


def pack(
    histogram_name: str = typer.Argument(..., metavar="HISTOGRAM", help="histogram CSV/JSON file or bundled name"),
    strategy: str = typer.Option("all", "--strategy", "-s", help="strategy name, or `all`"),
    max_depth: int = typer.Option(None, "--max-depth", help="at most this many sequences per pack [default: no limit]"),
    max_length: int = typer.Option(None, "--max-length", help="pack length in tokens [default: the histogram's]"),
    seed: int = typer.Option(0, "--seed", help="seed of the random shuffle (greedy)"),
    batch_size: int = typer.Option(32, "--batch-size", help="sequences per batch (sort)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per strategy per line"),
    check_baseline: bool = typer.Option(False, "--check-baseline",
                                        help="compare with the recorded efficiencies; exit 1 on a regression"),
    baseline_path: Path = typer.Option(BASELINE_PATH, "--baseline", help="records for --check-baseline"),
) -> None:
    """Pack HISTOGRAM with one strategy or all of them and report efficiency, packs and the gap to the LP bound."""
    histogram = load_histogram(histogram_name)
    strategies = list(available_strategies().values()) if strategy == "all" else [get_strategy(strategy)]
    if check_baseline:
        if max_length is not None:
            # Records hold their own settings; measuring at another length would compare unlike runs.
            raise InputError("--check-baseline measures each record at the histogram's max length; "
                             "leave out --max-length")
        _check_baseline(histogram, strategies, max_depth, baseline_path, as_json)
        return
    max_length = check_pack_limits(histogram, max_length, max_depth)
    options = PackOptions(seed=seed, batch_size=batch_size)
    errors = Console(stderr=True)
    results = []
    for chosen in strategies:
        try:
            metrics = _run(chosen, histogram, max_length, max_depth, options)
        except InputError as error:
            if len(strategies) == 1:
                raise
            errors.print(f"skipped {chosen.name}: {error}", highlight=False, soft_wrap=True)
            continue
        if as_json:
            print_json_lines([metrics])
        results.append(metrics)
    if not as_json:
        # The table is as wide as the paper's; piped output should not fold it into 80 columns.
        console = Console()
        Console(width=max(console.width, 150)).print(_metrics_table(histogram, max_length, results))


def _run(strategy: Strategy, histogram: LengthHistogram, max_length: int, max_depth: int | None,
         options: PackOptions) -> dict:
    packing = strategy(histogram, max_length, max_depth, options)
    fixed_shape = bool((packing.slot_lengths == max_length).all())
    lower_bound = _lower_bound_packs(histogram, max_length, max_depth) if fixed_shape else None
    return packing.metrics(lower_bound)


def _lower_bound_packs(histogram: LengthHistogram, max_length: int, max_depth: int | None) -> int:
    """The LP bound on packs, cached by the optimal module so that every strategy can ask."""
    from simbench.strategies.optimal import lp_lower_bound

    return lp_lower_bound(histogram, max_length, max_depth).lower_bound_packs


def _metrics_table(histogram: LengthHistogram, max_length: int, results: list[dict]) -> Table:
    table = Table(title=f"{histogram.name}: {histogram.sequences:,} sequences, max length {max_length}")
    for heading in ("depth", "algorithm", "strategies used", "packs", "tokens", "padding tokens",
                    "efficiency %", "packing factor", "seconds", "gap to LP bound %"):
        table.add_column(heading, justify="left" if heading == "algorithm" else "right")
    for metrics in results:
        depth = "max" if metrics["max_depth"] is None else str(metrics["max_depth"])
        if metrics["depth_used"] != metrics["max_depth"]:
            depth += f" ({metrics['depth_used']} used)"
        gap = f"{100 * metrics['gap_to_bound']:.3f}" if "gap_to_bound" in metrics else "-"
        table.add_row(depth, metrics["strategy"], f"{metrics['strategies_used']:,}", f"{metrics['packs']:,}",
                      f"{metrics['tokens']:,}", f"{metrics['padding_tokens']:,}", f"{100 * metrics['efficiency']:.3f}",
                      f"{metrics['packing_factor']:.3f}", f"{metrics['seconds']:.3f}", gap)
    return table


def _check_baseline(histogram: LengthHistogram, strategies: list[Strategy], max_depth: int | None,
                    baseline_path: Path, as_json: bool) -> None:
    """Measure every matching record again; print the regressions and exit 1 if there are any."""
    names = {strategy.name for strategy in strategies}
    records = [record for record in load_baseline(baseline_path)
               if Path(record.histogram).stem == histogram.name and record.strategy in names
               and (max_depth is None or record.max_depth == max_depth)]
    if not records:
        raise InputError(f"no records for histogram {histogram.name} and strategy "
                         f"{'all' if len(names) > 1 else next(iter(names))} in the baseline", source=str(baseline_path))
    table = Table(title=f"regressions against {baseline_path.name}")
    for heading in ("histogram", "strategy", "depth", "recorded %", "measured %", "shortfall (points)"):
        table.add_column(heading, justify="left" if heading in ("histogram", "strategy") else "right")
    regressions = 0
    for comparison in compare_with_baseline(records):
        record, measured = comparison.record, comparison.measured_efficiency
        regressions += comparison.regressed
        if as_json:
            print(json.dumps({"histogram": record.histogram, "strategy": record.strategy,
                              "max_depth": record.max_depth, "recorded_efficiency": record.efficiency,
                              "measured_efficiency": measured, "regression": comparison.regressed}), flush=True)
        if comparison.regressed:
            depth = "-" if record.max_depth is None else str(record.max_depth)
            table.add_row(record.histogram, record.strategy, depth, f"{100 * record.efficiency:.6f}",
                          f"{100 * measured:.6f}", f"{100 * comparison.shortfall:.6f}")
    if not as_json:
        console = Console()
        if regressions:
            console.print(table)
        console.print(f"{len(records) - regressions} of {len(records)} records met, {regressions} regressions",
                      highlight=False)
    if regressions:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(command(pack))
