"""First sight of batch shapes: the rate of new shapes against closed forms, and what each `shapes` choice costs."""

import numpy as np
import pytest

import simbench
from simbench.sim.shapes import new_shape_rate


def test_new_shape_rate_counts_distinct_shapes_over_the_run():
    keys = np.random.default_rng(0).integers(0, 50, 10_000)
    assert new_shape_rate(keys, 10_000) == pytest.approx(50 / 10_000)
    assert new_shape_rate(np.arange(100), 100) == 1.0


def test_new_shape_rate_beyond_the_sample_keeps_the_unseen_mass():
    # Every draw new: the Good-Turing unseen mass is 1, so every further step is new too.
    assert new_shape_rate(np.arange(1_000), 1_000_000) == pytest.approx(1.0)
    # A few shapes, all seen often: nothing further is new.
    keys = np.tile(np.arange(5), 200)
    assert new_shape_rate(keys, 1_000_000) == pytest.approx(5 / 1_000_000)


def test_expected_distinct_matches_the_closed_form():
    """E[D(S)] = sum over shapes of 1 - (1 - p)^S for i.i.d. draws."""
    rng = np.random.default_rng(1)
    p = np.array([0.5, 0.3, 0.15, 0.04, 0.01])
    steps = 60
    rates = [new_shape_rate(rng.choice(p.size, steps, p=p), steps) for _ in range(4_000)]
    assert np.mean(rates) * steps == pytest.approx(np.sum(1 - (1 - p) ** steps), rel=0.02)


@pytest.fixture(scope="module")
def runs():
    strategies = ["lpfhp:max", "token-budget", "unpad"]
    return {shapes: simbench.simulate("squad_1_1_384", strategies, [1, 16], model="bert-large", hardware="h200",
                                      batch_size=16, steps=60, seed=0, shapes=shapes, baseline="none")
            for shapes in ("seen", "auto", "new")}


def _speedup(result, strategy, devices):
    summary = result.summary
    return float(summary[(summary.strategy == strategy) & (summary.devices == devices)].speedup.iloc[0])


def test_fixed_shapes_pay_first_sight_once_per_run(runs):
    # Packs and padding (the baseline here) have one shape each: their ratio does not move with `shapes`.
    for shapes in ("auto", "new"):
        assert _speedup(runs[shapes], "lpfhp:max", 16) == pytest.approx(_speedup(runs["seen"], "lpfhp:max", 16),
                                                                         rel=0.01)


def test_new_shapes_slow_variable_shape_batches(runs):
    seen, auto, new = (_speedup(runs[s], "token-budget", 1) for s in ("seen", "auto", "new"))
    assert new < auto <= seen
    # More devices, more chances that one of them meets a new shape and stalls the step.
    assert _speedup(runs["auto"], "token-budget", 16) < auto


def test_same_seed_same_result(runs):
    again = simbench.simulate("squad_1_1_384", ["token-budget"], [16], model="bert-large", hardware="h200",
                              batch_size=16, steps=60, seed=0, shapes="auto", baseline="none")
    assert _speedup(again, "token-budget", 16) == _speedup(runs["auto"], "token-budget", 16)
