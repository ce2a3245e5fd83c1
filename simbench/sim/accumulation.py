"""Gradient accumulation: a device's optimizer step run as several microbatches, one after the other.

    >>> from simbench.costmodels.transformer import TransformerCostModel
    >>> from simbench.sim.accumulation import accumulating
    >>> type(accumulating(TransformerCostModel("bert-large", "a100"), 4)).__name__
    'AccumulatingCostModel'

A plan that `compare_at: equal-tokens` sizes beyond what a microbatch may hold runs its step's rows as
`microbatches` microbatches of equal token slots (cut as a 4D replica cuts them, `sim.replica`): each is
priced by the run's cost model and the step's fixed cost (optimizer update, step overhead) is paid once.
A 4D replica already runs microbatches: its layout takes the plan's count instead.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simbench.costmodels.base import BatchSet, CostModel, CostModelWrapper, ExecutionMode, StepCosts


class AccumulatingCostModel(CostModelWrapper):
    """`cost_model` with each batch run as `microbatches` microbatches; anything else is the wrapped model's."""

    def __init__(self, cost_model: CostModel, microbatches: int):
        super().__init__(cost_model)
        self.microbatches = microbatches

    def step_costs(self, batches: BatchSet, mode: ExecutionMode) -> StepCosts:
        from simbench.sim.batch_rows import _microbatch_of_row as microbatch_of_row

        m = self.microbatches
        micro = BatchSet(batches.sequence_lengths, batches.sequence_row, batches.row_slots,
                         microbatch_of_row(batches, m), batches.batches * m)
        costs = self.cost_model.step_costs(micro, mode)
        # A model that prices no fixed step cost apart (the linear one) has each microbatch priced whole.
        fixed = self.cost_model.fixed_step_seconds

        def per_step(values: np.ndarray) -> np.ndarray:
            return np.asarray(values, dtype=np.float64).reshape(batches.batches, m).sum(axis=1)

        overhead = per_step(costs.overhead_seconds) - (m - 1) * fixed
        return StepCosts(per_step(costs.compute_seconds), per_step(costs.padding_seconds), overhead,
                         per_step(costs.masked_attention_seconds), per_step(costs.stall_seconds))


def accumulating(cost_model: CostModel, microbatches: int) -> CostModel:
    """The cost model of a step in `microbatches` microbatches: a 4D replica's with its layout's count
    replaced, else `cost_model` itself for one and an `AccumulatingCostModel` for more."""
    from simbench.sim.replica import ReplicaCostModel

    if isinstance(cost_model, ReplicaCostModel):
        if cost_model.layout.microbatches == microbatches:
            return cost_model
        return ReplicaCostModel(cost_model.gpu_model, replace(cost_model.layout, microbatches=microbatches))
    return cost_model if microbatches == 1 else AccumulatingCostModel(cost_model, microbatches)
