"""Per-device step noise fitted on timed steps: how much real steps vary beyond what their batches' work explains.

    >>> import numpy as np
    >>> from simbench.costmodels.noise import step_noise_factors
    >>> rng = np.random.default_rng(0)
    >>> predicted = rng.uniform(0.01, 0.05, 4000)
    >>> measured = predicted * step_noise_factors(rng.standard_normal(4000), cv=0.1)
    >>> round(fit_step_noise(measured, predicted).cv, 2)
    0.1

The model is the one `simbench fit-logs` fits and the simulator draws (`costmodels.noise`): each step's
device time is its priced work times a mean-one lognormal factor. A log gives only each step's
throughput, so fit-logs matches the spread of simulated steps to the log's; `simbench measure` times
known batches, so each step's priced work is known and the factor is seen directly, step by step, as
measured over predicted seconds. The factor's log-variance is that ratio's, less the part the repeated
timings of one step show to be the machine's timing noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbench.errors import InputError
from simbench.validation import check_whole_number

MIN_STEPS = 3


@dataclass(frozen=True)
class NoiseFit:
    """The fitted coefficient of variation and what it was fitted on."""

    cv: float
    steps: int
    spread_cv: float  # the measured-over-predicted spread before the timing noise is taken out
    timing_noise_cv: float  # one step's timing noise over its repeats, as left in the step's median


def fit_step_noise(measured_seconds, predicted_seconds, round_seconds=None) -> NoiseFit:
    """The mean-one lognormal factor's CV that explains the steps' measured over predicted seconds.

    `round_seconds` (steps, rounds), each round's load factored out, gives the timing noise of a
    step's median: its log-variance over the rounds, times pi / (2 x rounds), is taken out of the
    ratio's, so a machine's load is not mistaken for the steps' own variation.
    """
    measured = np.asarray(measured_seconds, dtype=np.float64)
    predicted = np.asarray(predicted_seconds, dtype=np.float64)
    if measured.shape != predicted.shape or measured.ndim != 1:
        raise InputError(f"measured and predicted step seconds must be two lists of one length, found shapes "
                         f"{measured.shape} and {predicted.shape}")
    if measured.size < MIN_STEPS:
        raise InputError(f"fitting step noise needs at least {MIN_STEPS} timed steps, found {measured.size}")
    if not (np.all(np.isfinite(measured)) and np.all(measured > 0) and np.all(np.isfinite(predicted))
            and np.all(predicted > 0)):
        raise InputError("step seconds must be positive and finite to fit step noise")
    log_variance = float(np.var(np.log(measured / predicted), ddof=1))
    timing_variance = 0.0
    if round_seconds is not None:
        rounds = np.asarray(round_seconds, dtype=np.float64)
        if rounds.shape[0] != measured.size or rounds.ndim != 2 or rounds.shape[1] < 2:
            raise InputError(f"round seconds must be (steps, rounds >= 2), found shape {rounds.shape}")
        # A step's seconds are the median of its rounds, whose variance is about pi / 2 times the mean's.
        timing_variance = float(np.mean(np.var(np.log(rounds), axis=1, ddof=1))) * np.pi / (2 * rounds.shape[1])
    return NoiseFit(cv=_lognormal_cv(max(log_variance - timing_variance, 0.0)), steps=int(measured.size),
                    spread_cv=_lognormal_cv(log_variance), timing_noise_cv=_lognormal_cv(timing_variance))


def _lognormal_cv(log_variance: float) -> float:
    return float(np.sqrt(np.expm1(log_variance)))


# measure judges its errors by the speed-up's spread across repeats (`measure_compare.judge`): two are the fewest
# with one.
MEASURE_REPEATS_MIN = 2


def check_measure_repeats(repeats) -> int:
    """measure's repeats: a whole number >= MEASURE_REPEATS_MIN, refused with the reason (before torch is needed)."""
    repeats = check_whole_number(repeats, "repeats", minimum=1)
    if repeats < MEASURE_REPEATS_MIN:
        raise InputError(f"repeats must be at least {MEASURE_REPEATS_MIN}, found {repeats}: measure tells the cost "
                         "model's errors from the machine's noise by the speed-up's spread across repeats, and one "
                         "repeat has no spread", parameter="repeats")
    return repeats
