"""`simbench bound`: the certified LP lower bound on packs, the fewest any packer can reach."""

from __future__ import annotations

import time

import typer

from simbench.commands.common import command, print_json_lines, say


def bound(
    histogram_name: str = typer.Argument(..., metavar="HISTOGRAM", help="histogram CSV/JSON file or bundled name"),
    max_depth: int = typer.Option(None, "--max-depth", help="at most this many sequences per pack"),
    max_length: int = typer.Option(None, "--max-length", help="pack length in tokens [default: the histogram's]"),
    as_json: bool = typer.Option(False, "--json", help="JSON lines: the bound as one JSON object on one line"),
) -> None:
    """The fewest packs any packer can reach: the LP relaxation's optimum, rounded up."""
    from simbench.histogram import load_histogram
    from simbench.strategies.lp_bound import lp_lower_bound
    from simbench.validation import check_pack_limits

    histogram = load_histogram(histogram_name)
    max_length = check_pack_limits(histogram, max_length, max_depth)
    start = time.perf_counter()
    result = lp_lower_bound(histogram, max_length, max_depth)
    seconds = time.perf_counter() - start
    if as_json:
        print_json_lines([{"histogram": histogram_name, "max_length": max_length, "max_depth": max_depth,
                           "lp_value": result.value, "lower_bound_packs": result.lower_bound_packs,
                           "seconds": seconds, "cached": result.cached}])
        return
    depth = "no depth limit" if max_depth is None else f"depth <= {max_depth}"
    efficiency = histogram.real_tokens / (result.lower_bound_packs * max_length) if result.lower_bound_packs else 1.0
    stop = ("converged" if result.converged else "stopped early: Farley bound") if result.method == "column generation" \
        else result.method
    say(f"{histogram_name} at max length {max_length}, {depth}:\n"
        f"  lower bound {result.lower_bound_packs} packs (efficiency at most {100 * efficiency:.3f} %)\n"
        f"  LP value {result.value:.4f} ({stop}, {result.pricing_rounds} pricing rounds, "
        f"{'read from the cache in ' if result.cached else ''}{seconds:.2f} s)", stderr=False)


def register(app: typer.Typer) -> None:
    app.command()(command(bound))
