"""Figures to the digits their spread supports, ties named together, and a run's spread across seeds."""

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.experiment import run_experiment
from simbench.report.precision import MAX_DECIMALS, MAX_SIGNIFICANT, decimals_for, decimals_shown, format_with_spread
from simbench.report.summary import _headline
from simbench.scenario import Scenario

values = st.floats(-1e6, 1e6, allow_nan=False)
spreads = st.floats(1e-9, 1e5)


@settings(max_examples=300, deadline=None)
@given(values, spreads)
def test_the_value_shown_is_the_value_rounded_to_the_last_digit_shown(value, spread):
    shown = format_with_spread(value, spread).split(" ± ")[0].replace(",", "")
    decimals = decimals_shown(value, spread)
    assert decimals <= decimals_for(spread)
    assert abs(float(shown) - value) <= 0.5 * 10.0 ** -decimals * (1 + 1e-9) + 1e-9 * abs(value)
    assert len(shown.partition(".")[2]) == max(decimals, 0)
    # No more significant digits than MAX_SIGNIFICANT, however narrow the spread (a rounding up, 9,999.6 to
    # 10,000, may end on a fifth digit that is a zero).
    digits = shown.lstrip("-").replace(".", "").lstrip("0").rstrip("0")
    assert len(digits) <= MAX_SIGNIFICANT


@settings(max_examples=300, deadline=None)
@given(values, spreads)
def test_no_digit_finer_than_the_spread_or_max_decimals(value, spread):
    decimals = decimals_for(spread)
    assert decimals <= MAX_DECIMALS
    # The last digit shown is the spread's first significant digit (after rounding, up to 0.95 -> 1), never finer.
    assert 10.0 ** -decimals <= spread * 1.06 or decimals == MAX_DECIMALS
    assert 10.0 ** -decimals > spread / 10 or decimals == MAX_DECIMALS


@settings(max_examples=300, deadline=None)
@given(values, spreads)
def test_the_spread_shows_one_significant_digit_or_not_at_all(value, spread):
    text = format_with_spread(value, spread)
    if " ± " in text:
        digits = text.split(" ± ")[1].replace(",", "").replace(".", "").strip("0")
        assert len(digits) == 1
        decimals = decimals_shown(value, spread)
        assert abs(float(text.split(" ± ")[1].replace(",", "")) - spread) <= 0.5 * 10.0 ** -decimals + 1e-12
    else:  # left out only where it rounds to nothing at the decimals shown
        assert round(spread, decimals_shown(value, spread)) == 0


@settings(max_examples=200, deadline=None)
@given(values, spreads, spreads)
def test_a_wider_spread_never_shows_more_digits(value, first, second):
    narrow, wide = sorted([first, second])
    assert decimals_for(wide) <= decimals_for(narrow)


def test_the_examples_read_as_documented():
    assert format_with_spread(9.544, 0.23, "x") == "9.5x ± 0.2"
    assert format_with_spread(1.9148, 0.0004) == "1.915"
    assert format_with_spread(2.0, 0.0) == "2.000"
    assert format_with_spread(1.892, 0.096) == "1.9 ± 0.1"
    assert format_with_spread(7621.97, 0.01) == "7,622"
    assert format_with_spread(123456.0, 3.0) == "123,500"


def test_the_answer_names_every_strategy_whose_speedup_equals_the_fastest():
    table = pd.DataFrame([("none", 1, 1.0, 0.0), ("ffd:max", 1, 9.5, 0.01), ("lpfhp:max", 1, 9.5, 0.01),
                          ("sort", 1, 3.0, 0.01)], columns=["strategy", "devices", "speedup", "throughput_noise"])
    table = table.assign(reference="none", speedup_noise=table["throughput_noise"])
    headline = _headline(table)
    assert "**ffd:max** and **lpfhp:max** tie at 9.5x ± 0.1" in headline
    assert "fastest strategy is" not in headline and "sort" not in headline
    # equal figures are too close to rank whatever the sampling: the words say that, not a 0.0 % standard error
    assert "they differ by under 0.1 %, too close to rank" in headline and "standard error" not in headline


def test_strategies_that_tie_apart_are_each_named_with_their_own_speedup():
    """Tied within a wide spread but 6 % apart: one figure for all would hide the gap."""
    table = pd.DataFrame([("none", 1, 1.0, 0.0), ("ffd:max", 1, 9.5, 0.05), ("packed-varlen:ffd:max", 1, 8.95, 0.05)],
                         columns=["strategy", "devices", "speedup", "throughput_noise"])
    table = table.assign(reference="none", speedup_noise=table["throughput_noise"])
    headline = _headline(table)
    assert "**ffd:max** (9.5x ± 0.5) and **packed-varlen:ffd:max** (8.9x ± 0.4) tie over padding to max" in headline
    assert "a difference's standard error reaches 7.1 %" in headline


SCENARIO = dict(name="seeds", dataset={"histogram": "squad_1_1_384"}, strategies=["sort", "unpad"], devices=[1, 4],
                steps=6, outputs={"lp_bounds": False})


def test_the_spread_columns_equal_a_recomputation_over_the_seeds():
    seeds = 3
    combined = run_experiment(Scenario(**SCENARIO, seed=5, seeds=seeds), stragglers=False, assumptions=False).scaling
    each = [run_experiment(Scenario(**SCENARIO, seed=seed), stragglers=False, assumptions=False).scaling
            for seed in range(5, 5 + seeds)]
    for column in ("speedup", "tokens_per_s"):
        values = np.array([table[column].to_numpy() for table in each])
        assert np.allclose(combined[column], values.mean(axis=0))
        sd = [np.sqrt(sum((v - row.mean()) ** 2 for v in row) / (seeds - 1)) for row in values.T]
        assert np.allclose(combined[f"{column}_seed_sd"], sd)
        assert np.allclose(combined[f"{column}_seed_sem"], np.array(sd) / math.sqrt(seeds))
    assert (combined["seeds"] == seeds).all()
    assert (combined.loc[combined["strategy"] == "unpad", "speedup_seed_sd"] > 0).all()


def test_one_seed_is_the_run_without_the_key():
    plain = run_experiment(Scenario(**SCENARIO), stragglers=False, assumptions=False).scaling
    one = run_experiment(Scenario(**SCENARIO, seeds=1), stragglers=False, assumptions=False).scaling
    pd.testing.assert_frame_equal(plain, one)
    assert "seeds" not in one
