"""`simbench pack`: run packers on a histogram and print the packing paper's Table 1 metrics.

With --json one object per strategy per line as each finishes; --check-baseline compares with the records.
"""

from __future__ import annotations

from pathlib import Path

import typer

from simbench.commands.common import QUIET_HELP, command, print_json_lines, print_table, say, stage_lines
from simbench.errors import InputError

TABLE_COLUMNS = ("depth", "strategy", "strategies used", "packs", "tokens", "padding tokens", "efficiency %",
                 "packing factor", "seconds", "gap to LP bound %", "proof")


def pack(
    histogram_name: str = typer.Argument(..., metavar="HISTOGRAM", help="histogram CSV/JSON file or bundled name"),
    strategy: str = typer.Option("all", "--strategy", "-s", help="strategy name, or `all`"),
    max_depth: int = typer.Option(None, "--max-depth", help="at most this many sequences per pack [default: no limit]"),
    max_length: int = typer.Option(None, "--max-length", help="pack length in tokens [default: the histogram's]"),
    seed: int = typer.Option(0, "--seed", help="seed of the random shuffle (greedy)"),
    batch_size: int = typer.Option(32, "--batch-size", help="sequences per batch (sort)"),
    as_json: bool = typer.Option(False, "--json", help="JSON lines: one JSON object per strategy"),
    check_baseline: bool = typer.Option(False, "--check-baseline",
                                        help="compare with the recorded efficiencies; exit 1 where a packer needs more "
                                             "than one pack beyond its record"),
    baseline_path: Path = typer.Option(None, "--baseline", help="records for --check-baseline [default: bundled]"),
    bound: bool = typer.Option(None, "--bound/--no-bound",
                               help="compute the LP lower bound on packs [default: only where it is cheap]"),
    time_limit_seconds: float = typer.Option(None, "--time-limit", help="CPU seconds optimal may search for packs it "
                                             "can prove optimal, once it has its bound [default: 5]"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Pack HISTOGRAM with one strategy or all of them and report efficiency, packs and the gap to the LP bound."""
    from simbench.histogram import load_histogram
    from simbench.strategies import PackOptions, available_strategies, get_strategy
    from simbench.strategies.evaluation import pack_each
    from simbench.validation import check_pack_limits

    histogram = load_histogram(histogram_name)
    strategies = list(available_strategies().values()) if strategy == "all" else [get_strategy(strategy)]
    if check_baseline:
        if max_length is not None:
            # Records hold their own settings; measuring at another length would compare unlike runs.
            raise InputError("--check-baseline measures each record at the histogram's max length; "
                             "leave out --max-length")
        _check_baseline(histogram, [chosen.name for chosen in strategies], max_depth, baseline_path, as_json)
        return
    max_length = check_pack_limits(histogram, max_length, max_depth)
    limits = {} if time_limit_seconds is None else {"time_limit_seconds": time_limit_seconds}
    options = PackOptions(seed=seed, batch_size=batch_size, **limits)
    stage = stage_lines(None, quiet) or (lambda text: None)
    results = []
    for metrics in pack_each(strategies, histogram, max_length, max_depth, options, with_bound=bound,
                             skipped=lambda name, error: say(f"skipped {name}: {error}")):
        if as_json:
            print_json_lines([metrics])
        results.append(metrics)
        stage(f"packed {metrics['label']}: {metrics['packs']:,} packs in {metrics['seconds']:.2f} s")
    if not as_json:
        print_table(f"{histogram.name}: {histogram.sequences:,} sequences, max length {max_length}", TABLE_COLUMNS,
                    map(_metrics_row, results), left=["strategy", "proof"], no_wrap=True,
                    caption=_bound_caption(results))


def _bound_caption(results: list[dict]) -> str | None:
    """Each LP bound's depth and own time: computed once per depth, it is in no strategy's seconds but
    optimal's (which needs it)."""
    bounds = {metrics["bound_depth"]: metrics for metrics in results if metrics.get("bound_seconds") is not None}
    if not bounds:
        return None
    described = "; ".join(f"at depth {'max' if depth is None else depth}: {metrics['lower_bound_packs']:,} packs "
                          f"in {metrics['bound_seconds']:.3f} s" for depth, metrics in bounds.items())
    return (f"gap: to the LP bound on packs at each row's depth ({described}); "
            "seconds: each strategy alone, from scratch (optimal's include the bound); "
            "proof: packs proven optimal and by what, or the gap left and why")


def _metrics_row(metrics: dict) -> list[str]:
    from simbench.strategies.packing import efficiency_text

    depth = "max" if metrics["max_depth"] is None else str(metrics["max_depth"])
    if metrics["depth_used"] != metrics["max_depth"]:
        depth += f" ({metrics['depth_used']} used)"
    gap = f"{100 * metrics['gap_to_bound']:.3f}" if "gap_to_bound" in metrics else "-"
    return [depth, metrics["label"], f"{metrics['strategies_used']:,}", f"{metrics['packs']:,}",
            f"{metrics['tokens']:,}", f"{metrics['padding_tokens']:,}", efficiency_text(metrics["efficiency"], 3),
            f"{metrics['packing_factor']:.3f}", f"{metrics['seconds']:.3f}", gap, metrics["proof"] or "-"]


def _check_baseline(histogram, names: list[str], max_depth: int | None, baseline_path: Path | None,
                    as_json: bool) -> None:
    """Measure every matching record again; print the regressions and exit 1 if there are any."""
    from simbench.strategies.baseline import BASELINE_PATH
    from simbench.strategies.evaluation import baseline_comparisons, comparison_record

    baseline_path = baseline_path or BASELINE_PATH
    total, comparisons = baseline_comparisons(histogram, names, max_depth, baseline_path)
    rows = []
    for comparison in comparisons:
        if as_json:
            print_json_lines([comparison_record(comparison)])
        if comparison.regressed:
            record = comparison.record
            rows.append([record.histogram, record.strategy, "-" if record.max_depth is None else str(record.max_depth),
                         *(f"{100 * value:.6f}" for value in (record.efficiency, comparison.measured_efficiency,
                                                               comparison.shortfall)), f"{comparison.extra_packs:,.1f}"])
    if not as_json:
        if rows:
            print_table(f"regressions against {baseline_path.name}", ["histogram", "strategy", "depth", "recorded %",
                        "measured %", "shortfall (points)", "extra packs"], rows, left=["histogram", "strategy"])
        say(f"{total - len(rows)} of {total} records met, {len(rows)} regressions", stderr=False)
    if rows:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(command(pack))
