"""Per-device step-time noise: what makes real steps vary beyond the work in their batches.

    >>> import numpy as np
    >>> factors = step_noise_factors(np.random.default_rng(0).standard_normal(200_000), cv=0.1)
    >>> round(float(factors.mean()), 2), round(float(factors.std()), 2)
    (1.0, 0.1)
"""

from __future__ import annotations

import numpy as np


def step_noise_factors(standard_normal: np.ndarray, cv: float) -> np.ndarray:
    """Mean-one lognormal multipliers with coefficient of variation `cv`, from standard normal draws.

    Lognormal because a time is positive and its slow outliers are longer than its fast ones;
    mean one so that noise moves the spread and the slowest device, not the average step.
    """
    if cv == 0:
        return np.ones_like(standard_normal, dtype=np.float64)
    log_variance = np.log1p(cv * cv)
    return np.exp(np.sqrt(log_variance) * standard_normal - log_variance / 2)
