"""Per-device step noise fitted on timed steps: synthetic steps with a known CV give it back."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.calibrate.noisefit import fit_step_noise
from simbench.costmodels.noise import step_noise_factors
from simbench.errors import InputError


def _steps(cv, steps=4000, seed=0):
    rng = np.random.default_rng(seed)
    # Batches whose priced work differs fivefold: content the fit must not take for noise.
    predicted = rng.uniform(0.01, 0.05, steps)
    return predicted * step_noise_factors(rng.standard_normal(steps), cv), predicted


@pytest.mark.parametrize("cv", [0.02, 0.092, 0.115, 0.3])
def test_a_known_cv_is_recovered_from_synthetic_steps(cv):
    measured, predicted = _steps(cv)
    # 4,000 steps: the sample log-variance is within about 2 x sqrt(2 / 4000) = 4.5 % of the truth.
    assert fit_step_noise(measured, predicted).cv == pytest.approx(cv, rel=0.05)


def test_steps_priced_exactly_have_no_noise_and_the_scale_of_the_prediction_does_not_matter():
    measured, predicted = _steps(0.0)
    assert fit_step_noise(measured, predicted).cv == pytest.approx(0.0, abs=1e-12)
    noisy, predicted = _steps(0.1)
    assert fit_step_noise(noisy, 3 * predicted).cv == pytest.approx(fit_step_noise(noisy, predicted).cv)


@settings(max_examples=30, deadline=None)
@given(st.floats(0.05, 0.3), st.floats(0.01, 0.1), st.integers(0, 2**16))
def test_timing_noise_over_the_repeats_is_taken_out(cv, timing_cv, seed):
    # pi / (2 x rounds) is the large-sample variance of a median: where timing noise dwarfs the steps'
    # own, its few-percent error at 9 rounds dominates the small difference left, so it is not tried.
    rng = np.random.default_rng(seed)
    measured, predicted = _steps(cv, steps=3000, seed=seed)
    rounds = 9
    # Each round times the step with its own error; the step's median keeps part of it.
    round_seconds = measured[:, None] * step_noise_factors(rng.standard_normal((measured.size, rounds)), timing_cv)
    medians = np.median(round_seconds, axis=1)
    fit = fit_step_noise(medians, predicted, round_seconds)
    assert fit.spread_cv >= fit.cv
    assert fit.cv == pytest.approx(cv, rel=0.1, abs=0.01)


def test_bad_step_times_are_one_line():
    with pytest.raises(InputError, match="at least 3 timed steps"):
        fit_step_noise([1.0, 1.1], [1.0, 1.0])
    with pytest.raises(InputError, match="positive and finite"):
        fit_step_noise([1.0, -1.0, 1.0], [1.0, 1.0, 1.0])
    with pytest.raises(InputError, match="one length"):
        fit_step_noise([1.0, 1.0, 1.0], [1.0, 1.0])
