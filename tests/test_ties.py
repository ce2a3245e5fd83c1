"""The Answer calls a lead inside the run's sampling noise a tie, never a win."""

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.report.summary import MIN_LEAD, TIE_SIGMAS, _headline, _winners_table
from simbench.sim.results import _ratio_of_means_error


def scaling(rows):
    frame = pd.DataFrame(rows, columns=["strategy", "devices", "speedup", "throughput_noise"])
    return frame.assign(reference="none")


def test_a_lead_within_the_noise_is_a_tie():
    table = scaling([("none", 1, 1.0, 0.0), ("a", 1, 1.950, 0.01), ("b", 1, 1.940, 0.01)])
    headline = _headline(table)
    assert "**a** (1.950x) and **b** (1.940x) tie" in headline and "fastest strategy is" not in headline
    # the table names both as fastest; its runner-up is the first strategy they lead clearly
    assert "| a and b | 1.950 | none | 1.000 | 95.0 |" in _winners_table(table)
    alone = scaling([("a", 1, 1.950, 0.01), ("b", 1, 1.940, 0.01)])
    assert "| a and b | 1.950 | - | - | all tie |" in _winners_table(alone)


def test_a_clear_lead_is_a_win():
    table = scaling([("none", 1, 1.0, 0.0), ("a", 1, 2.0, 0.001), ("b", 1, 1.9, 0.001)])
    assert "the fastest strategy is **a**, 2.000x" in _headline(table)


def test_a_change_of_winner_inside_the_noise_is_no_change():
    table = scaling([("none", 1, 1.0, 0.0), ("a", 1, 1.95, 0.01), ("b", 1, 1.94, 0.01),
                     ("none", 8, 1.0, 0.0), ("a", 8, 1.94, 0.01), ("b", 8, 1.95, 0.01)])
    assert "winner changes" not in _headline(table)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 20.0), st.floats(0.0, 0.05)), min_size=2, max_size=20))
def test_no_winner_is_declared_inside_its_noise(strategies):
    table = scaling([("none", 1, 1.0, 0.0)] + [(f"s{i}", 1, speedup, noise)
                                                for i, (speedup, noise) in enumerate(strategies)])
    # Ranked as the Answer ranks them: equal speed-ups by name, so that the runner-up is one strategy whatever the order.
    ranked = table.sort_values(["speedup", "strategy"], ascending=[False, True], kind="stable")
    first, second = ranked.iloc[0], ranked.iloc[1]
    lead = first.speedup / second.speedup - 1
    inside = lead < MIN_LEAD or lead <= TIE_SIGMAS * np.hypot(first.throughput_noise, second.throughput_noise)
    headline = _headline(table)
    assert ("fastest strategy is" in headline) != inside


def test_the_noise_of_a_constant_run_is_zero_and_grows_with_spread():
    steps = 400
    assert _ratio_of_means_error(np.full(steps, 100.0), np.full(steps, 2.0)) == 0
    rng = np.random.default_rng(0)
    tokens = rng.normal(100, 10, steps)
    assert abs(_ratio_of_means_error(tokens, np.full(steps, 2.0)) - 0.1 / np.sqrt(steps)) < 0.002
