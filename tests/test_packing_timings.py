"""Timings: a strategy's `seconds` are what it costs alone, from scratch; the LP bound has its own time."""

import json

from typer.testing import CliRunner

from simbench.cli import app
from simbench.histogram import LengthHistogram
from simbench.strategies import get_strategy
from simbench.strategies.lp_bound import clear_cache, lp_lower_bound

COUNTS = [(length * 7) % 5 for length in range(1, 65)]


def test_optimal_pays_for_a_bound_another_caller_already_computed():
    histogram = LengthHistogram.from_counts(COUNTS)
    clear_cache()
    bound = lp_lower_bound(histogram, 64, 3)
    packing = get_strategy("optimal")(histogram, 64, 3)
    assert packing.seconds >= bound.seconds > 0


def test_pack_all_computes_the_bound_once_and_reports_its_time_apart(tmp_path):
    path = tmp_path / "small.csv"
    LengthHistogram.from_counts(COUNTS).to_csv(path)
    clear_cache()
    result = CliRunner().invoke(app, ["pack", str(path), "--max-depth", "3", "--json", "--bound"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.strip().splitlines()]
    fixed_shape = [metrics for metrics in lines if metrics["bound_seconds"] is not None]
    assert len(fixed_shape) >= 6
    # One computation per depth (`none` packs at depth 1), one time: a second would have measured another.
    times = {}
    for metrics in fixed_shape:
        times.setdefault(metrics["max_depth"], set()).add(metrics["bound_seconds"])
    assert all(len(seconds) == 1 for seconds in times.values()), times
    optimal = next(metrics for metrics in lines if metrics["strategy"] == "optimal")
    assert optimal["seconds"] >= optimal["bound_seconds"]
    assert all(metrics["seconds"] > 0 for metrics in lines)
