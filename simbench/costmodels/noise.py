"""Per-device step-time noise: what makes real steps vary beyond the work in their batches.

    >>> import numpy as np
    >>> factors = step_noise_factors(np.random.default_rng(0).standard_normal(200_000), cv=0.1)
    >>> round(float(factors.mean()), 2), round(float(factors.std()), 2)
    (1.0, 0.1)
"""

from __future__ import annotations

import numpy as np

from simbench.costmodels.base import BatchSet, CostModel, CostModelWrapper, ExecutionMode, StepCosts


def step_noise_factors(standard_normal: np.ndarray, cv: float) -> np.ndarray:
    """Mean-one lognormal multipliers with coefficient of variation `cv`, from standard normal draws.

    Lognormal because a time is positive and its slow outliers are longer than its fast ones;
    mean one so that noise moves the spread and the slowest device, not the average step.
    """
    if cv == 0:
        return np.ones_like(standard_normal, dtype=np.float64)
    log_variance = np.log1p(cv * cv)
    return np.exp(np.sqrt(log_variance) * standard_normal - log_variance / 2)


# The noise stream's place in the seed sequence: apart from every batch-drawing stream.
NOISE_STREAM = 0x6E6F697365


class StepNoise(CostModelWrapper):
    """A cost model whose un-padded batches take a mean-one lognormal factor longer or shorter each,
    drawn per batch (per device and step) with the model's `unpadded_noise_cv` (its hardware profile's).

    Fixed-shape modes are left as priced: real padded steps barely vary (see the profile field).
    Everything else is the wrapped model's. `with_step_noise` wraps only when the model has noise.
    """

    def __init__(self, cost_model: CostModel, rng: np.random.Generator):
        super().__init__(cost_model)
        self.rng = rng
        self.cv = cost_model.unpadded_noise_cv

    def step_costs(self, batches: BatchSet, mode: ExecutionMode) -> StepCosts:
        costs = self.cost_model.step_costs(batches, mode)
        if ExecutionMode(mode) is not ExecutionMode.UNPADDED:
            return costs
        factors = step_noise_factors(self.rng.standard_normal(batches.batches), self.cv)
        return StepCosts(costs.compute_seconds * factors, costs.padding_seconds * factors,
                         costs.overhead_seconds * factors, costs.masked_attention_seconds * factors,
                         costs.stall_seconds * factors)


def with_step_noise(cost_model: CostModel, seed: int) -> CostModel:
    """`cost_model` itself when it has no un-padded noise, else a `StepNoise` seeded from `seed`."""
    if not cost_model.unpadded_noise_cv:
        return cost_model
    return StepNoise(cost_model, np.random.default_rng([seed, NOISE_STREAM]))
